//! Host tensors: a type and a dense row-major buffer of a computable dtype.
//!
//! Invariant: `data` holds exactly `ty.shape.numel()` elements of `ty.dtype`.

use crate::EvalError;
use poot_ir::{DType, Scalar, Shape, Type};

/// Dense element storage.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// f32 elements.
    F32(Vec<f32>),
    /// i32 elements.
    I32(Vec<i32>),
    /// u32 elements.
    U32(Vec<u32>),
    /// Bytes.
    U8(Vec<u8>),
    /// Booleans.
    Bool(Vec<bool>),
}

/// A host tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Its type.
    pub ty: Type,
    /// Its elements.
    pub data: Data,
}

/// A borrowed weight: raw bytes of any dtype, packed formats included.
#[derive(Clone, Copy, Debug)]
pub struct WeightView<'a> {
    /// Element type (possibly packed).
    pub dtype: DType,
    /// Shape (the innermost dimension is a whole number of blocks).
    pub dims: &'a [usize],
    /// The bytes, row-major.
    pub bytes: &'a [u8],
}

impl Tensor {
    /// An f32 tensor; fails when `data` does not fit `dims`.
    pub fn f32(dims: impl Into<Vec<usize>>, data: Vec<f32>) -> Result<Tensor, EvalError> {
        Tensor::new(Type::new(DType::F32, dims), Data::F32(data))
    }
    /// An i32 tensor; fails when `data` does not fit `dims`.
    pub fn i32(dims: impl Into<Vec<usize>>, data: Vec<i32>) -> Result<Tensor, EvalError> {
        Tensor::new(Type::new(DType::I32, dims), Data::I32(data))
    }
    /// A tensor from its parts, checking the element count and dtype.
    pub fn new(ty: Type, data: Data) -> Result<Tensor, EvalError> {
        let t = Tensor { ty, data };
        if t.data.len() != t.ty.shape.numel() || t.data.dtype() != t.ty.dtype {
            return Err(EvalError::Input(format!(
                "{} elements of {} do not make a {}",
                t.data.len(),
                t.data.dtype(),
                t.ty
            )));
        }
        Ok(t)
    }
    /// All zeros of a computable type.
    pub fn zeros(ty: Type) -> Tensor {
        let n = ty.shape.numel();
        let data = Data::splat(Scalar::zero(ty.dtype), n);
        Tensor { ty, data }
    }
    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.ty.shape
    }
    /// The elements as f32, if that is the dtype.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            _ => None,
        }
    }
    /// The elements as i32, if that is the dtype.
    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            Data::I32(v) => Some(v),
            _ => None,
        }
    }
    /// The elements as booleans, if that is the dtype.
    pub fn as_bool(&self) -> Option<&[bool]> {
        match &self.data {
            Data::Bool(v) => Some(v),
            _ => None,
        }
    }
}

trait Zero {
    fn zero(dtype: DType) -> Scalar;
}
impl Zero for Scalar {
    fn zero(dtype: DType) -> Scalar {
        match dtype {
            DType::I32 => Scalar::I32(0),
            DType::U32 => Scalar::U32(0),
            DType::U8 => Scalar::U8(0),
            DType::Bool => Scalar::Bool(false),
            _ => Scalar::F32(0.0),
        }
    }
}

impl Data {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::U32(v) => v.len(),
            Data::U8(v) => v.len(),
            Data::Bool(v) => v.len(),
        }
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::I32(_) => DType::I32,
            Data::U32(_) => DType::U32,
            Data::U8(_) => DType::U8,
            Data::Bool(_) => DType::Bool,
        }
    }
    /// `n` copies of `s`.
    pub fn splat(s: Scalar, n: usize) -> Data {
        match s {
            Scalar::F32(x) => Data::F32(vec![x; n]),
            Scalar::I32(x) => Data::I32(vec![x; n]),
            Scalar::U32(x) => Data::U32(vec![x; n]),
            Scalar::U8(x) => Data::U8(vec![x; n]),
            Scalar::Bool(x) => Data::Bool(vec![x; n]),
        }
    }
    /// Elements gathered at `index` (a broadcast or a permutation).
    pub fn take(&self, index: &[usize]) -> Data {
        fn t<T: Copy>(v: &[T], index: &[usize]) -> Vec<T> {
            index.iter().map(|&i| v[i]).collect()
        }
        match self {
            Data::F32(v) => Data::F32(t(v, index)),
            Data::I32(v) => Data::I32(t(v, index)),
            Data::U32(v) => Data::U32(t(v, index)),
            Data::U8(v) => Data::U8(t(v, index)),
            Data::Bool(v) => Data::Bool(t(v, index)),
        }
    }
}

/// For each element of `out`, the index of the element of `from` that broadcasts to it.
pub fn broadcast_index(from: &Shape, out: &Shape) -> Vec<usize> {
    let r = out.rank();
    let off = r - from.rank();
    let fs = from.strides();
    let mut strides = vec![0; r];
    for i in 0..from.rank() {
        if from.0[i] != 1 {
            strides[off + i] = fs[i];
        }
    }
    let mut idx = Vec::with_capacity(out.numel());
    let mut coord = vec![0usize; r];
    for _ in 0..out.numel() {
        idx.push(coord.iter().zip(&strides).map(|(c, s)| c * s).sum());
        for d in (0..r).rev() {
            coord[d] += 1;
            if coord[d] < out.0[d] {
                break;
            }
            coord[d] = 0;
        }
    }
    idx
}
