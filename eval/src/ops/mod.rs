//! The per-op kernels of the reference evaluator, grouped by kind.
//!
//! Invariant: every kernel is a deterministic function of its operands; the floating-point
//! order of each is documented where it is defined, and the device kernels state their
//! tolerance against exactly that order.

pub mod elementwise;
pub mod linalg;
pub mod nn;

/// The dot product every reduction over a contiguous f32 axis uses: eight lanes, lane `j`
/// accumulating elements `k ≡ j (mod 8)` in increasing `k` (product and sum rounded
/// separately), then combined as `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))`.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut l = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for j in 0..8 {
            l[j] += x[j] * y[j];
        }
    }
    for (j, (x, y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        l[j] += x * y;
    }
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

/// The sum with the same lane order as [`dot`].
pub fn sum(a: &[f32]) -> f32 {
    let mut l = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    for x in &mut ca {
        for j in 0..8 {
            l[j] += x[j];
        }
    }
    for (j, x) in ca.remainder().iter().enumerate() {
        l[j] += x;
    }
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}
