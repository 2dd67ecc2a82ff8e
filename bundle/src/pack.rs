//! [`WeightPacker`]: lays weights out the way the format requires (each at a multiple of
//! [`WEIGHT_ALIGN`], zero padding between), producing the `WeightInfo`s and the bytes that
//! [`crate::write`] takes.

use crate::format::{WEIGHT_ALIGN, align_up, len64};
use crate::types::WeightInfo;

/// Appends weights at aligned offsets of a growing weights section.
#[derive(Debug, Default, Clone)]
pub struct WeightPacker {
    infos: Vec<WeightInfo>,
    bytes: Vec<u8>,
}

impl WeightPacker {
    /// An empty weights section.
    pub fn new() -> WeightPacker {
        WeightPacker::default()
    }

    /// Appends `data` as the weight `role` at the next aligned offset and returns where it went.
    pub fn push(&mut self, role: &str, dtype: &str, dims: &[u64], data: &[u8]) -> WeightInfo {
        let offset = align_up(len64(self.bytes.len()), WEIGHT_ALIGN);
        self.bytes
            .resize(usize::try_from(offset).unwrap_or(usize::MAX), 0);
        self.bytes.extend_from_slice(data);
        let info = WeightInfo {
            role: role.to_string(),
            offset,
            len: len64(data.len()),
            dtype: dtype.to_string(),
            dims: dims.to_vec(),
        };
        self.infos.push(info.clone());
        info
    }

    /// The bytes laid out so far.
    pub fn len(&self) -> u64 {
        len64(self.bytes.len())
    }

    /// Whether nothing has been pushed.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The weight map (for `Manifest::weights`) and the weights section's bytes.
    pub fn finish(self) -> (Vec<WeightInfo>, Vec<u8>) {
        (self.infos, self.bytes)
    }
}
