//! The matrix-vector kernel the reference must run fast: bit-exact against Rust, and its
//! benchmark (`cargo test -p poot-runtime --release -- --ignored --nocapture`).

use super::{bits, butterfly, exec, fb, whole};
use poot_kir::{Access, CmpOp, Kernel, KernelBuilder, ReduceOp, Scalar, Special};
use poot_runtime::reference::Prepared;

/// `out[r] = sum_c w[r * cols + c] * x[c]`: one subgroup of 32 per row, 8 rows per
/// work-group, x4 vector loads, fma accumulation, subgroup reduce, lane 0 stores.
fn matvec(rows: u32, cols: u32) -> Kernel {
    let mut b = KernelBuilder::new("matvec", [32, 8, 1], 32);
    let pw = b.param("w", Scalar::F32, Access::Read);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let (g, ly, lane) = (
        b.special(Special::GroupX),
        b.special(Special::LocalY),
        b.special(Special::Lane),
    );
    let (eight, four, ncols) = (b.u32(8), b.u32(4), b.u32(cols));
    let g8 = b.mul(g, eight);
    let row = b.add(g8, ly);
    let base = b.mul(row, ncols);
    let start = b.mul(lane, four);
    let zero = b.f32(0.0);
    let acc = b.for_loop(start, ncols, 128, &[zero], |b, k, c| {
        let wi = b.add(base, k);
        let w4 = b.load(pw, wi, 4);
        let x4 = b.load(px, k, 4);
        let mut acc = c[0];
        for l in 0..4 {
            let (wl, xl) = (b.extract(w4, l), b.extract(x4, l));
            acc = b.fma(wl, xl, acc);
        }
        vec![acc]
    });
    let total = b.subgroup_reduce(ReduceOp::Add, acc[0]);
    let z = b.u32(0);
    let first = b.cmp(CmpOp::Eq, lane, z);
    b.if_then(first, |b| b.store(po, row, total));
    assert!(rows.is_multiple_of(8));
    b.finish()
}

fn matvec_inputs(rows: usize, cols: usize) -> (Vec<f32>, Vec<f32>) {
    let w = (0..rows * cols)
        .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 1009.0)
        .collect();
    let x = (0..cols)
        .map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0)
        .collect();
    (w, x)
}

#[test]
fn matvec_is_bit_exact() {
    let (rows, cols) = (64usize, 512usize);
    let (w, x) = matvec_inputs(rows, cols);
    let out = exec(
        &matvec(rows as u32, cols as u32),
        [rows as u32 / 8, 1, 1],
        vec![bits(&w), bits(&x), vec![0; rows]],
    );
    for r in 0..rows {
        let lanes: Vec<u32> = (0..32)
            .map(|l| {
                let mut acc = 0.0f32;
                for k in (l * 4..cols).step_by(128) {
                    for c in 0..4 {
                        acc = w[r * cols + k + c].mul_add(x[k + c], acc);
                    }
                }
                acc.to_bits()
            })
            .collect();
        let sum = butterfly(&lanes, &[true; 32], 32, 0x8000_0000, |a, b| {
            (fb(a) + fb(b)).to_bits()
        });
        assert_eq!(out[2][r], sum[0], "row {r}");
    }
}

/// `cargo test -p poot-runtime --release -- --ignored --nocapture`
#[test]
#[ignore]
fn bench_matvec_4096x1024() {
    let (rows, cols): (usize, usize) = std::env::var("MV")
        .ok()
        .map(|s| (s.parse().unwrap(), 1024))
        .unwrap_or((4096, 1024));
    let (w, x) = matvec_inputs(rows, cols);
    let p = Prepared::new(&matvec(rows as u32, cols as u32)).unwrap();
    let mut arenas = vec![bits(&w), bits(&x), vec![0; rows]];
    let binds = whole(&arenas);
    let grid = [rows as u32 / 8, 1, 1];
    for (name, parallel) in [("parallel", true), ("sequential", false)] {
        let go = |arenas: &mut Vec<Vec<u32>>| {
            if parallel {
                p.run(grid, &binds, arenas)
            } else {
                p.run_sequential(grid, &binds, arenas)
            }
        };
        go(&mut arenas).unwrap();
        let mut times: Vec<f64> = (0..30)
            .map(|_| {
                let t = std::time::Instant::now();
                go(&mut arenas).unwrap();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let threads = rayon::current_num_threads();
        println!(
            "matvec {rows}x{cols} f32 ({name}, {threads} threads): {:.2} ms per call (min), {:.2} ms (median)",
            times[0],
            times[times.len() / 2]
        );
    }
}
