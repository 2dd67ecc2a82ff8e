//! Normalisation, softmax, rotary embedding, reductions and the sampling reductions.
//!
//! Semantics:
//! - `rms_norm`: `ms = sum(x*x) / n` (lane order of `dot`), `r = 1 / sqrt(ms + eps)`,
//!   `y = (x * r) * w`.
//! - `softmax`: `m = max`, `e = exp(x - m)`, `s = sum(e)` (lane order of `sum`), `y = e / s`.
//! - `rope`: `inv = 1 / base^(2i / dims)` and `a = pos * inv` in f32, `(c, s) = (cos a, sin a)`,
//!   `(x0, x1) -> (x0*c - x1*s, x0*s + x1*c)`; pairs are `(2i, 2i+1)` or `(i, i + dims/2)`.
//! - `reduce_sum` adds in increasing index order; `reduce_max` and `argmax` ignore nothing:
//!   NaN wins `reduce_max`, and `argmax` returns the first index of the largest non-NaN value
//!   (the first NaN if all are NaN).

use super::{dot, sum};
use crate::tensor::{Data, Tensor};
use crate::{EvalError, Result};
use poot_ir::{ReduceOp, RopeLayout, Type};

fn f32s<'a>(t: &'a Tensor, op: &str) -> Result<&'a [f32]> {
    t.as_f32().ok_or_else(|| EvalError::dtype(op, t))
}

/// RMS norm over the last axis.
pub fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let (xv, wv) = (f32s(x, "rms_norm")?, f32s(w, "rms_norm")?);
    let n = wv.len();
    let mut y = Vec::with_capacity(xv.len());
    for row in xv.chunks(n) {
        let ms = dot(row, row) / n as f32;
        let r = 1.0 / (ms + eps).sqrt();
        y.extend(row.iter().zip(wv).map(|(a, b)| (a * r) * b));
    }
    Ok(Tensor {
        ty: x.ty.clone(),
        data: Data::F32(y),
    })
}

/// Softmax over `axis`.
pub fn softmax(x: &Tensor, axis: usize) -> Result<Tensor> {
    let xv = f32s(x, "softmax")?;
    let dims = x.shape().dims();
    let (n, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
    let mut y = vec![0f32; xv.len()];
    let mut line = vec![0f32; n];
    for outer in 0..xv.len() / (n * inner) {
        for i in 0..inner {
            let at = |j: usize| (outer * n + j) * inner + i;
            let m = (0..n).map(|j| xv[at(j)]).fold(f32::NEG_INFINITY, f32::max);
            for (j, e) in line.iter_mut().enumerate() {
                *e = (xv[at(j)] - m).exp();
            }
            let s = sum(&line);
            for (j, e) in line.iter().enumerate() {
                y[at(j)] = e / s;
            }
        }
    }
    Ok(Tensor {
        ty: x.ty.clone(),
        data: Data::F32(y),
    })
}

/// Rotary embedding of `x [r, t, h, d]` at `pos [r, t]`.
pub fn rope(
    x: &Tensor,
    pos: &Tensor,
    layout: RopeLayout,
    base: f32,
    dims: usize,
) -> Result<Tensor> {
    let xv = f32s(x, "rope")?;
    let pv = pos.as_i32().ok_or_else(|| EvalError::dtype("rope", pos))?;
    let d = x.shape().dims()[3];
    let h = x.shape().dims()[2];
    let inv: Vec<f32> = (0..dims / 2)
        .map(|i| 1.0 / base.powf((2 * i) as f32 / dims as f32))
        .collect();
    let mut y = xv.to_vec();
    for (rt, &p) in pv.iter().enumerate() {
        for (i, &f) in inv.iter().enumerate() {
            let a = p as f32 * f;
            let (s, c) = (a.sin(), a.cos());
            for hi in 0..h {
                let o = (rt * h + hi) * d;
                let (i0, i1) = match layout {
                    RopeLayout::Pairs => (o + 2 * i, o + 2 * i + 1),
                    RopeLayout::Halves => (o + i, o + i + dims / 2),
                };
                let (x0, x1) = (xv[i0], xv[i1]);
                y[i0] = x0 * c - x1 * s;
                y[i1] = x0 * s + x1 * c;
            }
        }
    }
    Ok(Tensor {
        ty: x.ty.clone(),
        data: Data::F32(y),
    })
}

fn lines(x: &Tensor, axis: usize) -> (usize, usize, usize) {
    let dims = x.shape().dims();
    let n = dims[axis];
    let inner: usize = dims[axis + 1..].iter().product();
    (x.shape().numel() / (n * inner).max(1), n, inner)
}

/// Sum or max over `axis`, kept as size 1.
pub fn reduce(op: ReduceOp, x: &Tensor, axis: usize, ty: &Type) -> Result<Tensor> {
    let xv = f32s(x, "reduce")?;
    let (outer, n, inner) = lines(x, axis);
    let mut y = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let it = (0..n).map(|j| xv[(o * n + j) * inner + i]);
            y.push(match op {
                ReduceOp::Sum => it.fold(0.0, |a, b| a + b),
                ReduceOp::Max => it.fold(f32::NEG_INFINITY, |a, b| {
                    if a.is_nan() || b.is_nan() {
                        f32::NAN
                    } else {
                        a.max(b)
                    }
                }),
            });
        }
    }
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::F32(y),
    })
}

/// Index of the largest value over `axis`, kept as size 1.
pub fn argmax(x: &Tensor, axis: usize, ty: &Type) -> Result<Tensor> {
    let xv = f32s(x, "argmax")?;
    let (outer, n, inner) = lines(x, axis);
    let mut y = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut best: Option<(usize, f32)> = None;
            for j in 0..n {
                let v = xv[(o * n + j) * inner + i];
                if !v.is_nan() && best.is_none_or(|(_, b)| v > b) {
                    best = Some((j, v));
                }
            }
            let first_nan = (0..n).find(|&j| xv[(o * n + j) * inner + i].is_nan());
            y.push(best.map(|b| b.0).or(first_nan).unwrap_or(0) as i32);
        }
    }
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::I32(y),
    })
}

/// True when any element is NaN or infinite.
pub fn any_nonfinite(x: &Tensor, ty: &Type) -> Result<Tensor> {
    let xv = f32s(x, "any_nonfinite")?;
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::Bool(vec![xv.iter().any(|v| !v.is_finite())]),
    })
}
