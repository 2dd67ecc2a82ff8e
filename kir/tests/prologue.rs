//! `verify_prologue`: before its grid wait a kernel loads only parameters no other dispatch
//! writes and stores nothing; a wait counts after an `if` only when both branches wait.

use poot_kir::{Access, CmpOp, Kernel, KernelBuilder, Mem, Scalar, Special, verify_prologue};

/// A kernel with a constant `w` (p0), a computed `x` (p1) and an output `y` (p2): `body` gets
/// the builder, the three parameters and the local index.
fn kernel(body: impl FnOnce(&mut KernelBuilder, [Mem; 3], poot_kir::Val)) -> Kernel {
    let mut b = KernelBuilder::new("k", [32, 1, 1], 32);
    let w = b.param("w", Scalar::F32, Access::Read);
    let x = b.param("x", Scalar::F32, Access::Read);
    let y = b.param("y", Scalar::F32, Access::Write);
    let i = b.special(Special::LocalX);
    body(&mut b, [w, x, y], i);
    let k = b.finish();
    poot_kir::verify(&k).expect("a well-formed kernel");
    k
}

const CONSTANT: [bool; 3] = [true, false, false];

fn refusal(k: &Kernel) -> String {
    verify_prologue(k, &CONSTANT)
        .expect_err("the prologue breaks the rule")
        .to_string()
}

#[test]
fn constant_loads_may_precede_the_wait() {
    let k = kernel(|b, [w, x, y], i| {
        let a = b.load(w, i, 1);
        b.grid_wait();
        let c = b.load(x, i, 1);
        let s = b.add(a, c);
        b.store(y, i, s);
    });
    verify_prologue(&k, &CONSTANT).expect("only the weight is read before the wait");
}

#[test]
fn a_kernel_without_a_wait_waits_first() {
    let k = kernel(|b, [_, x, y], i| {
        let c = b.load(x, i, 1);
        b.store(y, i, c);
    });
    verify_prologue(&k, &CONSTANT).expect("no wait: the target waits before everything");
}

#[test]
fn computed_loads_before_the_wait_are_refused() {
    let k = kernel(|b, [_, x, y], i| {
        let c = b.load(x, i, 1);
        b.grid_wait();
        b.store(y, i, c);
    });
    let e = refusal(&k);
    assert!(e.contains("load of p1 before the grid wait"), "{e}");
}

#[test]
fn stores_before_the_wait_are_refused() {
    let k = kernel(|b, [w, _, y], i| {
        let a = b.load(w, i, 1);
        b.store(y, i, a);
        b.grid_wait();
    });
    let e = refusal(&k);
    assert!(e.contains("write to p2 before the grid wait"), "{e}");
}

#[test]
fn a_wait_in_one_branch_does_not_count_after_it() {
    let k = kernel(|b, [_, x, y], i| {
        let zero = b.u32(0);
        let first = b.cmp(CmpOp::Eq, i, zero);
        b.if_then(first, |b| b.grid_wait());
        let c = b.load(x, i, 1);
        b.store(y, i, c);
    });
    let e = refusal(&k);
    assert!(e.contains("load of p1 before the grid wait"), "{e}");
}
