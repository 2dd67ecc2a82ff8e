//! Runs the `common` cases on Mesa's lavapipe (a CPU Vulkan driver: `apt-get install
//! mesa-vulkan-drivers libvulkan1`) as rendered for `SpirvTarget::lavapipe()`, and compares
//! every written buffer with the reference device (`poot_runtime::reference`) on the same
//! inputs: integers bit for bit, floats bit for bit where kir's semantics are exact on
//! lavapipe and within a stated tolerance where Vulkan allows the device its own accuracy
//! (transcendentals, `rsqrt`, `fma`, which lavapipe rounds twice) or order (native f32
//! subgroup sums). Without lavapipe it prints
//! `SKIP lavapipe not found`, and fails instead when `POOT_REQUIRE_LAVAPIPE=1`.

mod common;
mod vk;

use poot_codegen_spirv::{SpirvTarget, render};
use poot_kir::{Access, Kernel, Scalar};
use poot_runtime::reference::{self, Binding};

/// How a buffer starts.
#[derive(Clone, Copy)]
enum Fill {
    Zero,
    /// f32 in [-2, 2), never 0.
    F32,
    /// f32 in [0.5, 2).
    Pos,
    /// u32 below the bound.
    Below(u32),
    /// Any 32-bit pattern.
    Bits,
    /// One value everywhere.
    Same(u32),
}

/// A dispatch: its grid and each buffer's length and fill.
type Setup = ([u32; 3], Vec<(usize, Fill)>);

/// Grid and buffer lengths and fills per case; `None` for cases not run here.
fn setup(case: &str) -> Option<Setup> {
    use Fill::*;
    Some(match case {
        "dot_x4" => ([2, 1, 1], vec![(1024, F32), (2048, F32), (2, Zero)]),
        "if_else" => ([2, 1, 1], vec![(128, F32), (384, F32), (128, Zero)]),
        "shared_reduce" => ([2, 1, 1], vec![(512, F32), (512, Bits), (2, Zero)]),
        "atomics" => ([1, 1, 1], vec![(20, Below(1000)), (16, Zero)]),
        "atomics_f32" => ([1, 1, 1], vec![(8, Zero)]),
        "conversions" => (
            [1, 1, 1],
            vec![(1024, Bits), (1024, Zero), (256, Zero), (256, Zero)],
        ),
        "traps" => ([1, 1, 1], vec![(1, Same(32)), (64, F32)]),
        "divergent_loop" => ([1, 1, 1], vec![(64, Below(20)), (64, Zero)]),
        "ops_f32" => ([1, 1, 1], vec![(512, Pos), (256, Zero), (64, Zero)]),
        "ops_int" => (
            [1, 1, 1],
            vec![(64, Bits), (256, Bits), (64, Zero), (64, Zero)],
        ),
        "subgroup_ops" => ([1, 1, 1], vec![(256, F32), (128, Zero), (128, Zero)]),
        "subgroup8" => ([1, 1, 1], vec![(64, F32)]),
        "subgroup_guarded" => ([3, 1, 1], vec![(256, F32), (1280, F32), (256, Zero)]),
        "subgroup_batch" => ([1, 1, 1], vec![(256, F32), (64, Zero), (64, Zero)]),
        "subgroup_loop" => ([1, 1, 1], vec![(256, F32), (64, Zero)]),
        "trap_barrier" => ([1, 1, 1], vec![(64, F32), (64, Zero)]),
        "matrix_tile" => (
            [1, 1, 1],
            vec![
                (128, Below(16)),
                (64, Below(16)),
                (128, Below(16)),
                (128, Zero),
            ],
        ),
        "mixed_widths" => ([1, 1, 1], vec![(256, F32), (320, Zero)]),
        "cluster_exchange" => ([1, 2, 1], vec![(64, F32), (64, Zero)]),
        "last_group" => (
            [common::LAST_GROUP_GROUPS, 1, 1],
            vec![(128, F32), (128, Zero), (1, Zero), (32, Zero)],
        ),
        _ => return None,
    })
}

fn fill(f: Fill, len: usize, seed: &mut u64) -> Vec<u32> {
    (0..len)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (*seed >> 32) as u32;
            let unit = (r >> 8) as f32 / (1u32 << 24) as f32;
            match f {
                Fill::Zero => 0,
                Fill::F32 => {
                    let x = unit * 4.0 - 2.0;
                    (if x == 0.0 { 0.25 } else { x }).to_bits()
                }
                Fill::Pos => (0.5 + 1.5 * unit).to_bits(),
                Fill::Below(n) => r % n,
                Fill::Bits => r,
                Fill::Same(v) => v,
            }
        })
        .collect()
}

