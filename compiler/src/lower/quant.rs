//! Reading one weight element inside a kernel, for every weight dtype.
//!
//! Invariant: `unit` (32 weights of a row) and `weight` (one plain-float weight) perform
//! exactly the f32 operations of `poot_eval::dequant`, so a device weight equals the reference
//! weight bit for bit; `unit_codes` gives the same unit for a dot product, as codes exact in
//! f32 and the block's scale (and min), from which the weights follow exactly before
//! rounding ([`Form`]). Weights are bound as `u32` words in the device layout (`layout`),
//! read through `blocks`.

use super::blocks::{Bytes, SmallBlock, block_at, i2f, q4k_unit, q6k_unit, sext8, small_block};
use super::expr::Emit;
use poot_ir::DType;
use poot_kir::{BinOp, Mem, Scalar, UnOp, Val};

/// Element `k` of row `row` of a plain-float weight `mem` (f32, f16, bf16; `row_bytes` per
/// row, `words` in all), for rows whose length is not a multiple of 32. Block formats always
/// have such rows and are read by [`unit`]; for them this returns NaN, which no caller asks for.
pub fn weight(
    e: &mut Emit,
    mem: Mem,
    words: usize,
    dtype: DType,
    row: Val,
    k: Val,
    row_bytes: usize,
) -> Val {
    let by = Bytes::new(mem, words);
    let rb = e.u(row_bytes);
    let base = e.kb.mul(row, rb);
    match dtype {
        DType::F32 => {
            let two = e.u(2);
            let w0 = e.kb.bin(BinOp::Shr, base, two);
            let wi = e.kb.add(w0, k);
            let w = by.word(e, wi);
            e.kb.bitcast(w, Scalar::F32)
        }
        DType::F16 | DType::Bf16 => {
            let two = e.u(2);
            let kk = e.kb.mul(k, two);
            let off = e.kb.add(base, kk);
            by.half(e, off, dtype == DType::Bf16)
        }
        _ => e.kb.f32(f32::NAN),
    }
}

/// Byte `i` of the little-endian words `w`.
fn byte_of(e: &mut Emit, w: &[Val], i: usize) -> Val {
    let sh = e.kb.u32(8 * (i % 4) as u32);
    let x = e.kb.bin(BinOp::Shr, w[i / 4], sh);
    let ff = e.kb.u32(0xff);
    e.kb.bin(BinOp::And, x, ff)
}

