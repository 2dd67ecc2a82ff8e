//! Shared by the SPIR-V tests: the conformance kernels (`poot_kir::conformance`), the targets, and the two
//! validators every rendered module must pass: Khronos' `spirv-val` (the Vulkan path) and
//! naga's SPIR-V front end plus validator (the wgpu path).

#![allow(dead_code)]

#[allow(unused_imports)]
pub use poot_kir::conformance::*;

use poot_codegen_spirv::SpirvTarget;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every target the goldens cover, by tag.
pub fn targets() -> [(&'static str, SpirvTarget); 3] {
    [
        ("vulkan12", SpirvTarget::vulkan12()),
        ("lavapipe", SpirvTarget::lavapipe()),
        ("portable", SpirvTarget::portable()),
    ]
}

/// `spirv-val` when it runs (it is found on `PATH`); `None` prints `SKIP spirv-val not found`,
/// and fails the test instead when `POOT_REQUIRE_SPIRV_VAL=1`.
pub fn spirv_val() -> Option<PathBuf> {
    let p = PathBuf::from("spirv-val");
    let works = Command::new(&p)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if works {
        return Some(p);
    }
    assert!(
        std::env::var("POOT_REQUIRE_SPIRV_VAL").as_deref() != Ok("1"),
        "POOT_REQUIRE_SPIRV_VAL=1 but spirv-val was not found (apt-get install spirv-tools)"
    );
    println!("SKIP spirv-val not found");
    None
}

/// Runs `spirv-val --target-env vulkan1.2` on `words`; the error is its output.
pub fn run_spirv_val(tool: &PathBuf, words: &[u32], name: &str) -> Result<(), String> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("poot-spirv-val-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let n = N.fetch_add(1, Ordering::Relaxed);
    let file = dir.join(format!("{n}-{name}.spv"));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&file, bytes).map_err(|e| e.to_string())?;
    let out = Command::new(tool)
        .args(["--target-env", "vulkan1.2"])
        .arg(&file)
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&file);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Parses `words` with naga's SPIR-V front end and validates the module with every check
/// and capability on (what wgpu does with a SPIR-V shader).
pub fn run_naga(words: &[u32]) -> Result<(), String> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let module = naga::front::spv::parse_u8_slice(&bytes, &naga::front::spv::Options::default())
        .map_err(|e| format!("naga spv-in: {e:?}"))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| format!("naga validator: {:?}", e.into_inner()))?;
    Ok(())
}
