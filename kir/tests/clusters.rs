//! The verifier's cluster rules (a `clustered` has two forms; cluster operations only in the
//! clustered one, one cluster shape a kernel, 2 to 8 work-groups a cluster; remote stores
//! only to shared memory) and `without_clusters`, the kernel a device without clusters runs.

use poot_kir::{
    Access, Inst, Kernel, KernelBuilder, Mem, Scalar, Special, cluster_dims, print, verify,
    without_clusters,
};

/// A kernel with an input (param 0), an output (param 1) and a shared array of 32 floats;
/// `body` gets the three and the thread's index.
fn kernel(body: impl FnOnce(&mut KernelBuilder, [Mem; 3], poot_kir::Val)) -> Kernel {
    let mut b = KernelBuilder::new("k", [32, 1, 1], 1);
    let x = b.param("x", Scalar::F32, Access::Read);
    let out = b.param("out", Scalar::F32, Access::Write);
    let s = b.shared(Scalar::F32, 32);
    let t = b.special(Special::LocalX);
    body(&mut b, [x, out, s], t);
    b.finish()
}

fn refused(what: &str, k: &Kernel) {
    let err = verify(k).expect_err(what).to_string();
    assert!(err.contains(what), "{what}: {err}");
}

/// A clustered form that stores `x[t]` into the shared array of work-group 0 of the cluster
/// `dims`, and a form without that stores it to `out`.
fn exchange(b: &mut KernelBuilder, [x, out, s]: [Mem; 3], t: poot_kir::Val, dims: [u32; 3]) {
    let v = b.load(x, t, 1);
    b.begin();
    b.cluster_arrive(false);
    b.cluster_wait();
    let zero = b.u32(0);
    b.store_remote(s, zero, t, v);
    b.cluster_arrive(true);
    b.cluster_wait();
    let with = b.end();
    b.begin();
    b.store(out, t, v);
    let without = b.end();
    b.finish_clustered(dims, with, without);
}

#[test]
fn both_forms_verify_and_the_shape_is_found() {
    let k = kernel(|b, m, t| exchange(b, m, t, [1, 4, 1]));
    verify(&k).unwrap();
    assert_eq!(cluster_dims(&k.body), Some([1, 4, 1]));
    assert!(print(&k).contains("clustered 1x4x1"));
}

#[test]
fn cluster_operations_need_the_clustered_form() {
    let k = kernel(|b, _, _| b.cluster_arrive(true));
    refused("cluster_arrive outside the clustered form", &k);
    let k = kernel(|b, [x, _, s], t| {
        let v = b.load(x, t, 1);
        b.begin();
        let zero = b.u32(0);
        b.store_remote(s, zero, t, v);
        let without = b.end();
        b.finish_clustered([2, 1, 1], Vec::new(), without);
    });
    refused("store_remote outside the clustered form", &k);
}

#[test]
fn one_shape_of_2_to_8_groups() {
    for dims in [[1, 1, 1], [1, 9, 1], [0, 2, 1], [4, 4, 1]] {
        let k = kernel(|b, m, t| exchange(b, m, t, dims));
        refused("is not 2 to 8 groups", &k);
    }
    let k = kernel(|b, m, t| {
        exchange(b, m, t, [1, 2, 1]);
        exchange(b, m, t, [1, 4, 1]);
    });
    refused("a second cluster shape", &k);
}

#[test]
fn remote_stores_go_to_shared_memory_of_the_right_type() {
    let k = kernel(|b, [x, out, _], t| {
        let v = b.load(x, t, 1);
        b.begin();
        let zero = b.u32(0);
        b.store_remote(out, zero, t, v);
        let with = b.end();
        b.finish_clustered([2, 1, 1], with, Vec::new());
    });
    refused("store_remote to a buffer", &k);
    let k = kernel(|b, [_, _, s], t| {
        b.begin();
        let zero = b.u32(0);
        b.store_remote(s, zero, t, t);
        let with = b.end();
        b.finish_clustered([2, 1, 1], with, Vec::new());
    });
    refused("cannot store u32", &k);
}

#[test]
fn without_clusters_keeps_the_other_form_in_place() {
    let k = kernel(|b, m, t| {
        let first = b.cmp(poot_kir::CmpOp::Eq, t, t);
        b.if_then(first, |b| exchange(b, m, t, [1, 2, 1]));
    });
    let flat = without_clusters(&k);
    verify(&flat).unwrap();
    assert_eq!(cluster_dims(&flat.body), None);
    let text = print(&flat);
    assert!(
        !text.contains("cluster") && !text.contains("store_remote"),
        "{text}"
    );
    let Some(Inst::If { then, .. }) = flat.body.last() else {
        panic!("{text}");
    };
    assert!(
        matches!(then.as_slice(), [Inst::Let(..), Inst::Store { .. }]),
        "{text}"
    );
    // The inbox only the clustered form stores to is not declared without clusters.
    assert!(flat.shared.is_empty(), "{text}");
}

#[test]
fn without_clusters_drops_only_the_unused_shared_arrays_and_renumbers_the_rest() {
    // Arrays: 0 (the inbox, clustered form only), 1 (both forms), 2 (outside any clustered).
    let k = kernel(|b, m, t| {
        let both = b.shared(Scalar::F32, 8);
        let outside = b.shared(Scalar::U32, 4);
        exchange(b, m, t, [2, 1, 1]);
        let v = b.load(m[0], t, 1);
        b.begin();
        b.store(both, t, v);
        let with = b.end();
        b.begin();
        b.store(both, t, v);
        let without = b.end();
        b.finish_clustered([2, 1, 1], with, without);
        b.store(outside, t, t);
    });
    verify(&k).unwrap();
    assert_eq!(k.shared.len(), 3);
    let flat = without_clusters(&k);
    verify(&flat).unwrap();
    let text = print(&flat);
    let lens: Vec<u32> = flat.shared.iter().map(|a| a.len).collect();
    assert_eq!(lens, [8, 4], "{text}");
    let stored: Vec<Mem> = flat
        .body
        .iter()
        .filter_map(|i| match i {
            Inst::Store { mem, .. } => Some(*mem),
            _ => None,
        })
        .collect();
    assert_eq!(
        stored,
        [Mem::Param(1), Mem::Shared(0), Mem::Shared(1)],
        "{text}"
    );
    // The clustered kernel itself keeps all three.
    assert_eq!(k.shared.len(), 3);
}