/// The 32 weights `unit * 32 .. unit * 32 + 32` of row `row`, with the same f32 operations
/// as `poot_eval::dequant` (so each equals the reference weight bit for bit). Loads are
/// whole block fields, independent of each other, so a lane issues them back to back.
/// `dtype`'s row length must be a multiple of 32.
pub fn unit(
    e: &mut Emit,
    mem: Mem,
    words: usize,
    dtype: DType,
    row: Val,
    unit: Val,
    row_bytes: usize,
) -> Vec<Val> {
    let by = Bytes::new(mem, words);
    match dtype {
        DType::F32 | DType::F16 | DType::Bf16 => {
            let rb = e.u(row_bytes);
            let base = e.kb.mul(row, rb);
            let bytes_per = if dtype == DType::F32 { 4 } else { 2 };
            let ub = e.u(32 * bytes_per);
            let uo = e.kb.mul(unit, ub);
            let off = e.kb.add(base, uo);
            let w = by.words(e, off, 32 * bytes_per / 4, true);
            (0..32)
                .map(|j| match dtype {
                    DType::F32 => e.kb.bitcast(w[j], Scalar::F32),
                    _ => {
                        let x = if j % 2 == 1 {
                            let s = e.kb.u32(16);
                            e.kb.bin(BinOp::Shr, w[j / 2], s)
                        } else {
                            w[j / 2]
                        };
                        if dtype == DType::F16 {
                            e.kb.expr(poot_kir::Expr::HalfToF32(x, false))
                        } else {
                            e.kb.expr(poot_kir::Expr::Bf16ToF32(x, false))
                        }
                    }
                })
                .collect()
        }
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 => {
            let blk = block_at(e, &by, dtype, row, row_bytes, unit);
            let SmallBlock { d, m, qh, qs, bias } = small_block(e, &by, dtype, &blk);
            (0..32)
                .map(|j| {
                    let b = byte_of(e, &qs, j % 16);
                    let nib = if j < 16 {
                        let f = e.kb.u32(15);
                        e.kb.bin(BinOp::And, b, f)
                    } else {
                        let s = e.kb.u32(4);
                        e.kb.bin(BinOp::Shr, b, s)
                    };
                    let q = match qh {
                        Some(h) => {
                            let s = e.kb.u32(j as u32);
                            let bit = e.kb.bin(BinOp::Shr, h, s);
                            let one = e.kb.u32(1);
                            let bit = e.kb.bin(BinOp::And, bit, one);
                            let four = e.kb.u32(4);
                            let hb = e.kb.bin(BinOp::Shl, bit, four);
                            e.kb.bin(BinOp::Or, nib, hb)
                        }
                        None => nib,
                    };
                    match m {
                        Some(m) => {
                            let qf = i2f(e, q);
                            let x = e.kb.mul(d, qf);
                            e.kb.add(x, m)
                        }
                        None => {
                            let qi = e.kb.bitcast(q, Scalar::I32);
                            let bv = e.kb.i32(bias as i32);
                            let c = e.kb.sub(qi, bv);
                            let c = i2f(e, c);
                            e.kb.mul(d, c)
                        }
                    }
                })
                .collect()
        }
        DType::Q8_0 => {
            let blk = block_at(e, &by, dtype, row, row_bytes, unit);
            let q = by.words(e, blk.at[0], 8, true);
            let d = by.half(e, blk.at[1], false);
            (0..32)
                .map(|j| {
                    let b = byte_of(e, &q, j);
                    let f = sext8(e, b);
                    e.kb.mul(f, d)
                })
                .collect()
        }
        DType::Q4K => {
            let blk = block_at(e, &by, dtype, row, row_bytes, unit);
            let k = q4k_unit(e, &by, blk.at[0], unit);
            let c15 = e.u(15);
            (0..32)
                .map(|j| {
                    let b = byte_of(e, &k.q, j);
                    let x = e.kb.bin(BinOp::Shr, b, k.sh);
                    let x = e.kb.bin(BinOp::And, x, c15);
                    let xf = i2f(e, x);
                    let y = e.kb.mul(k.dl, xf);
                    e.kb.sub(y, k.ml)
                })
                .collect()
        }
        DType::Q6K => {
            let blk = block_at(e, &by, dtype, row, row_bytes, unit);
            let k = q6k_unit(e, &by, &blk, unit);
            let four = e.u(4);
            let c15 = e.u(15);
            let c3 = e.u(3);
            let c32i = e.kb.i32(32);
            (0..32)
                .map(|j| {
                    let lb = byte_of(e, &k.ql, j);
                    let lo = e.kb.bin(BinOp::Shr, lb, k.shl);
                    let lo = e.kb.bin(BinOp::And, lo, c15);
                    let hb = byte_of(e, &k.qh, j);
                    let hi = e.kb.bin(BinOp::Shr, hb, k.shh);
                    let hi = e.kb.bin(BinOp::And, hi, c3);
                    let hi = e.kb.bin(BinOp::Shl, hi, four);
                    let q = e.kb.bin(BinOp::Or, lo, hi);
                    let qi = e.kb.bitcast(q, Scalar::I32);
                    let qi = e.kb.sub(qi, c32i);
                    let qf = i2f(e, qi);
                    let ds = if j < 16 { k.ds[0] } else { k.ds[1] };
                    e.kb.mul(ds, qf)
                })
                .collect()
        }
        _ => vec![e.kb.f32(f32::NAN); 32],
    }
}

/// How a unit's codes stand for its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The weights themselves (plain floats), with no scale.
    Plain,
    /// Integer codes less the format's bias: weight `j` is `scale * codes[j] (+ min)`.
    Exact,
    /// Codes `1 + q / 2^bits`, `q` the format's raw code (below `2^bits`): weight `j` is
    /// `scale * (2^bits * (codes[j] - 1) - bias) (+ min)`. A code is one byte permute (the
    /// code's bits under the exponent of 1.0) where an exact code also needs a subtraction,
    /// and a dot product recovers the codes' sum as `2^bits * (sum(x * codes) - sum(x))`.
    Mantissa {
        /// The raw codes' width.
        bits: u32,
        /// The format's bias.
        bias: u32,
    },
}

