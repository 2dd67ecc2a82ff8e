//! The two forms of a kernel with `clustered` or `matrix` statements: the cluster shape it
//! asks for, and the kernel a device without clusters, or without matrix multiply-accumulate,
//! runs.
//!
//! Invariants: `without_clusters` (`without_matrix`) keeps every statement of the form without
//! clusters (matrix operations) in place and nothing of the other, and its kernel declares
//! exactly the shared arrays the kept forms use (an array only the other form addresses, such
//! as an inbox for other work-groups' records, is dropped and the later arrays renumbered), so
//! a device without the feature reserves no shared memory it never touches.

use crate::kernel::{Expr, Inst, Kernel, Mem};

/// Which two-form statement a flattening replaces by its second form.
#[derive(Clone, Copy, PartialEq)]
enum Feature {
    Clusters,
    Matrix,
}

/// `k` with every two-form statement of `feature` replaced by its form without, in place, and
/// the shared arrays no statement then addresses dropped.
fn without(k: &Kernel, feature: Feature) -> Kernel {
    fn flat(insts: &mut Vec<Inst>, feature: Feature) {
        let mut out = Vec::with_capacity(insts.len());
        for mut i in insts.drain(..) {
            match &mut i {
                Inst::Clustered { els, .. } if feature == Feature::Clusters => {
                    flat(els, feature);
                    out.append(els);
                    continue;
                }
                Inst::Matrix { els, .. } if feature == Feature::Matrix => {
                    flat(els, feature);
                    out.append(els);
                    continue;
                }
                Inst::If { then, els, .. }
                | Inst::Clustered { then, els, .. }
                | Inst::Matrix { then, els } => {
                    flat(then, feature);
                    flat(els, feature);
                }
                Inst::For { body, .. } => flat(body, feature),
                _ => {}
            }
            out.push(i);
        }
        *insts = out;
    }
    let mut k = k.clone();
    flat(&mut k.body, feature);
    drop_unused_shared(&mut k);
    k
}

/// `k` as a device without clusters runs it: every `Clustered` replaced by its form
/// without clusters, in place, and the shared arrays no statement then addresses dropped.
/// The result has no cluster operation.
pub fn without_clusters(k: &Kernel) -> Kernel {
    without(k, Feature::Clusters)
}

/// `k` as a device without subgroup matrix multiply-accumulate runs it: every `Matrix`
/// replaced by its form without, in place, and the shared arrays no statement then addresses
/// dropped. The result has no `Mma`.
pub fn without_matrix(k: &Kernel) -> Kernel {
    without(k, Feature::Matrix)
}

/// Whether `insts` hold a `Matrix` at any depth.
pub fn has_matrix(insts: &[Inst]) -> bool {
    insts.iter().any(|i| match i {
        Inst::Matrix { .. } => true,
        Inst::If { then, els, .. } | Inst::Clustered { then, els, .. } => {
            has_matrix(then) || has_matrix(els)
        }
        Inst::For { body, .. } => has_matrix(body),
        _ => false,
    })
}

/// The cluster shape of the first `Clustered` in `insts` (at any depth), if any.
pub fn cluster_dims(insts: &[Inst]) -> Option<[u32; 3]> {
    insts.iter().find_map(|i| match i {
        Inst::Clustered { dims, .. } => Some(*dims),
        Inst::If { then, els, .. } | Inst::Matrix { then, els } => {
            cluster_dims(then).or_else(|| cluster_dims(els))
        }
        Inst::For { body, .. } => cluster_dims(body),
        _ => None,
    })
}

/// Removes the shared arrays no statement of `k` addresses, renumbering the rest in order.
fn drop_unused_shared(k: &mut Kernel) {
    let mut used = vec![false; k.shared.len()];
    for_each_mem(&mut k.body, &mut |m| {
        if let Mem::Shared(i) = *m {
            used[i as usize] = true;
        }
    });
    if used.iter().all(|&u| u) {
        return;
    }
    let mut renumber = Vec::with_capacity(used.len());
    let mut next = 0;
    for &u in &used {
        renumber.push(next);
        next += u32::from(u);
    }
    for_each_mem(&mut k.body, &mut |m| {
        if let Mem::Shared(i) = m {
            *i = renumber[*i as usize];
        }
    });
    let mut keep = used.into_iter();
    k.shared.retain(|_| keep.next() == Some(true));
}

/// Calls `f` on every memory operand of `insts`, at any depth.
fn for_each_mem(insts: &mut [Inst], f: &mut impl FnMut(&mut Mem)) {
    for i in insts {
        match i {
            Inst::Let(_, Expr::Load(mem, _, _))
            | Inst::Store { mem, .. }
            | Inst::Atomic { mem, .. }
            | Inst::Prefetch { mem, .. }
            | Inst::StoreRemote { mem, .. } => f(mem),
            Inst::If { then, els, .. }
            | Inst::Clustered { then, els, .. }
            | Inst::Matrix { then, els } => {
                for_each_mem(then, f);
                for_each_mem(els, f);
            }
            Inst::For { body, .. } => for_each_mem(body, f),
            Inst::Let(..)
            | Inst::Barrier
            | Inst::Fence
            | Inst::Trap(_)
            | Inst::LaunchDependents
            | Inst::GridWait { .. }
            | Inst::ClusterArrive { .. }
            | Inst::ClusterWait => {}
        }
    }
}