/// Relative tolerance for f32 outputs of a case (0: bit-exact).
fn tolerance(case: &str) -> f32 {
    match case {
        // exp, rsqrt, sin, cos: LLVM's vector math versus Rust's libm.
        "ops_f32" | "if_else" => 1e-4,
        // A native subgroup sum (lavapipe's order) and its uses.
        "subgroup8" => 1e-5,
        // Long fma chains: lavapipe rounds `GLSL.std.450 Fma` twice (Vulkan allows it).
        "dot_x4" | "subgroup_guarded" => 1e-5,
        _ => 0.0,
    }
}

fn close(a: u32, b: u32, tol: f32) -> bool {
    let (x, y) = (f32::from_bits(a), f32::from_bits(b));
    a == b || (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * y.abs().max(1.0)
}

/// Runs `k` on both devices; the description of every mismatch.
fn compare(gpu: &vk::Gpu, case: &str, k: &Kernel, target: &SpirvTarget) -> Vec<String> {
    let Some((grid, bufs)) = setup(case) else {
        return vec![];
    };
    compare_with(gpu, case, k, target, grid, &bufs)
}

/// [`compare`] with an explicit grid and buffers.
fn compare_with(
    gpu: &vk::Gpu,
    case: &str,
    k: &Kernel,
    target: &SpirvTarget,
    grid: [u32; 3],
    bufs: &[(usize, Fill)],
) -> Vec<String> {
    let mut seed = 7;
    let inputs: Vec<Vec<u32>> = bufs.iter().map(|&(n, f)| fill(f, n, &mut seed)).collect();
    let mut want = inputs.clone();
    let bindings: Vec<Binding> = want
        .iter()
        .enumerate()
        .map(|(i, b)| Binding {
            arena: i,
            offset: 0,
            len: b.len(),
        })
        .collect();
    let fault = reference::run(k, grid, &bindings, &mut want).err();
    let words = render(k, target).expect("renders");
    let mut got = inputs;
    got.push(vec![0]);
    if let Err(e) = gpu.run(&words, &k.name, grid, &mut got) {
        return vec![format!("{case}: {e}")];
    }
    let error_word = got.pop().map_or(0, |w| w[0]);
    let mut bad = Vec::new();
    match fault {
        Some(f) if f.code != error_word => bad.push(format!(
            "{case}: reference faulted with {:#x}, error word {error_word:#x}",
            f.code
        )),
        Some(f) => {
            // Results of a trapping dispatch are discarded.
            println!("ok {case}: both devices report trap {:#x}", f.code);
            return bad;
        }
        None if error_word != 0 => bad.push(format!("{case}: error word {error_word:#x}")),
        None => {}
    }
    let tol = tolerance(case);
    for (i, p) in k.params.iter().enumerate() {
        if p.access == Access::Read {
            continue;
        }
        let (g, w) = (&got[i], &want[i]);
        let diffs: Vec<usize> = (0..w.len())
            .filter(|&j| match p.elem {
                Scalar::F32 => !close(g[j], w[j], tol),
                _ => g[j] != w[j],
            })
            .collect();
        if let Some(&j) = diffs.first() {
            bad.push(format!(
                "{case}: {} differs at {} of {} elements, first [{j}]: lavapipe {:#010x} ({}) reference {:#010x} ({})",
                p.name,
                diffs.len(),
                w.len(),
                g[j],
                f32::from_bits(g[j]),
                w[j],
                f32::from_bits(w[j])
            ));
        }
    }
    bad
}

fn lavapipe() -> Option<vk::Gpu> {
    let gpu = vk::Gpu::find("llvmpipe");
    if gpu.is_none() {
        assert!(
            std::env::var("POOT_REQUIRE_LAVAPIPE").as_deref() != Ok("1"),
            "POOT_REQUIRE_LAVAPIPE=1 but lavapipe was not found (apt-get install mesa-vulkan-drivers libvulkan1)"
        );
        println!("SKIP lavapipe not found");
    }
    gpu
}

/// Failing checks reach the error word with the reference device's code, both where the
/// trapping thread returns (`traps`: no barrier) and where it carries on (`trap_barrier`).
#[test]
fn traps_set_the_error_word() {
    let Some(gpu) = lavapipe() else {
        return;
    };
    let t = SpirvTarget::lavapipe();
    let bad: Vec<String> = [
        (
            "traps",
            common::traps(),
            vec![(1, Fill::Same(16)), (64, Fill::F32)],
        ),
        (
            "trap_barrier",
            common::trap_barrier(),
            vec![(64, Fill::Same(0x7FC0_0000)), (64, Fill::Zero)],
        ),
    ]
    .into_iter()
    .flat_map(|(case, k, bufs)| compare_with(&gpu, case, &k, &t, [1, 1, 1], &bufs))
    .collect();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn cases_match_the_reference_device() {
    let Some(gpu) = lavapipe() else {
        return;
    };
    println!("device: {}", gpu.name);
    let target = SpirvTarget::lavapipe();
    let mut bad = Vec::new();
    for (case, k) in common::cases() {
        let b = compare(&gpu, case, &k, &target);
        if b.is_empty() {
            println!("ok {case}");
        }
        bad.extend(b);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