impl Form {
    /// The sum of `x[j] * (code less bias)` over a run of codes, from `p`, the sum of `x[j] *
    /// codes[j]`, and `s`, the sum of `x[j]`, over the same run: `p` itself for exact codes
    /// and plain weights; `2^bits * (p - s) - bias * s` for mantissa codes (both products
    /// by powers of two, exact).
    pub fn code_sum(self, e: &mut Emit, p: Val, s: Val) -> Val {
        let Form::Mantissa { bits, bias } = self else {
            return p;
        };
        let pq = e.kb.sub(p, s);
        let scale = e.kb.f32((1u32 << bits) as f32);
        if bias == 0 {
            return e.kb.mul(pq, scale);
        }
        let nb = e.kb.f32(-(bias as f32));
        let b = e.kb.mul(s, nb);
        e.kb.fma(pq, scale, b)
    }
}

/// A unit of 32 weights for a dot product. In factored form (every block format), weight
/// `j` follows from the code `codes[j]`, the block's scale and min as [`Form`] says: a dot
/// product sums `x[j] * codes[j]` and scales the sum once, instead of dequantizing each
/// weight first (a multiply and a conversion per weight fewer); it rounds differently from
/// summing dequantized weights, within a reassociated sum's bound. A sum of mantissa codes
/// rounds at the scale of `sum |x|` (each code is below 2), so once scaled by `2^bits` its
/// error bound is that of a sum of the terms `2^bits * |x[j]|`, against `|x[j] * code|` for
/// exact codes. Otherwise `codes` are the weights themselves (as [`unit`] reads them) and
/// there is no scale.
pub struct Codes {
    /// The 32 codes (or weights).
    pub codes: Vec<Val>,
    /// In factored form, the scales of equal runs of codes: one, or (Q6_K) one for codes
    /// `0..16` and one for `16..32`; none for plain weights.
    pub scales: Vec<Val>,
    /// The unit's min (Q4_1, and Q4_K's negated sub-block min).
    pub min: Option<Val>,
    /// How the codes stand for the weights.
    pub form: Form,
}

/// Byte `b` of `w` in the low byte (`ff` the mask 0xff).
fn low_byte(e: &mut Emit, w: Val, b: usize, ff: Val) -> Val {
    let x = if b == 0 {
        w
    } else {
        let s = e.kb.u32(8 * b as u32);
        e.kb.bin(BinOp::Shr, w, s)
    };
    e.kb.bin(BinOp::And, x, ff)
}

/// The codes of the four bytes of `w` (each below 2^8), less `bias`, exactly: the float
/// with bits `0x4B000000 | b` is `2^23 + b`, and subtracting `2^23 + bias` is exact.
fn byte_codes(e: &mut Emit, w: Val, bias: u32) -> [Val; 4] {
    let ff = e.kb.u32(0xff);
    let magic = e.kb.u32(0x4B00_0000);
    let off = e.kb.f32(8_388_608.0 + bias as f32);
    std::array::from_fn(|b| {
        let x = low_byte(e, w, b, ff);
        let bits = e.kb.bin(BinOp::Or, x, magic);
        let f = e.kb.bitcast(bits, Scalar::F32);
        e.kb.sub(f, off)
    })
}

/// Bit 7 of every byte: with a code shifted up to end at bit 6, the exponent's low bit.
const MANTISSA_TOPS: u32 = 0x8080_8080;
/// Where a code's byte goes in its float: bits 16..24, the top of the mantissa and the
/// exponent's low bit.
const MANTISSA_AT: u32 = 16;
/// The float bits a code's byte is or'ed into: the sign and the exponent of 1.0 but for its
/// low bit, which the byte brings.
const MANTISSA_ONE: u32 = 0x3F00_0000;

