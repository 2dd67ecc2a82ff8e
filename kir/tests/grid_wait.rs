//! The verifier's grid wait rules: with a `GridWait` in a kernel, every path waits exactly
//! once, never inside a loop, and before its wait a path reads only the parameters some
//! wait lists and writes no buffer.

use poot_kir::{Access, CmpOp, KernelBuilder, Mem, Scalar, Special, verify};

/// A kernel with a weight `w` (param 0), an input `x` (param 1) and an output (param 2);
/// `body` gets them and the work-group's first-thread condition.
fn kernel(body: impl FnOnce(&mut KernelBuilder, [Mem; 3], poot_kir::Val)) -> Result<(), String> {
    let mut b = KernelBuilder::new("k", [32, 1, 1], 1);
    let w = b.param("w", Scalar::F32, Access::Read);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let t = b.special(Special::LocalX);
    let z = b.u32(0);
    let first = b.cmp(CmpOp::Eq, t, z);
    body(&mut b, [w, x, out], first);
    verify(&b.finish()).map_err(|e| e.to_string())
}

fn refused(what: &str, body: impl FnOnce(&mut KernelBuilder, [Mem; 3], poot_kir::Val)) {
    let err = kernel(body).expect_err(what);
    assert!(err.contains(what), "{what}: {err}");
}

#[test]
fn a_listed_weight_loads_before_the_wait() {
    kernel(|b, [w, x, out], _| {
        let t = b.special(Special::LocalX);
        let wv = b.load(w, t, 1);
        b.grid_wait(vec![0]);
        let xv = b.load(x, t, 1);
        let y = b.mul(wv, xv);
        b.store(out, t, y);
    })
    .unwrap();
}

#[test]
fn every_branch_may_wait_once() {
    // The shape of a merged kernel: each member waits in its own branch.
    kernel(|b, [w, x, out], first| {
        let t = b.special(Special::LocalX);
        b.if_else(
            first,
            |b| {
                let wv = b.load(w, t, 1);
                b.grid_wait(vec![0]);
                let xv = b.load(x, t, 1);
                let y = b.add(wv, xv);
                b.store(out, t, y);
                vec![]
            },
            |b| {
                b.grid_wait(vec![]);
                vec![]
            },
        );
    })
    .unwrap();
}

#[test]
fn an_unlisted_read_before_the_wait_is_refused() {
    refused(
        "param 1 is read before the grid wait but no wait lists it",
        |b, [_, x, _], _| {
            let t = b.special(Special::LocalX);
            b.load(x, t, 1);
            b.grid_wait(vec![0]);
        },
    );
}

#[test]
fn a_write_before_the_wait_is_refused() {
    refused(
        "param 2 is written before the grid wait",
        |b, [_, _, out], first| {
            let t = b.special(Special::LocalX);
            let one = b.f32(1.0);
            b.if_then(first, |b| b.store(out, t, one));
            b.grid_wait(vec![0]);
        },
    );
    refused(
        "a fence, trap or launch hint before the grid wait",
        |b, _, _| {
            b.launch_dependents();
            b.grid_wait(vec![]);
        },
    );
}

#[test]
fn waits_that_do_not_happen_once_on_every_path_are_refused() {
    refused("a grid wait on one branch of an if only", |b, _, first| {
        b.if_then(first, |b| b.grid_wait(vec![]));
    });
    refused("a second grid wait on one path", |b, _, _| {
        b.grid_wait(vec![]);
        b.grid_wait(vec![]);
    });
    refused("a grid wait in a loop", |b, _, _| {
        let (s, e) = (b.u32(0), b.u32(4));
        b.for_loop(s, e, 1, &[], |b, _, _| {
            b.grid_wait(vec![]);
            vec![]
        });
    });
}

#[test]
fn a_listed_parameter_must_be_readable() {
    refused("param 2 (out) is not readable", |b, _, _| {
        b.grid_wait(vec![2]);
    });
}
