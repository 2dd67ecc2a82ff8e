//! Tier 2 support: compile a model, run its entries on an executor, compare every output and
//! carried state with `poot_eval` element by element.
//!
//! Tolerance. A device reassociates the reference's sums (matmul and norm reductions split
//! over lanes, attention with an online softmax split over the cache) and fuses multiply-adds.
//! A reassociated f32 sum of `k` terms differs by at most about `k * u * sum|terms|`
//! (u = 2^-24), and a step chains `depth` such reductions; so an element may differ by
//! `k_max * depth * u` relative to the scale of the values it came from. `Tolerance::derive`
//! computes that bound from the model's largest reduction and its depth; a NaN or infinity
//! where the reference is finite fails at any tolerance.

use poot_eval::{Data, Tensor};

/// An element-wise tolerance: `|device - reference| <= rel * max(scale, |reference|)`.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Relative bound.
    pub rel: f32,
    /// The magnitude below which errors are measured absolutely (the tensor's own scale).
    pub scale: f32,
}

impl Tolerance {
    /// The bound for reductions of at most `k_max` terms chained `depth` deep.
    pub fn derive(k_max: usize, depth: usize) -> f32 {
        k_max as f32 * depth as f32 * f32::EPSILON / 2.0
    }
}

/// Compares a device tensor (raw little-endian bytes) with the reference; the error says where.
pub fn compare(name: &str, device: &[u8], reference: &Tensor, rel: f32) -> Result<f32, String> {
    match &reference.data {
        Data::F32(r) => {
            if device.len() != 4 * r.len() {
                return Err(format!(
                    "{name}: {} bytes for {} elements",
                    device.len(),
                    r.len()
                ));
            }
            let scale = r
                .iter()
                .map(|x| x.abs())
                .filter(|x| x.is_finite())
                .fold(0f32, f32::max)
                .max(1e-6);
            let mut worst = 0f32;
            for (i, (c, &want)) in device.chunks_exact(4).zip(r).enumerate() {
                let got = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                if want.is_finite() && !got.is_finite() {
                    return Err(format!("{name}[{i}]: device {got}, reference {want}"));
                }
                let err = (got - want).abs() / scale;
                if err.is_nan() || err > rel {
                    return Err(format!(
                        "{name}[{i}]: device {got}, reference {want}, error {err:e} (scale {scale}) > {rel:e}"
                    ));
                }
                worst = worst.max(err);
            }
            Ok(worst)
        }
        Data::I32(r) => {
            let got: Vec<i32> = device
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if &got != r {
                return Err(format!("{name}: device {got:?}, reference {r:?}"));
            }
            Ok(0.0)
        }
        Data::Bool(r) => {
            let got: Vec<bool> = device.chunks_exact(4).map(|c| c != [0, 0, 0, 0]).collect();
            if &got != r {
                return Err(format!("{name}: device {got:?}, reference {r:?}"));
            }
            Ok(0.0)
        }
        _ => Err(format!("{name}: unsupported dtype")),
    }
}
