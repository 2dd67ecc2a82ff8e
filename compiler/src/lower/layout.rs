//! The device layout of weights: how a bundle stores each weight's bytes for its kernels.
//!
//! GGUF blocks of 18 (Q4_0), 22 (Q5_0), 34 (Q8_0) and 210 (Q6_K) bytes put every other
//! block's fields off a word boundary, and none of their codes start on 16 bytes, so a
//! kernel reading them in GGUF order loads word by word and shifts. In a bundle those
//! formats are stored as regions, one per field group ([`regions`]): region `i` holds that
//! field of every block, in block order, and the regions follow each other. On the H200
//! (commit a5bcb16, which moved Q4_1 too) Qwen2.5-0.5B's decode step went from 709-712 to
//! 676-677 us on CUDA and from 925-935 to 886-888 us on Vulkan.
//!
//! Invariants: the layout only moves bytes (same length, every byte of the checkpoint once);
//! region `i` starts at `blocks * (sum of the sizes before i)`, and block `b`'s field at
//! `b * size_i` into it; the first region's fields are multiples of 16 bytes and the next
//! ones of 4, then 2, so every codes field starts on 16 bytes (loads of 4-word vectors) and
//! every other field on a word, except the f16 scales, which are read as halves of words.
//! Floats, Q4_1 and Q4_K, whose 20- and 144-byte blocks keep every field on a word, keep
//! their GGUF bytes: moving Q4_1's fields apart made SmolLM2's Vulkan step 3.5% slower on the
//! H200 (730.5-731.8 to 756.5-756.7 us; CUDA within noise, 462.9-467.3 against 464.4-470.5).

use poot_ir::DType;
use std::borrow::Cow;

/// The regions of a block format, in device order: each field group's byte offset and size
/// in the GGUF block. A single region covering the whole block means GGUF order.
pub fn regions(dtype: DType) -> &'static [(usize, usize)] {
    match dtype {
        // qs; d.
        DType::Q4_0 => &[(2, 16), (0, 2)],
        // qs; qh; d.
        DType::Q5_0 => &[(6, 16), (2, 4), (0, 2)],
        // qs; d.
        DType::Q8_0 => &[(2, 32), (0, 2)],
        // ql, qh and the sub-block scales; d.
        DType::Q6K => &[(0, 208), (208, 2)],
        DType::Q4_1 => &[(0, 20)],
        DType::Q4K => &[(0, 144)],
        _ => &[],
    }
}

/// `bytes` (a weight of `dtype` in GGUF order, whole blocks) in the device layout.
pub fn device_bytes(dtype: DType, bytes: &[u8]) -> Cow<'_, [u8]> {
    let regions = regions(dtype);
    if regions.len() < 2 {
        return Cow::Borrowed(bytes);
    }
    let size = dtype.block().1;
    let mut out = Vec::with_capacity(bytes.len());
    for &(at, len) in regions {
        for block in bytes.chunks_exact(size) {
            out.extend_from_slice(&block[at..at + len]);
        }
    }
    // Bytes past the last whole block (none in a checked checkpoint) stay last.
    out.extend_from_slice(bytes.chunks_exact(size).remainder());
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three blocks whose every byte is distinct, in GGUF order.
    fn blocks(size: usize) -> Vec<u8> {
        (0..3 * size).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn block_formats_move_each_field_group_to_its_region() {
        for dtype in [DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q6K] {
            let size = dtype.block().1;
            let rs = regions(dtype);
            let mut covered: Vec<usize> = rs.iter().flat_map(|&(a, l)| a..a + l).collect();
            covered.sort_unstable();
            assert_eq!(
                covered,
                (0..size).collect::<Vec<_>>(),
                "{dtype:?}: every byte once"
            );
            assert_eq!(rs[0].1 % 16, 0, "{dtype:?}: codes on 16 bytes");
            let src = blocks(size);
            let out = device_bytes(dtype, &src);
            assert_eq!(out.len(), src.len());
            let mut ragged = src.clone();
            ragged.extend_from_slice(&[7, 9]);
            assert_eq!(
                device_bytes(dtype, &ragged)[src.len()..],
                [7, 9],
                "{dtype:?}"
            );
            let mut start = 0;
            for &(at, len) in rs {
                for b in 0..3 {
                    let got = &out[start + b * len..start + (b + 1) * len];
                    let want = &src[b * size + at..b * size + at + len];
                    assert_eq!(got, want, "{dtype:?} field at {at}, block {b}");
                }
                start += 3 * len;
            }
        }
    }

    #[test]
    fn aligned_blocks_and_floats_keep_their_bytes() {
        for dtype in [DType::Q4_1, DType::Q4K, DType::F32, DType::F16, DType::Bf16] {
            let src = blocks(dtype.block().1);
            assert!(regions(dtype).len() < 2);
            assert!(matches!(device_bytes(dtype, &src), Cow::Borrowed(b) if b == &src[..]));
        }
    }
}
