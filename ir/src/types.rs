//! Static shapes and value types.
//!
//! Invariant: every shape is fully static; a scalar has rank 0 and one element.

use crate::DType;
use std::fmt;

/// A static shape, outermost dimension first.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<usize>);

impl Shape {
    /// A shape from its dimensions.
    pub fn new(dims: impl Into<Vec<usize>>) -> Shape {
        Shape(dims.into())
    }
    /// The rank-0 shape.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }
    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    /// The innermost dimension (1 for a scalar).
    pub fn last(&self) -> usize {
        self.0.last().copied().unwrap_or(1)
    }
    /// Row-major strides in elements.
    pub fn strides(&self) -> Vec<usize> {
        let mut s = vec![1; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * self.0[i + 1];
        }
        s
    }
    /// The numpy broadcast of two shapes (aligned at the innermost dimension), if they agree.
    pub fn broadcast(&self, other: &Shape) -> Option<Shape> {
        let rank = self.rank().max(other.rank());
        let mut out = vec![0; rank];
        for (i, slot) in out.iter_mut().enumerate() {
            let a = dim_from_end(self, rank - 1 - i);
            let b = dim_from_end(other, rank - 1 - i);
            *slot = match (a, b) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => return None,
            };
        }
        Some(Shape(out))
    }
}

fn dim_from_end(s: &Shape, k: usize) -> usize {
    if k < s.rank() {
        s.0[s.rank() - 1 - k]
    } else {
        1
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// The type of a value: element type and static shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    /// Element type.
    pub dtype: DType,
    /// Static shape.
    pub shape: Shape,
}

impl Type {
    /// A type from its parts.
    pub fn new(dtype: DType, dims: impl Into<Vec<usize>>) -> Type {
        Type {
            dtype,
            shape: Shape::new(dims),
        }
    }
    /// A rank-0 type.
    pub fn scalar(dtype: DType) -> Type {
        Type {
            dtype,
            shape: Shape::scalar(),
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