/// The codes `1 + q / 2^bits` of the four bytes `q` of `w` (each below `2^bits`, `bits` at
/// most 7): each code shifted up to end at bit 6 of its byte, with bit 7 set (`w << (7 -
/// bits) | 0x80808080`, no carry between bytes), then moved to the third byte of `0x3F000000`,
/// whose bits are those of `1 + q / 2^bits` (exponent of 1.0, the code at the top of the
/// mantissa); a backend with a byte permute makes each a single instruction.
fn mantissa_codes(e: &mut Emit, w: Val, bits: u32) -> [Val; 4] {
    debug_assert!((1..=7).contains(&bits));
    let s = e.kb.u32(7 - bits);
    let t = e.kb.bin(BinOp::Shl, w, s);
    let top = e.kb.u32(MANTISSA_TOPS);
    let t = e.kb.bin(BinOp::Or, t, top);
    let ff = e.kb.u32(0xff);
    let sixteen = e.kb.u32(MANTISSA_AT);
    let one = e.kb.u32(MANTISSA_ONE);
    std::array::from_fn(|b| {
        let x = low_byte(e, t, b, ff);
        let x = e.kb.bin(BinOp::Shl, x, sixteen);
        let bits = e.kb.bin(BinOp::Or, x, one);
        e.kb.bitcast(bits, Scalar::F32)
    })
}

/// Bits `from .. from + 4` of `h` moved to bit 4 of each byte (bit `from + i` to bit
/// `8 i + 4`): the multiply's four shifted copies of the nibble land on distinct bits, so
/// nothing carries, and the mask keeps one bit of each.
fn spread_bits(e: &mut Emit, h: Val, from: u32) -> Val {
    let s = e.kb.u32(from);
    let t = e.kb.bin(BinOp::Shr, h, s);
    let f = e.kb.u32(0xf);
    let t = e.kb.bin(BinOp::And, t, f);
    let m = e.kb.u32(0x0204_0810);
    let t = e.kb.mul(t, m);
    let keep = e.kb.u32(0x1010_1010);
    e.kb.bin(BinOp::And, t, keep)
}

