//! Traps, out-of-bounds accesses, bindings, refused kernels, and parallel runs that fault.

use super::{bits, exec, gid, whole};
use poot_kir::{Access, CmpOp, Kernel, KernelBuilder, Scalar, Special, UnOp};
use poot_runtime::reference::{
    BAD_DISPATCH, Binding, INEXACT_MMA, INVALID_KERNEL, OUT_OF_BOUNDS, Prepared, run,
};

/// `out[i] = x[i]` for every thread, then `trap(42)` in threads whose word is 7.
fn trap_kernel() -> Kernel {
    let mut b = KernelBuilder::new("trapper", [32, 1, 1], 1);
    let px = b.param("x", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let i = gid(&mut b, 32);
    let v = b.load(px, i, 1);
    b.store(po, i, v);
    let seven = b.u32(7);
    let hit = b.cmp(CmpOp::Eq, v, seven);
    b.if_then(hit, |b| b.trap(42));
    b.finish()
}

#[test]
fn trap_faults_with_its_code_and_keeps_earlier_effects() {
    let k = trap_kernel();
    let p = Prepared::new(&k).unwrap();
    let x: Vec<u32> = (0..64).map(|i| i % 5 + 10).collect();
    let mut arenas = vec![x.clone(), vec![0; 64]];
    p.run([2, 1, 1], &whole(&arenas), &mut arenas).unwrap();
    assert_eq!(arenas[1], x, "no thread traps");
    let mut x2 = x.clone();
    x2[45] = 7;
    for sequential in [false, true] {
        let mut arenas = vec![x2.clone(), vec![0; 64]];
        let binds = whole(&arenas);
        let f = if sequential {
            p.run_sequential([2, 1, 1], &binds, &mut arenas)
        } else {
            p.run([2, 1, 1], &binds, &mut arenas)
        };
        let f = f.unwrap_err();
        assert_eq!((f.kernel.as_str(), f.code), ("trapper", 42));
        assert!(
            f.detail
                .contains("thread [13, 0, 0] of work-group [1, 0, 0]"),
            "{}",
            f.detail
        );
        assert_eq!(arenas[1], x2, "stores before the trap stay done");
        assert!(f.to_string().contains("0x0000002a"), "{f}");
    }
}

#[test]
fn out_of_bounds_loads_and_stores_fault_naming_the_param() {
    // Scalar load past the binding.
    let mut b = KernelBuilder::new("oob", [32, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let v = b.load(px, t, 1);
    b.store(po, t, v);
    let k = b.finish();
    let mut arenas = vec![vec![1; 10], vec![0; 32]];
    let f = run(&k, [1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, OUT_OF_BOUNDS);
    assert!(
        f.detail
            .contains("load of param 0 `x` at index 10 is outside its 10 elements"),
        "{}",
        f.detail
    );
    assert_eq!(arenas[1], vec![0; 32], "nothing stored");
    // Store past the binding: the faulting store has no effect.
    let mut arenas = vec![vec![1; 32], vec![0; 20]];
    let f = run(&k, [1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, OUT_OF_BOUNDS);
    assert!(
        f.detail
            .contains("store of param 1 `out` at index 20 is outside its 20 elements"),
        "{}",
        f.detail
    );
    assert!(f.detail.contains("thread [20, 0, 0]"), "{}", f.detail);
    assert_eq!(arenas[1], vec![0; 20]);
    // A vector load whose last lane leaves the binding; inactive threads never fault.
    let mut b = KernelBuilder::new("oob4", [32, 1, 1], 1);
    let px = b.param("x", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let sh = b.shared(Scalar::U32, 16);
    let t = b.special(Special::LocalX);
    let limit = b.load(px, t, 1);
    let lt = b.cmp(CmpOp::Lt, t, limit);
    b.if_then(lt, |b| {
        let four = b.u32(4);
        let i = b.mul(t, four);
        let v = b.load(px, i, 4);
        let e = b.extract(v, 3);
        b.store(po, t, e);
        b.store(sh, t, e);
    });
    let k = b.finish();
    let p = Prepared::new(&k).unwrap();
    let mut arenas = vec![vec![8; 32], vec![0; 32]];
    p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap();
    assert_eq!(&arenas[1][..8], &[8; 8]);
    let mut arenas = vec![vec![9; 34], vec![0; 32]];
    let f = p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert!(
        f.detail
            .contains("load of param 0 `x` at index 32 (x4) is outside its 34 elements"),
        "{}",
        f.detail
    );
    let mut arenas = vec![vec![17; 100], vec![0; 32]];
    let f = p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert!(
        f.detail
            .contains("store of shared array 0 at index 16 is outside its 16 elements"),
        "{}",
        f.detail
    );
}

#[test]
fn misaligned_vector_accesses_fault() {
    // Thread t loads x[2t .. 2t + 4] as one vector: aligned to 4 elements only for even t.
    let mut b = KernelBuilder::new("misaligned", [8, 1, 1], 1);
    let px = b.param("x", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let two = b.u32(2);
    let i = b.mul(t, two);
    let v = b.load(px, i, 4);
    let e = b.extract(v, 0);
    b.store(po, t, e);
    let k = b.finish();
    let mut arenas = vec![vec![3; 64], vec![0; 8]];
    let f = run(&k, [1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, OUT_OF_BOUNDS);
    assert!(
        f.detail
            .contains("load of param 0 `x` at index 2 (x4) is not aligned to 4 elements"),
        "{}",
        f.detail
    );
    assert!(f.detail.contains("thread [1, 0, 0]"), "{}", f.detail);
}

#[test]
fn prefetch_ranges_are_checked_and_read_nothing() {
    // Thread t prefetches elements [4t, 4t + 4) and copies its own element.
    let mut b = KernelBuilder::new("ahead", [8, 1, 1], 1);
    let px = b.param("x", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let four = b.u32(4);
    let at = b.mul(t, four);
    b.prefetch(px, at, four);
    let v = b.load(px, t, 1);
    b.store(po, t, v);
    let k = b.finish();
    let x: Vec<u32> = (0..32).collect();
    let mut arenas = vec![x.clone(), vec![0; 8]];
    run(&k, [1, 1, 1], &whole(&arenas), &mut arenas).unwrap();
    assert_eq!(arenas[1], x[..8].to_vec());
    // A range past the binding faults like a load there, before anything is stored.
    let mut arenas = vec![vec![1; 30], vec![0; 8]];
    let f = run(&k, [1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, OUT_OF_BOUNDS);
    assert!(
        f.detail
            .contains("prefetch of param 0 `x` at index 28 (x4) is outside its 30 elements"),
        "{}",
        f.detail
    );
    assert_eq!(arenas[1], vec![0; 8]);
    // Prefetches have no alignment rule: a range starting off a multiple of its length is
    // reported by where it ends.
    let mut b = KernelBuilder::new("ahead8", [8, 1, 1], 1);
    let px = b.param("x", Scalar::U32, Access::Read);
    let t = b.special(Special::LocalX);
    let (four, eight) = (b.u32(4), b.u32(8));
    let at = b.mul(t, four);
    b.prefetch(px, at, eight);
    let k = b.finish();
    let mut arenas = vec![vec![1; 16]];
    let f = run(&k, [1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert!(
        f.detail
            .contains("prefetch of param 0 `x` at index 12 (x8) is outside its 16 elements"),
        "{}",
        f.detail
    );
}

#[test]
fn bindings_are_checked_and_may_share_an_arena() {
    let mut b = KernelBuilder::new("double", [16, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let v = b.load(px, t, 1);
    let s = b.add(v, v);
    b.store(po, t, s);
    let k = b.finish();
    let p = Prepared::new(&k).unwrap();
    let mut arenas = vec![vec![0; 64]];
    let f = p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, BAD_DISPATCH);
    assert!(
        f.detail
            .contains("2 buffer parameters but the dispatch binds 1"),
        "{}",
        f.detail
    );
    let bind = |arena, offset, len| Binding { arena, offset, len };
    let f = p
        .run([1, 1, 1], &[bind(0, 0, 16), bind(0, 50, 16)], &mut arenas)
        .unwrap_err();
    assert_eq!(f.code, BAD_DISPATCH);
    assert!(
        f.detail
            .contains("param 1 `out`: binding of words 50+16 is outside arena 0 of 64 words"),
        "{}",
        f.detail
    );
    let f = p
        .run([1, 1, 1], &[bind(0, 0, 16), bind(3, 0, 16)], &mut arenas)
        .unwrap_err();
    assert!(
        f.detail.contains("bound to arena 3 but there are 1 arenas"),
        "{}",
        f.detail
    );
    // Two ranges of one arena, and the same range read and written (in place).
    let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.25).collect();
    let mut arenas = vec![bits(&x)];
    p.run([1, 1, 1], &[bind(0, 5, 16), bind(0, 40, 16)], &mut arenas)
        .unwrap();
    for i in 0..16 {
        assert_eq!(arenas[0][40 + i], (x[5 + i] * 2.0).to_bits());
    }
    let mut arenas = vec![bits(&x)];
    p.run([1, 1, 1], &[bind(0, 8, 16), bind(0, 8, 16)], &mut arenas)
        .unwrap();
    assert_eq!(
        arenas[0][8..24],
        bits(&x[8..24].iter().map(|v| v * 2.0).collect::<Vec<_>>())
    );
    // A grid with a zero dimension runs nothing.
    p.run([0, 1, 1], &[bind(0, 0, 16), bind(0, 0, 16)], &mut arenas)
        .unwrap();
}

#[test]
fn kernels_without_a_defined_meaning_are_refused() {
    let refused = |k: &Kernel, what: &str| {
        let f = Prepared::new(k).unwrap_err();
        assert_eq!(f.code, INVALID_KERNEL, "{f}");
        assert!(f.detail.contains(what), "{what}: {f}");
    };
    let mut b = KernelBuilder::new("not_f32", [1, 1, 1], 1);
    let x = b.f32(1.0);
    b.un(UnOp::Not, x);
    refused(&b.finish(), "not of f32");
    let mut b = KernelBuilder::new("scope", [4, 1, 1], 1);
    let po = b.param("out", Scalar::U32, Access::Write);
    let t = b.special(Special::LocalX);
    let c = b.cmp(CmpOp::Eq, t, t);
    let mut inner = None;
    b.if_then(c, |b| inner = Some(b.u32(1)));
    b.store(po, t, inner.unwrap());
    refused(&b.finish(), "is used where it is not defined");
    refused(
        &KernelBuilder::new("sg", [24, 1, 1], 24).finish(),
        "not a power of two",
    );
    // A work-group whose size wraps u32 to 2 threads.
    refused(
        &KernelBuilder::new("wrap", [3, 1_431_655_766, 1], 1).finish(),
        "is not 1..=1024 threads",
    );
    // A value id the kernel has no type for (taken from a larger kernel).
    let mut big = KernelBuilder::new("big", [1, 1, 1], 1);
    let far = (0..10).map(|i| big.u32(i)).last().unwrap();
    let mut b = KernelBuilder::new("foreign", [1, 1, 1], 1);
    let po = b.param("out", Scalar::U32, Access::Write);
    b.store(po, far, far);
    refused(&b.finish(), "has no type");
    // Blocks nested deeper than the reference recurses.
    fn nest(b: &mut KernelBuilder, c: poot_kir::Val, depth: usize) {
        if depth > 0 {
            b.if_then(c, |b| nest(b, c, depth - 1));
        }
    }
    let mut b = KernelBuilder::new("deep", [1, 1, 1], 1);
    let c = b.bool(true);
    nest(&mut b, c, 300);
    refused(&b.finish(), "nest deeper than 256");
}

#[test]
fn parallel_runs_are_deterministic_and_fault_like_sequential_ones() {
    let mut b = KernelBuilder::new("poly", [64, 1, 1], 1);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let i = gid(&mut b, 64);
    let n = b.u32(20_000);
    let inb = b.cmp(CmpOp::Lt, i, n);
    b.if_then(inb, |b| {
        let v = b.load(px, i, 1);
        let e = b.un(UnOp::Exp, v);
        let c = b.un(UnOp::Cos, v);
        let y = b.fma(e, c, v);
        b.store(po, i, y);
    });
    let k = b.finish();
    let x: Vec<f32> = (0..20_000)
        .map(|i| (i as f32 * 0.001).sin() * 3.0)
        .collect();
    let grid = [20_000u32.div_ceil(64), 1, 1];
    let out = exec(&k, grid, vec![bits(&x), vec![0; 20_000]]);
    for (i, &v) in x.iter().enumerate() {
        assert_eq!(out[1][i], v.exp().mul_add(v.cos(), v).to_bits());
    }
    let p = Prepared::new(&k).unwrap();
    let mut again = vec![bits(&x), vec![0; 20_000]];
    p.run(grid, &whole(&again), &mut again).unwrap();
    assert_eq!(again, out, "a second run on pooled registers");
    // A fault in the middle of a parallel dispatch: the same arenas and fault as sequential.
    let k = trap_kernel();
    let p = Prepared::new(&k).unwrap();
    let mut x: Vec<u32> = (0..32 * 600).map(|i| i % 5 + 10).collect();
    x[32 * 300 + 3] = 7;
    x[32 * 500 + 9] = 7;
    let mut par = vec![x.clone(), vec![0; x.len()]];
    let mut seq = par.clone();
    let fp = p.run([600, 1, 1], &whole(&par), &mut par).unwrap_err();
    let fs = p
        .run_sequential([600, 1, 1], &whole(&seq), &mut seq)
        .unwrap_err();
    assert_eq!(fp, fs);
    assert_eq!(par, seq);
    assert!(fp.detail.contains("work-group [300, 0, 0]"), "{fp}");
    assert_eq!(par[1][32 * 301 - 1], x[32 * 301 - 1]);
    assert_eq!(par[1][32 * 301], 0);
}

#[test]
fn in_place_dispatches_keep_work_group_order() {
    // out[i] = x[i - 64] (x[i] + 1 in group 0) with `x` and `out` bound to the same words:
    // in work-group order every group copies what the previous group just wrote, so all
    // groups end up holding x[0..64] + 1. A driver that let groups read the old words would
    // give a shifted copy instead.
    let mut b = KernelBuilder::new("shift", [64, 1, 1], 1);
    let px = b.param("x", Scalar::U32, Access::Read);
    let po = b.param("out", Scalar::U32, Access::Write);
    let i = gid(&mut b, 64);
    let c64 = b.u32(64);
    let first = b.cmp(CmpOp::Lt, i, c64);
    let v = b.if_else(
        first,
        |b| {
            let v = b.load(px, i, 1);
            let one = b.u32(1);
            vec![b.add(v, one)]
        },
        |b| {
            let j = b.sub(i, c64);
            vec![b.load(px, j, 1)]
        },
    );
    b.store(po, i, v[0]);
    let p = Prepared::new(&b.finish()).unwrap();
    let n = 64 * 300;
    let x: Vec<u32> = (0..n as u32).map(|i| i * 3).collect();
    let bind = Binding {
        arena: 0,
        offset: 0,
        len: n,
    };
    let mut arenas = vec![x.clone()];
    p.run([300, 1, 1], &[bind, bind], &mut arenas).unwrap();
    let want: Vec<u32> = (0..n).map(|i| x[i % 64] + 1).collect();
    assert_eq!(arenas[0], want);
}

#[test]
fn prepared_kernels_are_shareable_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Prepared>();
    // Concurrent runs of one prepared kernel, each on its own arenas.
    let k = trap_kernel();
    let p = Prepared::new(&k).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let p = &p;
            s.spawn(move || {
                let x: Vec<u32> = (0..32 * 50).map(|i| i % 5 + 10 + t).collect();
                let mut arenas = vec![x.clone(), vec![0; x.len()]];
                p.run([50, 1, 1], &whole(&arenas), &mut arenas).unwrap();
                assert_eq!(arenas[1], x);
            });
        }
    });
}

/// `out[t]` = the first element of the mma of `x[t]` (as A, B and C) in the lanes below
/// `active`, inside a `matrix` whose other form is empty.
fn mma_kernel(active: u32) -> Kernel {
    let mut b = KernelBuilder::new("mma", [64, 1, 1], 32);
    let px = b.param("x", Scalar::F32, Access::Read);
    let po = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let lim = b.u32(active);
    let go = b.cmp(CmpOp::Lt, t, lim);
    b.begin();
    b.if_then(go, |b| {
        let v = b.load(px, t, 1);
        let d = b.expr(poot_kir::Expr::Mma {
            a: [v; 4],
            b: [v; 2],
            c: [v; 4],
        });
        let d0 = b.extract(d, 0);
        b.store(po, t, d0);
    });
    let with = b.end();
    b.begin();
    let without = b.end();
    b.finish_matrix(with, without);
    b.finish()
}

#[test]
fn mma_of_inexact_operands_or_part_of_a_subgroup_faults() {
    let p = Prepared::new(&mma_kernel(64)).unwrap();
    // 1.5 is exact in tf32: every element of D is 8 * 1.5 * 1.5 + 1.5.
    let mut arenas = vec![vec![1.5f32.to_bits(); 64], vec![0; 64]];
    p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap();
    assert!(arenas[1].iter().all(|&d| f32::from_bits(d) == 19.5));
    // 1 + 2^-20 is not.
    let mut x = vec![1.5f32.to_bits(); 64];
    x[37] = (1.0f32 + 2f32.powi(-20)).to_bits();
    let mut arenas = vec![x, vec![0; 64]];
    let f = p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, INEXACT_MMA, "{f:?}");
    assert!(f.detail.contains("not exact in tf32") && f.detail.contains("thread [37, 0, 0]"));
    // Half of the second subgroup.
    let p = Prepared::new(&mma_kernel(48)).unwrap();
    let mut arenas = vec![vec![1.5f32.to_bits(); 64], vec![0; 64]];
    let f = p.run([1, 1, 1], &whole(&arenas), &mut arenas).unwrap_err();
    assert_eq!(f.code, INEXACT_MMA, "{f:?}");
    assert!(f.detail.contains("inactive lanes"), "{}", f.detail);
}
