//! Element-wise ops with numpy broadcasting, `iota`, `cast`, and the movement ops.
//!
//! Semantics: each f32 result is one correctly rounded IEEE operation except `exp`, `sqrt`
//! (Rust's `f32` methods), `rsqrt` = `1 / sqrt(x)` and `silu` = `x / (1 + exp(-x))`, each
//! rounding after every step. `max`/`min` return NaN when either operand is NaN. Integer
//! arithmetic wraps. `cast` f32 -> integer truncates toward zero and saturates (NaN gives 0).

use crate::tensor::{Data, Tensor, broadcast_index};
use crate::{EvalError, Result};
use poot_ir::{BinaryOp, CmpOp, DType, Scalar, Shape, Type, UnaryOp};

fn expand(t: &Tensor, out: &Shape) -> Data {
    if t.shape() == out {
        t.data.clone()
    } else {
        t.data.take(&broadcast_index(t.shape(), out))
    }
}

/// A constant splat.
pub fn constant(s: Scalar, ty: &Type) -> Tensor {
    Tensor {
        ty: ty.clone(),
        data: Data::splat(s, ty.shape.numel()),
    }
}

/// `iota` along `axis`.
pub fn iota(ty: &Type, axis: usize) -> Tensor {
    let dims = ty.shape.dims();
    let inner: usize = dims[axis + 1..].iter().product();
    let n = ty.shape.numel();
    let data = (0..n).map(|i| ((i / inner) % dims[axis]) as i32).collect();
    Tensor {
        ty: ty.clone(),
        data: Data::I32(data),
    }
}

/// Element-wise unary f32 function.
pub fn unary(u: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let v = x.as_f32().ok_or_else(|| EvalError::dtype("unary", x))?;
    let f = |a: f32| match u {
        UnaryOp::Neg => -a,
        UnaryOp::Exp => a.exp(),
        UnaryOp::Sqrt => a.sqrt(),
        UnaryOp::Rsqrt => 1.0 / a.sqrt(),
        UnaryOp::Recip => 1.0 / a,
        UnaryOp::Silu => silu(a),
    };
    Ok(Tensor {
        ty: x.ty.clone(),
        data: Data::F32(v.iter().map(|&a| f(a)).collect()),
    })
}

/// `x / (1 + exp(-x))`.
pub fn silu(a: f32) -> f32 {
    a / (1.0 + (-a).exp())
}

fn fmax(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}
fn fmin(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.min(b)
    }
}

macro_rules! int_binary {
    ($op:expr, $a:expr, $b:expr, $t:ty) => {
        $a.iter()
            .zip($b.iter())
            .map(|(&x, &y)| -> $t {
                match $op {
                    BinaryOp::Add => x.wrapping_add(y),
                    BinaryOp::Sub => x.wrapping_sub(y),
                    BinaryOp::Mul => x.wrapping_mul(y),
                    BinaryOp::Div => x.checked_div(y).unwrap_or(0),
                    BinaryOp::Max => x.max(y),
                    BinaryOp::Min => x.min(y),
                }
            })
            .collect()
    };
}

/// Element-wise binary op with broadcasting.
pub fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, ty: &Type) -> Result<Tensor> {
    let (x, y) = (expand(a, &ty.shape), expand(b, &ty.shape));
    let data = match (&x, &y) {
        (Data::F32(x), Data::F32(y)) => Data::F32(
            x.iter()
                .zip(y)
                .map(|(&p, &q)| match op {
                    BinaryOp::Add => p + q,
                    BinaryOp::Sub => p - q,
                    BinaryOp::Mul => p * q,
                    BinaryOp::Div => p / q,
                    BinaryOp::Max => fmax(p, q),
                    BinaryOp::Min => fmin(p, q),
                })
                .collect(),
        ),
        (Data::I32(x), Data::I32(y)) => Data::I32(int_binary!(op, x, y, i32)),
        (Data::U32(x), Data::U32(y)) => Data::U32(int_binary!(op, x, y, u32)),
        (Data::U8(x), Data::U8(y)) => Data::U8(int_binary!(op, x, y, u8)),
        _ => return Err(EvalError::dtype("binary", a)),
    };
    Ok(Tensor {
        ty: ty.clone(),
        data,
    })
}

fn cmp<T: PartialOrd>(op: CmpOp, x: &[T], y: &[T]) -> Vec<bool> {
    x.iter()
        .zip(y)
        .map(|(p, q)| match op {
            CmpOp::Lt => p < q,
            CmpOp::Le => p <= q,
            CmpOp::Eq => p == q,
        })
        .collect()
}

/// Comparison with broadcasting (IEEE: any comparison with NaN is false).
pub fn compare(op: CmpOp, a: &Tensor, b: &Tensor, ty: &Type) -> Result<Tensor> {
    let (x, y) = (expand(a, &ty.shape), expand(b, &ty.shape));
    let data = match (&x, &y) {
        (Data::F32(x), Data::F32(y)) => cmp(op, x, y),
        (Data::I32(x), Data::I32(y)) => cmp(op, x, y),
        (Data::U32(x), Data::U32(y)) => cmp(op, x, y),
        (Data::U8(x), Data::U8(y)) => cmp(op, x, y),
        (Data::Bool(x), Data::Bool(y)) => cmp(op, x, y),
        _ => return Err(EvalError::dtype("compare", a)),
    };
    Ok(Tensor {
        ty: ty.clone(),
        data: Data::Bool(data),
    })
}

