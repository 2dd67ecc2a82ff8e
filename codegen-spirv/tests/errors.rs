//! Typed errors: what a SPIR-V target cannot express is refused with a message that names the
//! kernel, the value and the target (expected messages inline, as naga's `wgsl_errors` does).

mod common;

use common::{P0, unary_kernel};
use poot_codegen_spirv::{SpirvError, SpirvTarget, render};
use poot_kir::{Access, BinOp, CmpOp, KernelBuilder, ReduceOp, Scalar, Special, UnOp};

fn msg(k: &poot_kir::Kernel, t: &SpirvTarget) -> String {
    render(k, t).expect_err("renders").to_string()
}

#[test]
fn f32_atomics_need_the_capability() {
    let k = common::atomics_f32();
    assert_eq!(
        msg(&k, &SpirvTarget::vulkan12()),
        "kernel `atomics_f32`: atomic add of %3 on f32 memory p0 is not supported on vulkan1.2"
    );
    assert!(render(&k, &SpirvTarget::lavapipe()).is_ok());
    let k = common::atomics_f32_shared();
    for t in [SpirvTarget::vulkan12(), SpirvTarget::lavapipe()] {
        assert_eq!(
            msg(&k, &t),
            format!(
                "kernel `atomics_f32_shared`: atomic add of %3 on f32 memory s0 is not supported on {}",
                t.name
            )
        );
    }
    let k = unary_kernel("amax", Scalar::F32, |b, v| {
        let t = b.special(Special::LocalX);
        b.atomic(ReduceOp::Max, P0, t, v);
        None
    });
    assert_eq!(
        msg(&k, &SpirvTarget::lavapipe()),
        "kernel `amax`: atomic max of %1 on f32 memory p0 is not supported on lavapipe"
    );
}

#[test]
fn operators_without_meaning_are_refused() {
    let t = SpirvTarget::vulkan12();
    let k = unary_kernel("fand", Scalar::F32, |b, v| Some(b.bin(BinOp::And, v, v)));
    assert_eq!(
        msg(&k, &t),
        "kernel `fand`: %2 = and of f32 is not supported on vulkan1.2"
    );
    let k = unary_kernel("bneg", Scalar::F32, |b, v| {
        let c = b.un(UnOp::IsNan, v);
        let n = b.un(UnOp::Neg, c);
        Some(b.select(n, v, v))
    });
    assert_eq!(
        msg(&k, &t),
        "kernel `bneg`: %3 = neg of bool is not supported on vulkan1.2"
    );
    let k = unary_kernel("badd", Scalar::F32, |b, v| {
        let c = b.un(UnOp::IsNan, v);
        let s = b.subgroup_reduce(ReduceOp::Add, c);
        Some(b.select(s, v, v))
    });
    for t in [SpirvTarget::vulkan12(), SpirvTarget::lavapipe()] {
        assert_eq!(
            msg(&k, &t),
            format!(
                "kernel `badd`: %3 = subgroup_add of bool is not supported on {}",
                t.name
            )
        );
    }
}

#[test]
fn fallback_refuses_a_reducing_loop_inside_a_branch() {
    let mut b = KernelBuilder::new("loop_in_if", [64, 1, 1], 32);
    let x = b.param("x", Scalar::F32, Access::ReadWrite);
    let t = b.special(Special::LocalX);
    let n = b.u32(40);
    let inside = b.cmp(CmpOp::Lt, t, n);
    b.if_then(inside, |b| {
        let (z, four) = (b.u32(0), b.u32(4));
        let zero = b.f32(0.0);
        let r = b.for_loop(z, four, 1, &[zero], |b, _, c| {
            let v = b.load(x, t, 1);
            let s = b.subgroup_reduce(ReduceOp::Add, v);
            vec![b.add(c[0], s)]
        });
        b.store(x, t, r[0]);
    });
    let k = b.finish();
    // Native subgroups need no barrier: fine on a 32-wide device.
    assert!(render(&k, &SpirvTarget::vulkan12()).is_ok());
    let e = render(&k, &SpirvTarget::lavapipe()).unwrap_err();
    assert!(matches!(e, SpirvError::Unsupported { .. }));
    assert_eq!(
        e.to_string(),
        "kernel `loop_in_if`: the loop over %6, which has subgroup operations, inside a branch \
         (the shared-memory fallback needs them in work-group-uniform control flow) is not \
         supported on lavapipe"
    );
}

