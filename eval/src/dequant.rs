//! Dequantization of every supported weight dtype to f32.
//!
//! Invariant: results equal the `gguf` Python package's `gguf.quants.dequantize` bit for bit.
//! Each formula below performs the same f32 roundings in the same order as that reference
//! (products and sums rounded separately, never fused).

use half::{bf16, f16};
use poot_ir::DType;

fn h(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Dequantizes `bytes`, a whole number of `dtype` blocks, into `out` (one f32 per weight).
/// `dtype` must be a float or packed dtype and `out.len()` must match `bytes`.
pub fn dequantize(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let (per, size) = dtype.block();
    debug_assert_eq!(bytes.len() / size * per, out.len());
    match dtype {
        DType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        DType::Bf16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
            }
        }
        _ => {
            for (b, o) in bytes.chunks_exact(size).zip(out.chunks_exact_mut(per)) {
                block(dtype, b, o);
            }
        }
    }
}

fn block(dtype: DType, b: &[u8], o: &mut [f32]) {
    match dtype {
        DType::Q4_0 => {
            let d = h(b, 0);
            for j in 0..16 {
                let q = b[2 + j];
                o[j] = d * ((q & 15) as i32 - 8) as f32;
                o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
            }
        }
        DType::Q4_1 => {
            let (d, m) = (h(b, 0), h(b, 2));
            for j in 0..16 {
                let q = b[4 + j];
                o[j] = d * (q & 15) as f32 + m;
                o[j + 16] = d * (q >> 4) as f32 + m;
            }
        }
        DType::Q5_0 => {
            let d = h(b, 0);
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            for j in 0..16 {
                let q = b[6 + j];
                let lo = (q & 15) as u32 | ((qh >> j) & 1) << 4;
                let hi = (q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
                o[j] = d * (lo as i32 - 16) as f32;
                o[j + 16] = d * (hi as i32 - 16) as f32;
            }
        }
        DType::Q8_0 => {
            let d = h(b, 0);
            for j in 0..32 {
                o[j] = b[2 + j] as i8 as f32 * d;
            }
        }
        DType::Q4K => {
            let (d, dmin) = (h(b, 0), h(b, 2));
            let s = &b[4..16];
            let qs = &b[16..144];
            for j in 0..8 {
                let (sc, m) = if j < 4 {
                    (s[j] & 63, s[j + 4] & 63)
                } else {
                    (
                        (s[j + 4] & 15) | ((s[j - 4] >> 2) & 0x30),
                        (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30),
                    )
                };
                let dl = d * sc as f32;
                let ml = dmin * m as f32;
                let base = (j / 2) * 32;
                let shift = 4 * (j % 2);
                for k in 0..32 {
                    let q = (qs[base + k] >> shift) & 15;
                    o[j * 32 + k] = dl * q as f32 - ml;
                }
            }
        }
        DType::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            let d = h(b, 208);
            for e in 0..256 {
                let (half, r) = (e / 128, e % 128);
                let lo = (ql[half * 64 + e % 64] >> (4 * (r / 64))) & 15;
                let hi = (qh[half * 32 + e % 32] >> (2 * (r / 32))) & 3;
                let q = ((lo | hi << 4) as i32 - 32) as f32;
                o[e] = d * sc[e / 16] as i8 as f32 * q;
            }
        }
        _ => unreachable!("{dtype} is not a block format"),
    }
}
