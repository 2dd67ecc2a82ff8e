//! On a machine without the NVIDIA driver, opening the CUDA device is a typed `Unavailable`
//! error that says the library is missing (never a panic). Where a driver is present the
//! check cannot be made: the test prints `SKIP` and says so.
#![cfg(feature = "cuda")]

use poot_runtime::DeviceError;
use poot_runtime::devices::cuda::{CudaDevice, CudaOptions};

#[test]
fn missing_driver_is_a_typed_error() {
    match CudaDevice::new(&CudaOptions::default()) {
        Ok(_) => println!("SKIP missing_driver_is_a_typed_error: this machine has a CUDA driver"),
        Err(DeviceError::Unavailable(msg)) => {
            if std::env::var("POOT_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("POOT_REQUIRE_GPU=1 but CUDA is unavailable: {msg}");
            }
            assert!(
                msg.contains("libcuda.so was not found") || msg.contains("no CUDA device"),
                "{msg}"
            )
        }
        Err(other) => panic!("expected Unavailable, got {other}"),
    }
}