#[test]
fn whole_kernel_limits() {
    let mut b = KernelBuilder::new("odd_subgroup", [48, 1, 1], 24);
    let x = b.param("x", Scalar::F32, Access::ReadWrite);
    let t = b.special(Special::LocalX);
    let v = b.load(x, t, 1);
    let s = b.subgroup_reduce(ReduceOp::Add, v);
    b.store(x, t, s);
    let k = b.finish();
    assert_eq!(
        msg(&k, &SpirvTarget::vulkan12()),
        "kernel `odd_subgroup`: subgroup width 24 is not a power of two, which the shared-memory \
         fallback needs on vulkan1.2"
    );

    // 28 KiB and a word of arrays fit; with the fallback's 4 KiB of scratch they do not.
    let mut b = KernelBuilder::new("big_shared", [1024, 1, 1], 32);
    let s = b.shared(Scalar::F32, 7 * 1024 + 1);
    let t = b.special(Special::LocalX);
    let v = b.load(s, t, 1);
    let r = b.subgroup_reduce(ReduceOp::Add, v);
    b.store(s, t, r);
    let k = b.finish();
    assert!(render(&k, &SpirvTarget::vulkan12()).is_ok());
    let e = render(&k, &SpirvTarget::lavapipe()).unwrap_err();
    assert!(matches!(e, SpirvError::Shared { bytes: 32772, .. }), "{e}");
    let small = SpirvTarget {
        max_shared: 16 * 1024,
        ..SpirvTarget::lavapipe()
    };
    assert_eq!(
        msg(&k, &small),
        "kernel `big_shared`: 32772 bytes of shared memory exceed the 16384 bytes lavapipe allows"
    );

    let k = KernelBuilder::new("wide", [512, 1, 1], 1).finish();
    let t = SpirvTarget {
        max_threads: 256,
        ..SpirvTarget::vulkan12()
    };
    assert_eq!(
        msg(&k, &t),
        "kernel `wide`: 512 threads per work-group exceed the 256 vulkan1.2 allows"
    );

    let mut b = KernelBuilder::new("many", [32, 1, 1], 1);
    for i in 0..8 {
        b.param(&format!("p{i}"), Scalar::U32, Access::Read);
    }
    let t = SpirvTarget {
        max_storage_buffers: 8,
        ..SpirvTarget::vulkan12()
    };
    assert_eq!(
        msg(&b.finish(), &t),
        "kernel `many`: 9 storage buffers (8 parameters and the error words) exceed the 8 \
         vulkan1.2 allows"
    );
}

#[test]
fn invalid_kernel_and_version() {
    let k = KernelBuilder::new("too_wide", [2048, 1, 1], 1).finish();
    let e = render(&k, &SpirvTarget::vulkan12()).unwrap_err();
    assert!(matches!(e, SpirvError::Verify(_)));
    assert_eq!(
        e.to_string(),
        "invalid kernel: kernel `too_wide`: work-group [2048, 1, 1] is not 1..=1024 threads"
    );
    let k = KernelBuilder::new("old", [32, 1, 1], 1).finish();
    let t = SpirvTarget {
        spirv_version: (1, 2),
        ..SpirvTarget::vulkan12()
    };
    assert_eq!(
        msg(&k, &t),
        "kernel `old`: SPIR-V 1.2 (1.3 to 1.6 are) is not supported on vulkan1.2"
    );
}
