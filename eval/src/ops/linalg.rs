//! Matrix products, row gathers and the two attention contractions.
//!
//! Semantics: `matmul` dequantizes each weight row exactly (see `dequant`) and takes [`dot`]
//! with each input row; `attn_scores` is [`dot`] over the head dimension; `attn_mix` sums
//! `p[c] * v[c]` over `c` in increasing order, one rounding per product and per sum.

use super::dot;
use crate::dequant::dequantize;
use crate::tensor::{Data, Tensor, WeightView};
use crate::{EvalError, Result};
use poot_ir::Type;
use rayon::prelude::*;

/// The bytes of row `n` of a weight `[rows, k]`.
fn row<'a>(w: &WeightView<'a>, n: usize) -> &'a [u8] {
    let k = w.dims[1];
    let bytes = w.dtype.bytes_for(k).unwrap_or(0);
    &w.bytes[n * bytes..(n + 1) * bytes]
}

/// `x @ w^T` for `x f32[.., k]` and `w [n, k]` of any float or packed dtype.
pub fn matmul(x: &Tensor, w: &WeightView<'_>, ty: &Type) -> Result<Tensor> {
    let xv = x.as_f32().ok_or_else(|| EvalError::dtype("matmul", x))?;
    let (n, k) = (w.dims[0], w.dims[1]);
    let m = xv.len() / k;
    let mut yt = vec![0f32; n * m];
    yt.par_chunks_mut(m * 64).enumerate().for_each_init(
        || vec![0f32; k],
        |buf, (blk, out)| {
            for (i, col) in out.chunks_mut(m).enumerate() {
                dequantize(w.dtype, row(w, blk * 64 + i), buf);
                for (r, y) in col.iter_mut().enumerate() {
                    *y = dot(&xv[r * k..(r + 1) * k], buf);
                }
            }
        },
    );
    let mut y = vec![0f32; n * m];
    for (j, col) in yt.chunks(m).enumerate() {
        for (r, v) in col.iter().enumerate() {
            y[r * n + j] = *v;
        }
    }
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::F32(y),
    })
}

/// Rows of `table [v, d]` at `ids`, dequantized.
pub fn gather(table: &WeightView<'_>, ids: &Tensor, ty: &Type) -> Result<Tensor> {
    let ids = ids
        .as_i32()
        .ok_or_else(|| EvalError::dtype("gather", ids))?;
    let (v, d) = (table.dims[0], table.dims[1]);
    let mut out = vec![0f32; ids.len() * d];
    for (i, (&id, o)) in ids.iter().zip(out.chunks_mut(d)).enumerate() {
        if id < 0 || id as usize >= v {
            return Err(EvalError::Index(format!(
                "gather id {id} at {i} is outside 0..{v}"
            )));
        }
        dequantize(table.dtype, row(table, id as usize), o);
    }
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::F32(out),
    })
}

/// Rows of a computed f32 `table [v, d]` at `ids`.
pub fn gather_rows(table: &Tensor, ids: &Tensor, ty: &Type) -> Result<Tensor> {
    let tv = table
        .as_f32()
        .ok_or_else(|| EvalError::dtype("gather", table))?;
    let ids = ids
        .as_i32()
        .ok_or_else(|| EvalError::dtype("gather", ids))?;
    let (v, d) = (table.shape().dims()[0], table.shape().dims()[1]);
    let mut out = Vec::with_capacity(ids.len() * d);
    for (i, &id) in ids.iter().enumerate() {
        if id < 0 || id as usize >= v {
            return Err(EvalError::Index(format!(
                "gather id {id} at {i} is outside 0..{v}"
            )));
        }
        out.extend_from_slice(&tv[id as usize * d..(id as usize + 1) * d]);
    }
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::F32(out),
    })
}

/// `s[r, h, t, c] = q[r, t, h, :] . k[r, c, h / (heads / groups), :]`.
pub fn attn_scores(q: &Tensor, k: &Tensor, ty: &Type) -> Result<Tensor> {
    let (qv, kv) = (f32s(q)?, f32s(k)?);
    let [r, t, h, d] = dims4(q);
    let [_, c, g, _] = dims4(k);
    let per = h / g;
    let mut s = vec![0f32; r * h * t * c];
    s.par_chunks_mut(t * c).enumerate().for_each(|(rh, out)| {
        let (ri, hi) = (rh / h, rh % h);
        for ti in 0..t {
            let qo = ((ri * t + ti) * h + hi) * d;
            for ci in 0..c {
                let ko = ((ri * c + ci) * g + hi / per) * d;
                out[ti * c + ci] = dot(&qv[qo..qo + d], &kv[ko..ko + d]);
            }
        }
    });
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::F32(s),
    })
}

/// `o[r, t, h, :] = sum over c of p[r, h, t, c] * v[r, c, h / (heads / groups), :]`.
pub fn attn_mix(p: &Tensor, v: &Tensor, ty: &Type) -> Result<Tensor> {
    let (pv, vv) = (f32s(p)?, f32s(v)?);
    let [r, h, t, c] = dims4(p);
    let [_, _, g, d] = dims4(v);
    let per = h / g;
    let mut o = vec![0f32; r * t * h * d];
    for ri in 0..r {
        for ti in 0..t {
            for hi in 0..h {
                let oo = ((ri * t + ti) * h + hi) * d;
                let acc = &mut o[oo..oo + d];
                for ci in 0..c {
                    let w = pv[((ri * h + hi) * t + ti) * c + ci];
                    let vo = ((ri * c + ci) * g + hi / per) * d;
                    for (a, x) in acc.iter_mut().zip(&vv[vo..vo + d]) {
                        *a += w * x;
                    }
                }
            }
        }
    }
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::F32(o),
    })
}

fn f32s(t: &Tensor) -> Result<&[f32]> {
    t.as_f32().ok_or_else(|| EvalError::dtype("attention", t))
}

fn dims4(t: &Tensor) -> [usize; 4] {
    let d = t.shape().dims();
    [d[0], d[1], d[2], d[3]]
}
