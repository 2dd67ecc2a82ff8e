//! End-to-end test support: where the real checkpoints and fixtures are.
//!
//! Real checkpoints live in `$POOT_MODELS` (default `~/.cache/poot/models`), put there by
//! `scripts/fetch-models`. A missing checkpoint fails the test with the command that fetches
//! it: these tests are the oracle and must never pass by being skipped.

use std::path::PathBuf;

/// A real checkpoint the tests use.
#[derive(Clone, Copy, Debug)]
pub enum Checkpoint {
    /// SmolLM2-135M-Instruct, llama, GGUF Q4_1/Q8_0.
    SmolLm2,
    /// Qwen2.5-Coder-0.5B-Instruct, qwen2, GGUF Q5_0/Q8_0/Q4_K/Q6_K.
    Qwen05,
}

impl Checkpoint {
    /// The fixture name (`smollm2`, `qwen05`).
    pub fn name(self) -> &'static str {
        match self {
            Checkpoint::SmolLm2 => "smollm2",
            Checkpoint::Qwen05 => "qwen05",
        }
    }
    fn file(self) -> &'static str {
        match self {
            Checkpoint::SmolLm2 => "SmolLM2-135M-Instruct.Q4_1.gguf",
            Checkpoint::Qwen05 => "qwen2.5-coder-0.5b-instruct.gguf",
        }
    }
    /// The checkpoint's path; panics with the fetch command when it is missing.
    pub fn path(self) -> PathBuf {
        let dir = std::env::var_os("POOT_MODELS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME").unwrap_or_default();
                PathBuf::from(home).join(".cache/poot/models")
            });
        let p = dir.join(self.file());
        assert!(
            p.exists(),
            "{} is missing: run `scripts/fetch-models {}` (or set POOT_MODELS)",
            p.display(),
            self.name()
        );
        p
    }
}

/// A file under `tests/fixtures/`, found at run time (tests may run on another machine).
pub fn fixture(rel: &str) -> PathBuf {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    PathBuf::from(root).join("fixtures").join(rel)
}

/// Reads a JSON fixture.
pub fn json(rel: &str) -> serde_json::Value {
    let p = fixture(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The ids of a JSON array.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u32)
                .collect()
        })
        .unwrap_or_default()
}

pub mod faults;
#[cfg(feature = "cuda")]
pub mod sanitizer;
pub mod tier2;
pub mod tier3;

/// Whether a missing device must fail the test (`POOT_REQUIRE_GPU=1`) instead of skipping.
pub fn require_gpu() -> bool {
    std::env::var("POOT_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Whether a missing Vulkan or wgpu device must fail the test: on the GPU machine, and in CI
/// where lavapipe is installed (`POOT_REQUIRE_LAVAPIPE=1`).
pub fn require_spirv_device() -> bool {
    require_gpu() || std::env::var("POOT_REQUIRE_LAVAPIPE").is_ok_and(|v| v == "1")
}

/// The engine over an opened device, or `None` after printing `SKIP <test>: <why>`; when
/// `required`, a device that did not open fails the test instead.
pub fn engine_or_skip<D: poot_runtime::Device>(
    test: &str,
    opened: Result<D, poot_runtime::DeviceError>,
    required: bool,
) -> Option<poot_runtime::Engine<D>> {
    match opened {
        Ok(d) => {
            println!("{test}: {}", d.describe());
            Some(poot_runtime::Engine::new(d))
        }
        Err(e) if required => panic!("{test}: a device is required but {e}"),
        Err(e) => {
            println!("SKIP {test}: {e}");
            None
        }
    }
}
