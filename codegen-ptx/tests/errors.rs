//! Typed errors: what PTX cannot express is refused with a message that names the kernel,
//! the value and the target (expected messages inline, as naga's `wgsl_errors` does).

mod common;

use common::{P0, unary_kernel};
use poot_codegen_ptx::{PtxError, PtxTarget, render};
use poot_kir::{Access, BinOp, Kernel, KernelBuilder, ReduceOp, Scalar, Special, UnOp};

fn err(k: &Kernel) -> PtxError {
    let e = render(k, &PtxTarget::sm90()).expect_err("renders");
    assert_eq!(
        render(k, &PtxTarget::sm80()).err().map(|e| e.to_string()),
        Some(e.to_string().replace("sm_90", "sm_80"))
    );
    e
}

#[test]
fn subgroup_not_warp() {
    let e = err(&common::subgroup8());
    assert!(matches!(
        e,
        PtxError::Subgroup {
            subgroup: 8,
            warp: 32,
            ..
        }
    ));
    assert_eq!(
        e.to_string(),
        "kernel `subgroup8`: subgroup width 8 is not the sm_90 warp width 32"
    );
}

#[test]
fn shared_over_limit() {
    let mut b = KernelBuilder::new("big_shared", [32, 1, 1], 1);
    let s = b.shared(Scalar::F32, 12 * 1024 + 1);
    let t = b.special(Special::LocalX);
    let z = b.f32(0.0);
    b.store(s, t, z);
    let e = err(&b.finish());
    assert_eq!(
        e.to_string(),
        "kernel `big_shared`: 49156 bytes of shared memory exceed the 49152 bytes sm_90 allows"
    );
}

#[test]
fn f32_atomic_max() {
    let k = unary_kernel("amax", Scalar::F32, |b, v| {
        let t = b.special(Special::LocalX);
        b.atomic(ReduceOp::Max, P0, t, v);
        None
    });
    let e = err(&k);
    assert!(matches!(e, PtxError::Unsupported { .. }));
    assert_eq!(
        e.to_string(),
        "kernel `amax`: atomic max of %1 on f32 memory p0 is not supported on sm_90"
    );
}

#[test]
fn f32_bitwise_and_bool_neg_are_refused() {
    let k = unary_kernel("fand", Scalar::F32, |b, v| Some(b.bin(BinOp::And, v, v)));
    assert_eq!(
        err(&k).to_string(),
        "kernel `fand`: %2 = and of f32 is not supported on sm_90"
    );
    let k = unary_kernel("bneg", Scalar::F32, |b, v| {
        let c = b.un(UnOp::IsNan, v);
        let n = b.un(UnOp::Neg, c);
        Some(b.select(n, v, v))
    });
    assert_eq!(
        err(&k).to_string(),
        "kernel `bneg`: %3 = neg of bool is not supported on sm_90"
    );
}

#[test]
fn bool_subgroup_add() {
    let k = unary_kernel("badd", Scalar::F32, |b, v| {
        let c = b.un(UnOp::IsNan, v);
        let s = b.subgroup_reduce(ReduceOp::Add, c);
        Some(b.select(s, v, v))
    });
    assert_eq!(
        err(&k).to_string(),
        "kernel `badd`: %3 = subgroup_add of bool is not supported on sm_90"
    );
}

#[test]
fn min_without_nan_support() {
    let k = unary_kernel("fmin", Scalar::F32, |b, v| Some(b.bin(BinOp::Min, v, v)));
    let target = PtxTarget {
        nan_min_max: false,
        ..PtxTarget::sm80()
    };
    assert_eq!(
        render(&k, &target).unwrap_err().to_string(),
        "kernel `fmin`: %2 = f32 min with NaN is not supported on sm_80"
    );
}

#[test]
fn invalid_kernel_and_name_and_params() {
    let k = KernelBuilder::new("too_wide", [2048, 1, 1], 1).finish();
    let e = err(&k);
    assert!(matches!(e, PtxError::Verify(_)));
    assert_eq!(
        e.to_string(),
        "invalid kernel: kernel `too_wide`: work-group [2048, 1, 1] is not 1..=1024 threads"
    );
    let k = KernelBuilder::new("bad-name", [32, 1, 1], 1).finish();
    assert_eq!(
        err(&k).to_string(),
        "kernel `bad-name`: the name is not a PTX identifier"
    );
    let mut b = KernelBuilder::new("many", [32, 1, 1], 1);
    for i in 0..513 {
        b.param(&format!("p{i}"), Scalar::U32, Access::Read);
    }
    assert_eq!(
        err(&b.finish()).to_string(),
        "kernel `many`: 513 parameters need 4104 bytes, over the 4096 bytes sm_90 allows"
    );
}
