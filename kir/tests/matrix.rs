//! The verifier's matrix rules (`mma` only in the matrix form of a `matrix`, only in 32-lane
//! subgroups, on f32 operands; no `matrix` inside another) and `without_matrix`, the kernel a
//! device without matrix multiply-accumulate runs.

use poot_kir::{
    Access, Expr, Kernel, KernelBuilder, Mem, Scalar, Special, Val, has_matrix, verify,
    without_matrix,
};

/// A kernel of one subgroup of `subgroup` lanes reading `x` (param 0) into `out` (param 1),
/// with a shared array used only where `body` uses it.
fn kernel(subgroup: u32, body: impl FnOnce(&mut KernelBuilder, [Mem; 3], Val)) -> Kernel {
    let mut b = KernelBuilder::new("k", [32, 1, 1], subgroup);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let s = b.shared(Scalar::F32, 32);
    let t = b.special(Special::LocalX);
    body(&mut b, [x, out, s], t);
    b.finish()
}

/// `out[t]` = the first element of the mma of `x[t]` everywhere.
fn mma(b: &mut KernelBuilder, [x, out, _]: [Mem; 3], t: Val) {
    let v = b.load(x, t, 1);
    let d = b.expr(Expr::Mma {
        a: [v; 4],
        b: [v; 2],
        c: [v; 4],
    });
    let d0 = b.extract(d, 0);
    b.store(out, t, d0);
}

fn refused(what: &str, k: &Kernel) {
    let err = verify(k).expect_err(what).to_string();
    assert!(err.contains(what), "{what}: {err}");
}

/// The matrix form does the mma; the form without stores `x` through the shared array.
fn two_forms(b: &mut KernelBuilder, m: [Mem; 3], t: Val) {
    b.begin();
    mma(b, m, t);
    let with = b.end();
    b.begin();
    let v = b.load(m[0], t, 1);
    b.store(m[2], t, v);
    let w = b.load(m[2], t, 1);
    b.store(m[1], t, w);
    let without = b.end();
    b.finish_matrix(with, without);
}

#[test]
fn mma_outside_a_matrix_is_refused() {
    refused("mma outside the matrix form", &kernel(32, mma));
    let k = kernel(32, |b, m, t| {
        b.begin();
        let with = b.end();
        b.begin();
        mma(b, m, t);
        let without = b.end();
        b.finish_matrix(with, without);
    });
    refused("mma outside the matrix form", &k);
}

#[test]
fn mma_needs_a_warp_and_f32_operands() {
    let k = kernel(16, two_forms);
    refused("mma in a kernel of subgroup 16", &k);
    let k = kernel(32, |b, [x, out, _], t| {
        b.begin();
        let v = b.load(x, t, 1);
        let i = b.bitcast(v, Scalar::U32);
        let d = b.expr(Expr::Mma {
            a: [v, v, v, i],
            b: [v; 2],
            c: [v; 4],
        });
        let d0 = b.extract(d, 0);
        b.store(out, t, d0);
        let with = b.end();
        b.begin();
        let without = b.end();
        b.finish_matrix(with, without);
    });
    refused("is u32, not f32", &k);
}

#[test]
fn a_matrix_inside_a_matrix_is_refused() {
    let k = kernel(32, |b, m, t| {
        b.begin();
        two_forms(b, m, t);
        let with = b.end();
        b.begin();
        let without = b.end();
        b.finish_matrix(with, without);
    });
    refused("a matrix inside a matrix", &k);
}

#[test]
fn without_matrix_keeps_the_other_form_and_only_its_shared_arrays() {
    let k = kernel(32, two_forms);
    verify(&k).unwrap();
    assert!(has_matrix(&k.body));
    let plain = without_matrix(&k);
    verify(&plain).unwrap();
    assert!(!has_matrix(&plain.body));
    assert_eq!(
        plain.shared.len(),
        1,
        "the form without uses the shared array"
    );
    let text = poot_kir::print(&plain);
    assert!(!text.contains("mma") && !text.contains("matrix"), "{text}");
    // A kernel whose shared array only the matrix form used loses it.
    let k = kernel(32, |b, m, t| {
        b.begin();
        let v = b.load(m[0], t, 1);
        b.store(m[2], t, v);
        mma(b, m, t);
        let with = b.end();
        b.begin();
        let v = b.load(m[0], t, 1);
        b.store(m[1], t, v);
        let without = b.end();
        b.finish_matrix(with, without);
    });
    verify(&k).unwrap();
    assert_eq!(without_matrix(&k).shared.len(), 0);
}
