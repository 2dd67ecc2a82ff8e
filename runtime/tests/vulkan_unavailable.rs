//! A machine whose Vulkan loader finds no driver gets a typed `Unavailable` error from the
//! Vulkan device that says what failed (never a panic). The loader is pointed at a driver
//! manifest that does not exist, which is what a machine without a Vulkan driver looks like
//! to it; this test binary holds only this test, so the variables touch nothing else.

use poot_runtime::DeviceError;
use poot_runtime::devices::vulkan::{VulkanDevice, VulkanOptions};

#[test]
fn no_vulkan_driver_is_a_typed_error() {
    // SAFETY: set before any thread of this process reads the environment.
    unsafe {
        std::env::set_var("VK_DRIVER_FILES", "/nonexistent/poot_icd.json");
        std::env::set_var("VK_ICD_FILENAMES", "/nonexistent/poot_icd.json");
    }
    match VulkanDevice::new(&VulkanOptions::default()) {
        Err(DeviceError::Unavailable(msg)) => {
            println!("{msg}");
            assert!(
                msg.contains("no Vulkan driver") || msg.contains("no Vulkan loader"),
                "{msg}"
            );
        }
        Err(other) => panic!("expected Unavailable, got {other}"),
        Ok(_) => panic!("a Vulkan device opened without any driver manifest"),
    }
}
