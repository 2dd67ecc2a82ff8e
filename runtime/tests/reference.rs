//! The reference device's execution core against plain Rust: every kir expression and
//! statement, divergence, subgroups, memory faults and bindings. Comparisons are bit-exact
//! wherever the module's semantics say so (NaN results compare as NaN: Rust leaves their
//! sign and payload open).
//!
//! This file holds the shared helpers and the control-flow and memory cases; `reference/`
//! holds the operator tables (`arith`), faults and bindings (`faults`) and the matrix-vector
//! kernel with its benchmark (`matvec`).

#[path = "reference/arith.rs"]
mod arith;
#[path = "reference/faults.rs"]
mod faults;
#[path = "reference/matvec.rs"]
mod matvec;

use poot_kir::{
    Access, BinOp, CmpOp, Expr, Kernel, KernelBuilder, ReduceOp, Scalar, Special, UnOp, Val,
};
use poot_runtime::reference::{Binding, Prepared};

/// Binds parameter `i` to the whole of arena `i`.
fn whole(arenas: &[Vec<u32>]) -> Vec<Binding> {
    arenas
        .iter()
        .enumerate()
        .map(|(i, a)| Binding {
            arena: i,
            offset: 0,
            len: a.len(),
        })
        .collect()
}

/// Runs `k` with one arena per parameter, both drivers, and checks they agree bit for bit.
fn exec(k: &Kernel, grid: [u32; 3], arenas: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    let p = Prepared::new(k).expect("prepare");
    let mut par = arenas.clone();
    p.run(grid, &whole(&par), &mut par).expect("run");
    let mut seq = arenas;
    p.run_sequential(grid, &whole(&seq), &mut seq)
        .expect("run sequential");
    assert_eq!(par, seq, "parallel and sequential runs differ");
    seq
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `group_id.x * wx + local_id.x`.
fn gid(b: &mut KernelBuilder, wx: u32) -> Val {
    let g = b.special(Special::GroupX);
    let l = b.special(Special::LocalX);
    let w = b.u32(wx);
    let gw = b.mul(g, w);
    b.add(gw, l)
}

/// Equal bits, or both NaN for f32 (Rust leaves a NaN result's sign and payload open).
fn same(ty: Scalar, got: u32, want: u32) -> bool {
    got == want || (ty == Scalar::F32 && fb(got).is_nan() && fb(want).is_nan())
}

fn fb(x: u32) -> f32 {
    f32::from_bits(x)
}

#[test]
fn elementwise_with_broadcast_and_3d_grid() {
    // out[z][r][c] = a[z][r][c] * s[c] + bias[r], one work-group row of 16 x 4 threads per
    // (r-block, z): grid [cols/16, rows/4, depth].
    let (depth, rows, cols) = (3usize, 8usize, 48usize);
    let mut b = KernelBuilder::new("bcast", [16, 4, 1], 1);
    let pa = b.param("a", Scalar::F32, Access::Read);
    let ps = b.param("s", Scalar::F32, Access::Read);
    let pb = b.param("bias", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let (gx, gy, gz) = (
        b.special(Special::GroupX),
        b.special(Special::GroupY),
        b.special(Special::GroupZ),
    );
    let (lx, ly) = (b.special(Special::LocalX), b.special(Special::LocalY));
    let (c16, c4, ccols, crows) = (b.u32(16), b.u32(4), b.u32(cols as u32), b.u32(rows as u32));
    let cx = b.mul(gx, c16);
    let c = b.add(cx, lx);
    let ry = b.mul(gy, c4);
    let r = b.add(ry, ly);
    let zr = b.mul(gz, crows);
    let zr = b.add(zr, r);
    let i = b.mul(zr, ccols);
    let i = b.add(i, c);
    let x = b.load(pa, i, 1);
    let s = b.load(ps, c, 1);
    let bias = b.load(pb, r, 1);
    let m = b.mul(x, s);
    let y = b.add(m, bias);
    b.store(po, i, y);
    let k = b.finish();
    let a: Vec<f32> = (0..depth * rows * cols)
        .map(|i| (i as f32 * 0.37).sin())
        .collect();
    let s: Vec<f32> = (0..cols).map(|i| 1.0 + i as f32 / 7.0).collect();
    let bias: Vec<f32> = (0..rows).map(|i| i as f32 - 3.5).collect();
    let grid = [(cols / 16) as u32, (rows / 4) as u32, depth as u32];
    let out = exec(
        &k,
        grid,
        vec![bits(&a), bits(&s), bits(&bias), vec![0; a.len()]],
    );
    for (i, &x) in a.iter().enumerate() {
        let (c, r) = (i % cols, (i / cols) % rows);
        assert_eq!(out[3][i], (x * s[c] + bias[r]).to_bits(), "element {i}");
    }
}

#[test]
fn loop_with_carried_accumulators() {
    // Thread t sums x[k]^2 and counts k over (t..100).step_by(3): per-thread trip counts.
    let mut b = KernelBuilder::new("loop", [32, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let (n, zf, zu) = (b.u32(100), b.f32(0.0), b.u32(0));
    let r = b.for_loop(t, n, 3, &[zf, zu], |b, k, c| {
        let v = b.load(px, k, 1);
        let s = b.fma(v, v, c[0]);
        let one = b.u32(1);
        vec![s, b.add(c[1], one)]
    });
    let two = b.u32(2);
    let i = b.mul(t, two);
    b.store(po, i, r[0]);
    let one = b.u32(1);
    let i1 = b.add(i, one);
    let cnt = b.convert(r[1], Scalar::F32);
    b.store(po, i1, cnt);
    let k = b.finish();
    let x: Vec<f32> = (0..100).map(|i| (i as f32).sqrt() - 4.0).collect();
    let out = exec(&k, [1, 1, 1], vec![bits(&x), vec![0; 64]]);
    for t in 0..32 {
        let (mut s, mut c) = (0.0f32, 0u32);
        for k in (t..100).step_by(3) {
            s = x[k].mul_add(x[k], s);
            c += 1;
        }
        assert_eq!(out[1][2 * t], s.to_bits(), "sum of thread {t}");
        assert_eq!(
            out[1][2 * t + 1],
            (c as f32).to_bits(),
            "count of thread {t}"
        );
    }
}

#[test]
fn divergent_loop_with_if_results_and_overflowing_bounds() {
    let mut b = KernelBuilder::new("divergent", [64, 1, 1], 1);
    let pe = b.param("ends", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let end = b.load(pe, t, 1);
    let five = b.u32(5);
    let start = b.bin(BinOp::Rem, t, five);
    let (one, zero) = (b.u32(1), b.u32(0));
    let r = b.for_loop(start, end, 2, &[one, zero], |b, k, c| {
        let three = b.u32(3);
        let m = b.bin(BinOp::Rem, k, three);
        let z = b.u32(0);
        let is0 = b.cmp(CmpOp::Eq, m, z);
        let acc = b.if_else(
            is0,
            |b| {
                let t3 = b.mul(c[0], three);
                vec![b.add(t3, k)]
            },
            |b| vec![b.bin(BinOp::Xor, c[0], k)],
        );
        let one = b.u32(1);
        vec![acc[0], b.add(c[1], one)]
    });
    // A loop whose induction variable would wrap: it stops instead.
    let four = b.u32(4);
    let tm = b.bin(BinOp::Rem, t, four);
    let hi = b.u32(0xFFFF_FFF0);
    let s2 = b.add(hi, tm);
    let e2 = b.u32(u32::MAX);
    let w = b.for_loop(s2, e2, 4, &[zero], |b, _, c| {
        let one = b.u32(1);
        vec![b.add(c[0], one)]
    });
    let three = b.u32(3);
    let i = b.mul(t, three);
    b.store(po, i, r[0]);
    let i1 = b.add(i, one);
    b.store(po, i1, r[1]);
    let i2 = b.add(i1, one);
    b.store(po, i2, w[0]);
    let k = b.finish();
    let ends: Vec<u32> = (0..64u32).map(|t| (t * 7) % 23).collect();
    let out = exec(&k, [1, 1, 1], vec![ends.clone(), vec![0; 192]]);
    for t in 0..64u32 {
        let (mut acc, mut n) = (1u32, 0u32);
        for k in (t % 5..ends[t as usize]).step_by(2) {
            acc = if k % 3 == 0 {
                acc.wrapping_mul(3).wrapping_add(k)
            } else {
                acc ^ k
            };
            n += 1;
        }
        let wrap = (0xFFFF_FFF0 + t % 4..u32::MAX).step_by(4).count() as u32;
        assert_eq!(
            &out[1][3 * t as usize..3 * t as usize + 3],
            &[acc, n, wrap],
            "thread {t}"
        );
    }
}

#[test]
fn if_else_results_under_divergence() {
    let mut b = KernelBuilder::new("if_else", [32, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let pc = b.param("codes", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let v = b.load(px, t, 1);
    let zero = b.f32(0.0);
    let pos = b.cmp(CmpOp::Gt, v, zero);
    let r = b.if_else(
        pos,
        |b| vec![b.un(UnOp::Sqrt, v), b.u32(1)],
        |b| {
            let z = b.f32(0.0);
            let is0 = b.cmp(CmpOp::Eq, v, z);
            b.if_else(
                is0,
                |b| vec![b.f32(1.0), b.u32(2)],
                |b| {
                    let n = b.un(UnOp::Neg, v);
                    let two = b.f32(2.0);
                    vec![b.mul(n, two), b.u32(3)]
                },
            )
        },
    );
    b.store(po, t, r[0]);
    b.store(pc, t, r[1]);
    let k = b.finish();
    let mut x = arith::SPECIAL_F32.to_vec();
    x.extend((0..12).map(|i| i as f32 - 6.0));
    let out = exec(&k, [1, 1, 1], vec![bits(&x), vec![0; 32], vec![0; 32]]);
    for (i, &v) in x.iter().enumerate() {
        let (r, c) = if v > 0.0 {
            (v.sqrt(), 1)
        } else if v == 0.0 {
            (1.0, 2)
        } else {
            (-v * 2.0, 3)
        };
        assert!(same(Scalar::F32, out[1][i], r.to_bits()), "x = {v}");
        assert_eq!(out[2][i], c, "x = {v}");
    }
}

#[test]
fn shared_memory_tree_reduction_with_barriers() {
    let mut b = KernelBuilder::new("wg_sum", [128, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let sh = b.shared(Scalar::F32, 128);
    let t = b.special(Special::LocalX);
    let g = b.special(Special::GroupX);
    let i = gid(&mut b, 128);
    let v = b.load(px, i, 1);
    b.store(sh, t, v);
    b.barrier();
    let (z, seven) = (b.u32(0), b.u32(7));
    b.for_loop(z, seven, 1, &[], |b, k, _| {
        let c64 = b.u32(64);
        let s = b.bin(BinOp::Shr, c64, k);
        let lt = b.cmp(CmpOp::Lt, t, s);
        b.if_then(lt, |b| {
            let a = b.load(sh, t, 1);
            let ts = b.add(t, s);
            let c = b.load(sh, ts, 1);
            let sum = b.add(a, c);
            b.store(sh, t, sum);
        });
        b.barrier();
        vec![]
    });
    let first = b.cmp(CmpOp::Eq, t, z);
    b.if_then(first, |b| {
        let s = b.load(sh, z, 1);
        b.store(po, g, s);
    });
    let k = b.finish();
    let x: Vec<f32> = (0..512)
        .map(|i| ((i * 37 % 101) as f32).ln_1p() * 1.7)
        .collect();
    let out = exec(&k, [4, 1, 1], vec![bits(&x), vec![0; 4]]);
    for g in 0..4 {
        let mut v = x[g * 128..(g + 1) * 128].to_vec();
        let mut s = 64;
        while s > 0 {
            for t in 0..s {
                v[t] += v[t + s];
            }
            s /= 2;
        }
        assert_eq!(out[1][g], v[0].to_bits(), "group {g}");
    }
}

/// The reference's butterfly: inactive lanes give `id`, then `own op lane ^ m` for
/// m = w/2 .. 1.
fn butterfly(
    v: &[u32],
    active: &[bool],
    w: usize,
    id: u32,
    op: impl Fn(u32, u32) -> u32,
) -> Vec<u32> {
    let mut cur: Vec<u32> = v
        .iter()
        .zip(active)
        .map(|(&x, &a)| if a { x } else { id })
        .collect();
    let mut m = w / 2;
    while m > 0 {
        cur = (0..cur.len()).map(|i| op(cur[i], cur[i ^ m])).collect();
        m /= 2;
    }
    cur
}

#[test]
fn subgroup_reduce_and_shuffle_widths_32_and_8() {
    for w in [32u32, 8] {
        let mut b = KernelBuilder::new("subgroup", [64, 1, 1], w);
        let px = b.param("x", Scalar::F32, Access::Read);
        let pi = b.param("xi", Scalar::I32, Access::Read);
        let po = b.param("out", Scalar::U32, Access::Write);
        let t = b.special(Special::LocalX);
        let lane = b.special(Special::Lane);
        let v = b.load(px, t, 1);
        let vi = b.load(pi, t, 1);
        let vu = b.bitcast(vi, Scalar::U32);
        let three = b.u32(3);
        let m3 = b.bin(BinOp::Rem, t, three);
        let zero = b.u32(0);
        let some = b.cmp(CmpOp::Ne, m3, zero);
        let div = b.if_else(
            some,
            |b| vec![b.subgroup_reduce(ReduceOp::Add, v)],
            |b| vec![b.f32(-1.0)],
        );
        // Odd threads shuffle with their (inactive) even partners: they keep their own value.
        let one = b.u32(1);
        let odd = b.bin(BinOp::And, t, one);
        let odd = b.cmp(CmpOp::Eq, odd, one);
        let lone = b.if_else(
            odd,
            |b| vec![b.expr(Expr::ShuffleXor(v, 1))],
            |b| vec![b.f32(-2.0)],
        );
        let two = b.u32(2);
        let t2 = b.mul(t, two);
        let v2 = b.load(px, t2, 2);
        let r2 = b.subgroup_reduce(ReduceOp::Max, v2);
        let results = [
            b.subgroup_reduce(ReduceOp::Add, v),
            b.subgroup_reduce(ReduceOp::Max, vi),
            b.subgroup_reduce(ReduceOp::Min, vu),
            b.subgroup_reduce(ReduceOp::Or, vu),
            b.expr(Expr::ShuffleXor(v, 1)),
            b.expr(Expr::ShuffleXor(v, w / 2 + 1)),
            b.expr(Expr::ShuffleXor(v, w)),
            div[0],
            b.extract(r2, 0),
            b.extract(r2, 1),
            lane,
            lone[0],
        ];
        for (j, r) in results.into_iter().enumerate() {
            let r = if b.ty(r).scalar == Scalar::U32 {
                r
            } else {
                b.bitcast(r, Scalar::U32)
            };
            let base = b.u32(64 * j as u32);
            let i = b.add(base, t);
            b.store(po, i, r);
        }
        let k = b.finish();
        let x: Vec<f32> = (0..128)
            .map(|i| ((i * 7919 % 257) as f32 - 128.0) * 1.0e-3 + (i as f32).exp2().recip())
            .collect();
        let xi: Vec<u32> = (0..64)
            .map(|i: i32| (i * 40503 % 1013 - 500) as u32)
            .collect();
        let out = exec(&k, [1, 1, 1], vec![bits(&x), xi.clone(), vec![0; 64 * 12]]);
        let (wu, all) = (w as usize, vec![true; 64]);
        let xb = bits(&x[..64]);
        let add = |a: u32, b: u32| (fb(a) + fb(b)).to_bits();
        let mut want = butterfly(&xb, &all, wu, 0x8000_0000, add);
        want.extend(butterfly(&xi, &all, wu, i32::MIN as u32, |a, b| {
            (a as i32).max(b as i32) as u32
        }));
        want.extend(butterfly(&xi, &all, wu, u32::MAX, u32::min));
        want.extend(butterfly(&xi, &all, wu, 0, |a, b| a | b));
        for m in [1, wu / 2 + 1, wu] {
            want.extend((0..64).map(|t| if (t % wu) ^ m < wu { xb[t ^ m] } else { xb[t] }));
        }
        let act: Vec<bool> = (0..64).map(|t| t % 3 != 0).collect();
        let d = butterfly(&xb, &act, wu, 0x8000_0000, add);
        want.extend((0..64).map(|t| if act[t] { d[t] } else { (-1.0f32).to_bits() }));
        for c in 0..2 {
            let comp: Vec<u32> = (0..64).map(|t| bits(&x)[2 * t + c]).collect();
            let max = |a: u32, b: u32| if fb(a) >= fb(b) { a } else { b };
            want.extend(butterfly(&comp, &all, wu, f32::NEG_INFINITY.to_bits(), max));
        }
        want.extend((0..64).map(|t| (t % wu) as u32));
        want.extend((0..64).map(|t| {
            if t % 2 == 1 {
                xb[t]
            } else {
                (-2.0f32).to_bits()
            }
        }));
        for (i, (got, want)) in out[2].iter().zip(&want).enumerate() {
            assert_eq!(got, want, "width {w}, result {}, thread {}", i / 64, i % 64);
        }
        // Width 32: every lane of a subgroup holds the same bits.
        if w == 32 {
            assert!(out[2][..32].iter().all(|&s| s == out[2][0]));
        }
    }
}

#[test]
fn vector_loads_stores_selects() {
    let mut b = KernelBuilder::new("vectors", [16, 1, 1], 1);
    let pa = b.param("a", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let (one, two, four) = (b.u32(1), b.u32(2), b.u32(4));
    let t4 = b.mul(t, four);
    let v4 = b.load(pa, t4, 4);
    let t42 = b.add(t4, two);
    let v2 = b.load(pa, t42, 2);
    let t44 = b.add(t4, four);
    let w4 = b.load(pa, t44, 4);
    b.store(po, t4, v4);
    let (e3, e1) = (b.extract(v4, 3), b.extract(v2, 1));
    let s = b.add(e3, e1);
    let c64 = b.u32(64);
    let i = b.add(c64, t);
    b.store(po, i, s);
    let lt = b.cmp(CmpOp::Lt, v4, w4);
    let mn = b.select(lt, v4, w4);
    let c80 = b.u32(80);
    let i = b.add(c80, t4);
    b.store(po, i, mn);
    let sum = b.add(v4, w4);
    let c144 = b.u32(144);
    let i = b.add(c144, t4);
    b.store(po, i, sum);
    let odd = b.bin(BinOp::And, t, one);
    let odd = b.cmp(CmpOp::Eq, odd, one);
    let pick = b.select(odd, v2, v2);
    let sw = b.select(odd, w4, v4);
    let t2 = b.mul(t, two);
    let c208 = b.u32(208);
    let i = b.add(c208, t2);
    b.store(po, i, pick);
    let c240 = b.u32(240);
    let i = b.add(c240, t4);
    b.store(po, i, sw);
    let k = b.finish();
    let a: Vec<u32> = (0..68u32)
        .map(|i| i.wrapping_mul(2654435761) >> 7)
        .collect();
    let out = exec(&k, [1, 1, 1], vec![a.clone(), vec![0; 304]]);
    let o = &out[1];
    for t in 0..16 {
        let (v4, v2, w4) = (
            &a[4 * t..4 * t + 4],
            &a[4 * t + 2..4 * t + 4],
            &a[4 * t + 4..4 * t + 8],
        );
        assert_eq!(&o[4 * t..4 * t + 4], v4);
        assert_eq!(o[64 + t], v4[3].wrapping_add(v2[1]));
        for c in 0..4 {
            assert_eq!(o[80 + 4 * t + c], v4[c].min(w4[c]));
            assert_eq!(o[144 + 4 * t + c], v4[c].wrapping_add(w4[c]));
            assert_eq!(o[240 + 4 * t + c], if t % 2 == 1 { w4[c] } else { v4[c] });
        }
        assert_eq!(&o[208 + 2 * t..210 + 2 * t], v2);
    }
}

#[test]
fn conflicting_stores_apply_in_lane_order() {
    // Thread t stores [t, t] at 2 * (t / 2) (threads 2j and 2j + 1 store at the same place:
    // the odd one wins), then every thread stores t at 100: the highest thread wins.
    let mut b = KernelBuilder::new("conflicts", [64, 1, 1], 1);
    let pp = b.param("pairs", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let two = b.u32(2);
    let i2 = b.mul(t, two);
    let v = b.load(pp, i2, 2);
    let one = b.u32(1);
    let half = b.bin(BinOp::Shr, t, one);
    let even = b.mul(half, two);
    b.store(po, even, v);
    let at = b.u32(100);
    b.store(po, at, t);
    let k = b.finish();
    let pairs: Vec<u32> = (0..128).map(|i| i / 2).collect();
    let out = exec(&k, [1, 1, 1], vec![pairs, vec![0; 101]]);
    let mut want: Vec<u32> = (0..64).map(|i: u32| i | 1).collect();
    want.resize(100, 0);
    want.push(63);
    assert_eq!(out[1], want);
}

#[test]
fn fetched_atomics_return_the_value_before_each_lanes_update() {
    // Odd threads add their id to one counter and keep what they saw; even threads are
    // inactive there and see 0.
    let mut b = KernelBuilder::new("tickets", [8, 1, 1], 1);
    let pc = b.param("counter", Scalar::U32, Access::ReadWrite);
    let po = b.param("seen", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let one = b.u32(1);
    let zero = b.u32(0);
    let odd = b.bin(BinOp::And, t, one);
    let odd = b.cmp(CmpOp::Eq, odd, one);
    let seen = b.if_else(
        odd,
        |b| vec![b.atomic_fetch(ReduceOp::Add, pc, zero, t)],
        |b| vec![b.u32(0)],
    );
    b.fence();
    let i = gid(&mut b, 8);
    b.store(po, i, seen[0]);
    let kernel = b.finish();
    let out = exec(&kernel, [2, 1, 1], vec![vec![100], vec![0; 16]]);
    // Group 0's lanes 1, 3, 5, 7 add 1, 3, 5, 7 to 100, then group 1's do the same.
    assert_eq!(out[0], vec![132]);
    assert_eq!(
        out[1],
        vec![
            0, 100, 0, 101, 0, 104, 0, 109, 0, 116, 0, 117, 0, 120, 0, 125
        ]
    );
}

#[test]
fn atomics_global_and_shared_in_lane_order() {
    let mut b = KernelBuilder::new("atomics", [64, 1, 1], 1);
    let pk = b.param("keys", Scalar::U32, Access::Read);
    let pv = b.param("vals", Scalar::F32, Access::Read);
    let ph = b.param("hist", Scalar::U32, Access::Write);
    let pf = b.param("fsum", Scalar::F32, Access::Write);
    let pm = b.param("imax", Scalar::I32, Access::ReadWrite);
    let pn = b.param("umin", Scalar::U32, Access::Write);
    let po = b.param("bits", Scalar::U32, Access::Write);
    let ps = b.param("shared_out", Scalar::U32, Access::Write);
    let sh = b.shared(Scalar::U32, 8);
    let t = b.special(Special::LocalX);
    let g = b.special(Special::GroupX);
    let i = gid(&mut b, 64);
    let k = b.load(pk, i, 1);
    let v = b.load(pv, i, 1);
    let one = b.u32(1);
    b.atomic(ReduceOp::Add, ph, k, one);
    b.atomic(ReduceOp::Add, pf, k, v);
    let hundred = b.f32(100.0);
    let vi = b.mul(v, hundred);
    let vi = b.convert(vi, Scalar::I32);
    b.atomic(ReduceOp::Max, pm, k, vi);
    b.atomic(ReduceOp::Min, pn, k, i);
    let c31 = b.u32(31);
    let sft = b.bin(BinOp::And, i, c31);
    let bit = b.bin(BinOp::Shl, one, sft);
    b.atomic(ReduceOp::Or, po, k, bit);
    let c7 = b.u32(7);
    let sk = b.bin(BinOp::And, k, c7);
    b.atomic(ReduceOp::Add, sh, sk, i);
    b.barrier();
    let c8 = b.u32(8);
    let lt = b.cmp(CmpOp::Lt, t, c8);
    b.if_then(lt, |b| {
        let s = b.load(sh, t, 1);
        let g8 = b.mul(g, c8);
        let j = b.add(g8, t);
        b.store(ps, j, s);
    });
    let kernel = b.finish();
    let n = 256;
    let keys: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2654435761) >> 29)
        .collect();
    let vals: Vec<f32> = (0..n)
        .map(|i| ((i * 31 % 97) as f32 - 48.0) / 7.0)
        .collect();
    let init = vec![
        vec![0; 8],
        vec![0; 8],
        vec![i32::MIN as u32; 8],
        vec![u32::MAX; 8],
        vec![0; 8],
        vec![0; 32],
    ];
    let mut arenas = vec![keys.clone(), bits(&vals)];
    arenas.extend(init);
    let out = exec(&kernel, [4, 1, 1], arenas);
    let (mut h, mut f, mut mx, mut mn, mut or, mut s) = (
        [0u32; 8],
        [0f32; 8],
        [i32::MIN; 8],
        [u32::MAX; 8],
        [0u32; 8],
        [0u32; 32],
    );
    for i in 0..n {
        let k = keys[i] as usize;
        h[k] += 1;
        f[k] += vals[i];
        mx[k] = mx[k].max((vals[i] * 100.0) as i32);
        mn[k] = mn[k].min(i as u32);
        or[k] |= 1 << (i % 32);
        s[(i / 64) * 8 + (k & 7)] += i as u32;
    }
    assert_eq!(out[2], h);
    assert_eq!(out[3], bits(&f));
    assert_eq!(out[4], mx.map(|x| x as u32));
    assert_eq!(out[5], mn);
    assert_eq!(out[6], or);
    assert_eq!(out[7], s);
}
