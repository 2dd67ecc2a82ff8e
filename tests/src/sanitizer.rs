//! NVIDIA's compute-sanitizer over the CUDA tests: each tool runs this test binary again,
//! limited to one test, and its report must be clean; each tool must also report a canary, a
//! kernel with the fault it exists to find, so a clean report means the tool was looking.
//!
//! Tools: memcheck (out-of-bounds and misaligned accesses), racecheck (shared-memory hazards
//! between a work-group's threads) and synccheck (barriers reached by part of a work-group).
//! initcheck is not among them: the CUDA device zeroes every arena when it allocates it, so
//! no load can read memory nothing wrote.

use poot_bundle::{Arena, ArenaSizes, Binding, Dispatch, KernelCode};
use poot_kir::{Access, CmpOp, Kernel, KernelBuilder, Scalar, Special};
use poot_runtime::Device;
use poot_runtime::devices::cuda::CudaDevice;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable that makes the sanitized test run the named tool's canary
/// instead of its own body.
pub const CANARY: &str = "POOT_SANITIZER_CANARY";

/// Each tool with what its report says when it found nothing, and what it says about its
/// canary.
pub const TOOLS: [(&str, &str, &str); 3] = [
    (
        "memcheck",
        "ERROR SUMMARY: 0 errors",
        "Invalid __global__ write of size 4",
    ),
    (
        "racecheck",
        "0 hazards displayed (0 errors, 0 warnings)",
        "Race reported between Write access",
    ),
    (
        "synccheck",
        "ERROR SUMMARY: 0 errors",
        "Barrier error detected",
    ),
];

/// compute-sanitizer: `POOT_COMPUTE_SANITIZER`, else on `PATH`, else in the CUDA toolkit.
pub fn find() -> Option<PathBuf> {
    let named = std::env::var_os("POOT_COMPUTE_SANITIZER").map(PathBuf::from);
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("compute-sanitizer"))
            .find(|f| f.is_file())
    });
    named
        .or(on_path)
        .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/compute-sanitizer")))
        .filter(|f| f.is_file())
}

/// Runs `test` of this test binary under `tool` (with `canary` set, the tool's canary
/// instead); returns whether the run succeeded and its whole output.
pub fn run(cs: &Path, tool: &str, test: &str, canary: bool) -> (bool, String) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(cs);
    cmd.args([
        "--tool",
        tool,
        "--error-exitcode",
        "86",
        "--print-limit",
        "20",
    ])
    .arg(exe)
    .args(["--exact", test, "--nocapture", "--test-threads", "1"])
    // The device opened in the caller, so it must open under the tool too.
    .env("POOT_REQUIRE_GPU", "1");
    if canary {
        cmd.env(CANARY, tool);
    }
    let out = cmd.output().expect("compute-sanitizer starts");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The canary of `tool`, run once on `dev`; the launch's own result does not matter (a
/// kernel writing past its buffer may fault), only the tool's report does.
pub fn run_canary(dev: &mut CudaDevice, tool: &str) {
    let k = match tool {
        "memcheck" => past_the_end(),
        "racecheck" => shared_race(),
        "synccheck" => partial_barrier(),
        other => panic!("no canary for {other}"),
    };
    let ptx = poot_codegen_ptx::render(&k, &poot_codegen_ptx::PtxTarget::sm90())
        .expect("the canary renders");
    let code = KernelCode {
        name: k.name.clone(),
        code: ptx.into_bytes(),
        workgroup: k.workgroup,
        shared_bytes: k.shared_bytes(),
        dependent_launch: true,
    };
    dev.alloc(&ArenaSizes {
        weights: 256,
        state: 256,
        slots: 256,
        scratch: 256,
        readback: 256,
    })
    .expect("alloc");
    let kernel = dev.load_kernel(&code).expect("load the canary");
    let dispatch = Dispatch {
        kernel: 0,
        grid: [1, 1, 1],
        bindings: vec![Binding {
            arena: Arena::Scratch,
            offset: 0,
            len: 256,
            writes: true,
        }],
        work: 1,
    };
    let ran = dev
        .eager(&[kernel], &[dispatch])
        .and_then(|()| dev.synchronize());
    println!("canary {tool}: {ran:?}");
}

/// Each of 64 threads writes its index at element `64 + index` of a 256-byte buffer: every
/// write lies past the end.
fn past_the_end() -> Kernel {
    let mut b = KernelBuilder::new("past_the_end", [64, 1, 1], 1);
    let out = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let end = b.u32(64);
    let at = b.add(t, end);
    b.store(out, at, t);
    b.finish()
}

/// Every thread writes shared element 0, then reads it back with no barrier between.
fn shared_race() -> Kernel {
    let mut b = KernelBuilder::new("shared_race", [64, 1, 1], 1);
    let out = b.param("out", Scalar::U32, Access::Write);
    let sh = b.shared(Scalar::U32, 1);
    let t = b.special(Special::LocalX);
    let zero = b.u32(0);
    b.store(sh, zero, t);
    let x = b.load(sh, zero, 1);
    b.store(out, t, x);
    b.finish()
}

/// Half of the first warp's threads reach a barrier the other half skips (a whole warp that
/// skips one counts as arrived once it exits, so the split is inside a warp).
fn partial_barrier() -> Kernel {
    let mut b = KernelBuilder::new("partial_barrier", [64, 1, 1], 1);
    let out = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let half = b.u32(16);
    let low = b.cmp(CmpOp::Lt, t, half);
    b.begin();
    b.barrier();
    let then = b.end();
    b.finish_if(low, then, Vec::new(), Vec::new(), Vec::new());
    b.store(out, t, t);
    b.finish()
}

#[cfg(test)]
mod tests {
    /// The canaries are kernels the verifier and the PTX renderer accept, so a tool that misses
    /// one missed its fault, not a launch.
    #[test]
    fn canaries_render() {
        for k in [
            super::past_the_end(),
            super::shared_race(),
            super::partial_barrier(),
        ] {
            let ptx = poot_codegen_ptx::render(&k, &poot_codegen_ptx::PtxTarget::sm90());
            assert!(ptx.is_ok_and(|p| p.contains(&k.name)), "{}", k.name);
        }
    }
}