/// The unit `unit` of row `row` for a dot product (see [`Codes`]), with the same loads as
/// [`unit`]. Codes are extracted four to a word: Q8_0's bytes with their sign bit flipped
/// (the code plus 128) as exact codes; Q4_0/Q4_1/Q5_0's low and high nibbles (weights `j`
/// and `j + 16`) with Q5_0's fifth bits spread in, Q4_K's nibbles and Q6_K's six-bit codes
/// as mantissa codes, or with `exact` as exact codes (a subtraction more a code, and no
/// cancellation in the sum). Q8_0's eight bits do not fit a byte below the top mantissa bit.
#[allow(clippy::too_many_arguments)]
pub fn unit_codes(
    e: &mut Emit,
    mem: Mem,
    words: usize,
    dtype: DType,
    row: Val,
    unit_v: Val,
    row_bytes: usize,
    exact: bool,
) -> Codes {
    if !matches!(
        dtype,
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q8_0 | DType::Q4K | DType::Q6K
    ) {
        return Codes {
            codes: unit(e, mem, words, dtype, row, unit_v, row_bytes),
            scales: Vec::new(),
            min: None,
            form: Form::Plain,
        };
    }
    let by = Bytes::new(mem, words);
    let blk = block_at(e, &by, dtype, row, row_bytes, unit_v);
    let nibbles = e.kb.u32(0x0f0f_0f0f);
    // The codes of a word of four raw codes (each below `2^bits`) of a format with `bias`.
    let codes_of = |e: &mut Emit, w: Val, bits: u32, bias: u32| {
        if exact {
            byte_codes(e, w, bias)
        } else {
            mantissa_codes(e, w, bits)
        }
    };
    let form_of = |bits: u32, bias: u32| {
        if exact {
            Form::Exact
        } else {
            Form::Mantissa { bits, bias }
        }
    };
    if dtype == DType::Q4K {
        let k = q4k_unit(e, &by, blk.at[0], unit_v);
        let codes =
            k.q.iter()
                .flat_map(|&w| {
                    let w = e.kb.bin(BinOp::Shr, w, k.sh);
                    let w = e.kb.bin(BinOp::And, w, nibbles);
                    codes_of(e, w, 4, 0)
                })
                .collect();
        return Codes {
            codes,
            scales: vec![k.dl],
            min: Some(e.kb.un(UnOp::Neg, k.ml)),
            form: form_of(4, 0),
        };
    }
    if dtype == DType::Q6K {
        let k = q6k_unit(e, &by, &blk, unit_v);
        let twos = e.kb.u32(0x0303_0303);
        let four = e.kb.u32(4);
        let codes =
            k.ql.iter()
                .zip(&k.qh)
                .flat_map(|(&l, &h)| {
                    let lo = e.kb.bin(BinOp::Shr, l, k.shl);
                    let lo = e.kb.bin(BinOp::And, lo, nibbles);
                    let hi = e.kb.bin(BinOp::Shr, h, k.shh);
                    let hi = e.kb.bin(BinOp::And, hi, twos);
                    let hi = e.kb.bin(BinOp::Shl, hi, four);
                    let q = e.kb.bin(BinOp::Or, lo, hi);
                    codes_of(e, q, 6, 32)
                })
                .collect();
        return Codes {
            codes,
            scales: k.ds.to_vec(),
            min: None,
            form: form_of(6, 32),
        };
    }
    if dtype == DType::Q8_0 {
        let q = by.words(e, blk.at[0], 8, true);
        let scale = by.half(e, blk.at[1], false);
        let flip = e.kb.u32(0x8080_8080);
        let codes = q
            .iter()
            .flat_map(|&w| {
                let w = e.kb.bin(BinOp::Xor, w, flip);
                byte_codes(e, w, 128)
            })
            .collect();
        return Codes {
            codes,
            scales: vec![scale],
            min: None,
            form: Form::Exact,
        };
    }
    let SmallBlock { d, m, qh, qs, bias } = small_block(e, &by, dtype, &blk);
    let bits = if qh.is_some() { 5 } else { 4 };
    let four = e.kb.u32(4);
    let mut low = Vec::with_capacity(16);
    let mut high = Vec::with_capacity(16);
    for (i, &w) in qs.iter().enumerate() {
        let lo = e.kb.bin(BinOp::And, w, nibbles);
        let hi = e.kb.bin(BinOp::Shr, w, four);
        let hi = e.kb.bin(BinOp::And, hi, nibbles);
        let (lo, hi) = match qh {
            Some(h) => {
                let lb = spread_bits(e, h, 4 * i as u32);
                let hb = spread_bits(e, h, 16 + 4 * i as u32);
                (e.kb.bin(BinOp::Or, lo, lb), e.kb.bin(BinOp::Or, hi, hb))
            }
            None => (lo, hi),
        };
        low.extend(codes_of(e, lo, bits, bias));
        high.extend(codes_of(e, hi, bits, bias));
    }
    low.extend(high);
    Codes {
        codes: low,
        scales: vec![d],
        min: m,
        form: form_of(bits, bias),
    }
}

#[cfg(test)]
mod tests {
    use super::{MANTISSA_AT, MANTISSA_ONE, MANTISSA_TOPS};

    /// The four codes `mantissa_codes` builds from word `w`, step by step in integers, with
    /// its constants.
    fn mantissa_codes_of(w: u32, bits: u32) -> [f32; 4] {
        let t = (w << (7 - bits)) | MANTISSA_TOPS;
        std::array::from_fn(|b| {
            let byte = (t >> (8 * b)) & 0xff;
            f32::from_bits((byte << MANTISSA_AT) | MANTISSA_ONE)
        })
    }

    #[test]
    fn mantissa_codes_are_one_plus_the_code_scaled() {
        for bits in 4..=6 {
            let top = 1u32 << bits;
            for q in 0..top {
                // Four different codes a word, so a carry between bytes would show.
                let qs = [q, top - 1 - q, (q + 3) % top, (q * 5 + 1) % top];
                let w = qs.iter().rev().fold(0, |w, &c| (w << 8) | c);
                for (f, &c) in mantissa_codes_of(w, bits).iter().zip(&qs) {
                    assert_eq!(*f, 1.0 + c as f32 / top as f32, "{bits} bits, code {c}");
                    // What `Form::code_sum` takes back out is exact for one code.
                    assert_eq!((f - 1.0) * top as f32, c as f32);
                }
            }
        }
    }
}
