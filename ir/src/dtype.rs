//! Element types and the GGUF block formats.
//!
//! Invariant: a packed (block) dtype only ever describes a weight's or constant's bytes; values
//! computed by ops are `f32`, `i32`, `u32`, `u8` or `bool` (the verifier enforces it). A packed
//! tensor's innermost dimension is a whole number of blocks.

use std::fmt;

/// The element type of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned byte.
    U8,
    /// Boolean (one byte per element when stored).
    Bool,
    /// GGUF Q4_0: 32 weights, f16 scale, 4-bit values offset by 8.
    Q4_0,
    /// GGUF Q4_1: 32 weights, f16 scale and min, 4-bit values.
    Q4_1,
    /// GGUF Q5_0: 32 weights, f16 scale, 5-bit values offset by 16.
    Q5_0,
    /// GGUF Q8_0: 32 weights, f16 scale, signed bytes.
    Q8_0,
    /// GGUF Q4_K: 256 weights, 8 sub-blocks with 6-bit scales and mins.
    Q4K,
    /// GGUF Q6_K: 256 weights, 16 sub-blocks with 8-bit scales.
    Q6K,
}

/// Every dtype, in the order the text form lists them.
pub const ALL_DTYPES: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::Bf16,
    DType::I32,
    DType::U32,
    DType::U8,
    DType::Bool,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q8_0,
    DType::Q4K,
    DType::Q6K,
];

impl DType {
    /// The name used in the text form (`f32`, `q4_k`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::U8 => "u8",
            DType::Bool => "bool",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q8_0 => "q8_0",
            DType::Q4K => "q4_k",
            DType::Q6K => "q6_k",
        }
    }

    /// Parses a text-form name.
    pub fn from_name(name: &str) -> Option<DType> {
        ALL_DTYPES.into_iter().find(|d| d.name() == name)
    }

    /// `(weights per block, bytes per block)`; plain dtypes are blocks of one element.
    pub fn block(self) -> (usize, usize) {
        match self {
            DType::F32 | DType::I32 | DType::U32 => (1, 4),
            DType::F16 | DType::Bf16 => (1, 2),
            DType::U8 | DType::Bool => (1, 1),
            DType::Q4_0 => (32, 18),
            DType::Q4_1 => (32, 20),
            DType::Q5_0 => (32, 22),
            DType::Q8_0 => (32, 34),
            DType::Q4K => (256, 144),
            DType::Q6K => (256, 210),
        }
    }

    /// True for the GGUF block formats.
    pub fn is_packed(self) -> bool {
        self.block().0 > 1
    }

    /// True for the dtypes ops may compute (see the module invariant).
    pub fn is_computable(self) -> bool {
        matches!(
            self,
            DType::F32 | DType::I32 | DType::U32 | DType::U8 | DType::Bool
        )
    }

    /// True for floating-point element types (packed formats dequantize to f32).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::Bf16) || self.is_packed()
    }

    /// Bytes taken by `n` elements, or `None` when `n` is not a whole number of blocks.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        let (per, bytes) = self.block();
        n.is_multiple_of(per).then(|| n / per * bytes)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
