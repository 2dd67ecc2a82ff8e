//! Fuzzes `poot_bundle::open_bytes`: no input may panic, and every bundle that opens must
//! answer every query (weights, entries, targets, `inspect`) without panicking either.

#![no_main]

use libfuzzer_sys::fuzz_target;
use poot_bundle::{Target, inspect, open_bytes};

fuzz_target!(|data: &[u8]| {
    let Ok(bundle) = open_bytes(data.to_vec()) else {
        return;
    };
    let manifest = bundle.manifest();
    for info in &manifest.weights {
        assert!(
            bundle.weight(info).is_ok(),
            "a validated weight is readable"
        );
    }
    for entry in &manifest.entries {
        assert!(bundle.entry(&entry.key).is_ok(), "a listed entry is found");
    }
    let _ = bundle.target(&[Target::Ptx { sm: 90 }, Target::Spirv { native_subgroups: false }, Target::Reference]);
    let _ = inspect(&bundle);
});