/// `a` where `cond`, else `b`, with broadcasting.
pub fn select(cond: &Tensor, a: &Tensor, b: &Tensor, ty: &Type) -> Result<Tensor> {
    let Data::Bool(c) = expand(cond, &ty.shape) else {
        return Err(EvalError::dtype("select", cond));
    };
    fn pick<T: Copy>(c: &[bool], x: Vec<T>, y: Vec<T>) -> Vec<T> {
        c.iter()
            .zip(x.into_iter().zip(y))
            .map(|(&k, (p, q))| if k { p } else { q })
            .collect()
    }
    let data = match (expand(a, &ty.shape), expand(b, &ty.shape)) {
        (Data::F32(x), Data::F32(y)) => Data::F32(pick(&c, x, y)),
        (Data::I32(x), Data::I32(y)) => Data::I32(pick(&c, x, y)),
        (Data::U32(x), Data::U32(y)) => Data::U32(pick(&c, x, y)),
        (Data::U8(x), Data::U8(y)) => Data::U8(pick(&c, x, y)),
        (Data::Bool(x), Data::Bool(y)) => Data::Bool(pick(&c, x, y)),
        _ => return Err(EvalError::dtype("select", a)),
    };
    Ok(Tensor {
        ty: ty.clone(),
        data,
    })
}

/// Conversion between computable dtypes.
pub fn cast(x: &Tensor, ty: &Type) -> Result<Tensor> {
    let as_f64: Vec<f64> = match &x.data {
        Data::F32(v) => v.iter().map(|&a| a as f64).collect(),
        Data::I32(v) => v.iter().map(|&a| a as f64).collect(),
        Data::U32(v) => v.iter().map(|&a| a as f64).collect(),
        Data::U8(v) => v.iter().map(|&a| a as f64).collect(),
        Data::Bool(v) => v.iter().map(|&a| a as u8 as f64).collect(),
    };
    let data = match ty.dtype {
        DType::F32 => match &x.data {
            Data::I32(v) => Data::F32(v.iter().map(|&a| a as f32).collect()),
            Data::U32(v) => Data::F32(v.iter().map(|&a| a as f32).collect()),
            _ => Data::F32(as_f64.iter().map(|&a| a as f32).collect()),
        },
        DType::I32 => Data::I32(as_f64.iter().map(|&a| a as i32).collect()),
        DType::U32 => Data::U32(as_f64.iter().map(|&a| a as u32).collect()),
        DType::U8 => Data::U8(as_f64.iter().map(|&a| a as u8).collect()),
        DType::Bool => Data::Bool(as_f64.iter().map(|&a| a != 0.0).collect()),
        _ => return Err(EvalError::dtype("cast", x)),
    };
    Ok(Tensor {
        ty: ty.clone(),
        data,
    })
}

/// Writes `update` into `x` along `axis` at `start[row]` for each row (axis 0), in place.
pub fn dynamic_update_slice(
    x: &mut Tensor,
    update: &Tensor,
    start: &[i32],
    axis: usize,
) -> Result<()> {
    let xd = x.shape().0.clone();
    let ud = update.shape().dims();
    let inner: usize = xd[axis + 1..].iter().product();
    let mid_x: usize = xd[1..axis].iter().product();
    let chunk = ud[axis] * inner;
    for (row, &s) in start.iter().enumerate() {
        if s < 0 || s as usize + ud[axis] > xd[axis] {
            return Err(EvalError::Index(format!(
                "row {row} writes {} elements along axis {axis} at {s}, past its size {}",
                ud[axis], xd[axis]
            )));
        }
        for m in 0..mid_x {
            let dst = ((row * mid_x + m) * xd[axis] + s as usize) * inner;
            let src = (row * mid_x + m) * chunk;
            copy_range(&mut x.data, dst, &update.data, src, chunk)?;
        }
    }
    Ok(())
}

/// Replaces row `index[i]` of `x` by row `i` of `update`, in place.
pub fn scatter_update(x: &mut Tensor, update: &Tensor, index: &[i32]) -> Result<()> {
    let rows = x.shape().0[0];
    let row = x.shape().numel() / rows.max(1);
    for (i, &r) in index.iter().enumerate() {
        if r < 0 || r as usize >= rows {
            return Err(EvalError::Index(format!(
                "scatter index {r} at {i} is outside 0..{rows}"
            )));
        }
        copy_range(&mut x.data, r as usize * row, &update.data, i * row, row)?;
    }
    Ok(())
}

fn copy_range(dst: &mut Data, at: usize, src: &Data, from: usize, n: usize) -> Result<()> {
    match (dst, src) {
        (Data::F32(d), Data::F32(s)) => d[at..at + n].copy_from_slice(&s[from..from + n]),
        (Data::I32(d), Data::I32(s)) => d[at..at + n].copy_from_slice(&s[from..from + n]),
        (Data::U32(d), Data::U32(s)) => d[at..at + n].copy_from_slice(&s[from..from + n]),
        (Data::U8(d), Data::U8(s)) => d[at..at + n].copy_from_slice(&s[from..from + n]),
        (Data::Bool(d), Data::Bool(s)) => d[at..at + n].copy_from_slice(&s[from..from + n]),
        (d, _) => return Err(EvalError::Input(format!("mismatched {} copy", d.dtype()))),
    }
    Ok(())
}
