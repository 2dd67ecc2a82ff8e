//! Reading one weight element inside a kernel, for every weight dtype.
//!
//! Invariant: `unit` (32 weights of a row) and `weight` (one plain-float weight) perform
//! exactly the f32 operations of `poot_eval::dequant`, so a device weight equals the reference
//! weight bit for bit; `unit_codes` gives the same unit for a dot product, as exact integer
//! codes and the block's scale (and min), whose products equal the weights before rounding.
//! Weights are bound as `u32` words in the device layout (`layout`: every format's fields
//! other than f16 scales start on a word, and 16-byte aligned fields load as 4-word
//! vectors); loads never pass the weight's last word.

use super::expr::Emit;
use super::layout::regions;
use poot_ir::DType;
use poot_kir::{BinOp, CmpOp, Mem, Scalar, UnOp, Val};

struct Bytes {
    mem: Mem,
    words: usize,
}

impl Bytes {
    /// The `words` words of parameter `mem`.
    fn new(mem: Mem, words: usize) -> Bytes {
        Bytes { mem, words }
    }
    fn word(&self, e: &mut Emit, word: Val) -> Val {
        let last = e.kb.u32(self.words.saturating_sub(1) as u32);
        let at = e.kb.bin(BinOp::Min, word, last);
        e.kb.load(self.mem, at, 1)
    }
    /// `n` words from word-aligned byte offset `off`; as 4-word vectors where `off` is a
    /// multiple of 16 and `n` of 4 (`vec`), each clamped to the weight's last whole vector.
    fn words(&self, e: &mut Emit, off: Val, n: usize, vec: bool) -> Vec<Val> {
        let two = e.kb.u32(2);
        let w0 = e.kb.bin(BinOp::Shr, off, two);
        if !vec {
            return (0..n)
                .map(|i| {
                    let iv = e.kb.u32(i as u32);
                    let at = e.kb.add(w0, iv);
                    self.word(e, at)
                })
                .collect();
        }
        let last = e.kb.u32((self.words / 4 * 4).saturating_sub(4) as u32);
        let mut out = Vec::with_capacity(n);
        for i in 0..n / 4 {
            let iv = e.kb.u32(4 * i as u32);
            let at = e.kb.add(w0, iv);
            let at = e.kb.bin(BinOp::Min, at, last);
            let v = e.kb.load(self.mem, at, 4);
            out.extend((0..4).map(|c| e.kb.extract(v, c)));
        }
        out
    }
    /// The byte at byte offset `off`.
    fn byte(&self, e: &mut Emit, off: Val) -> Val {
        let two = e.kb.u32(2);
        let wi = e.kb.bin(BinOp::Shr, off, two);
        let w = self.word(e, wi);
        let three = e.kb.u32(3);
        let sub = e.kb.bin(BinOp::And, off, three);
        let eight = e_u(e, 8);
        let sh = e.kb.mul(sub, eight);
        let x = e.kb.bin(BinOp::Shr, w, sh);
        let ff = e.kb.u32(0xff);
        e.kb.bin(BinOp::And, x, ff)
    }
    /// The f16 at even byte offset `off`, as f32.
    fn half(&self, e: &mut Emit, off: Val, bf16: bool) -> Val {
        let two = e.kb.u32(2);
        let wi = e.kb.bin(BinOp::Shr, off, two);
        let w = self.word(e, wi);
        let hi = e.kb.bin(BinOp::And, off, two);
        let sixteen = e.kb.u32(16);
        let zero = e.kb.u32(0);
        let odd = e.kb.cmp(CmpOp::Ne, hi, zero);
        let sh = e.kb.select(odd, sixteen, zero);
        let x = e.kb.bin(BinOp::Shr, w, sh);
        if bf16 {
            e.kb.expr(poot_kir::Expr::Bf16ToF32(x, false))
        } else {
            e.kb.expr(poot_kir::Expr::HalfToF32(x, false))
        }
    }
}

/// Where a block's fields lie in the device layout (`layout`): the byte offset of its
/// field in each region, in region order.
struct Block {
    at: Vec<Val>,
}

/// The block holding unit `unit` of row `row` (`row_bytes` per row) of a block format.
fn block_at(
    e: &mut Emit,
    by: &Bytes,
    dtype: DType,
    row: Val,
    row_bytes: usize,
    unit: Val,
) -> Block {
    let (per_block, size) = dtype.block();
    let bpr = e.u(row_bytes / size);
    let first = e.kb.mul(row, bpr);
    let pu = e.u(per_block / 32);
    let blk = e.kb.bin(BinOp::Div, unit, pu);
    let blk = e.kb.add(first, blk);
    // The weight's words hold its blocks rounded up to a word, less than a block.
    let blocks = 4 * by.words / size;
    let mut start = 0;
    let at = regions(dtype)
        .iter()
        .map(|&(_, len)| {
            let lv = e.u(len);
            let o = e.kb.mul(blk, lv);
            let o = if start == 0 { o } else { at(e, o, start) };
            start += blocks * len;
            o
        })
        .collect();
    Block { at }
}

/// `from + plus`.
fn at(e: &mut Emit, from: Val, plus: usize) -> Val {
    let p = e.u(plus);
    e.kb.add(from, p)
}

fn e_u(e: &mut Emit, x: u32) -> Val {
    e.kb.u32(x)
}

fn i2f(e: &mut Emit, x: Val) -> Val {
    e.kb.convert(x, Scalar::F32)
}

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

fn sext8(e: &mut Emit, b: Val) -> Val {
    let s24 = e.kb.u32(24);
    let x = e.kb.bin(BinOp::Shl, b, s24);
    let xi = e.kb.bitcast(x, Scalar::I32);
    let s24i = e.kb.i32(24);
    let q = e.kb.bin(BinOp::Shr, xi, s24i);
    i2f(e, q)
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

/// A Q4_0, Q4_1 or Q5_0 block's fields: its scale, min (Q4_1), fifth bits (Q5_0), the four
/// words of nibbles, and the bias its codes carry.
struct SmallBlock {
    d: Val,
    m: Option<Val>,
    qh: Option<Val>,
    qs: Vec<Val>,
    bias: u32,
}

/// The fields of the Q4_0, Q4_1 or Q5_0 block `blk`: Q4_1's scale, min and nibbles in GGUF
/// order; Q4_0's and Q5_0's nibbles (the first region), Q5_0's fifth bits, then the scale.
fn small_block(e: &mut Emit, by: &Bytes, dtype: DType, blk: &Block) -> SmallBlock {
    if dtype == DType::Q4_1 {
        let b = blk.at[0];
        let d = by.half(e, b, false);
        let mo = at(e, b, 2);
        let m = Some(by.half(e, mo, false));
        let qo = at(e, b, 4);
        let qs = by.words(e, qo, 4, false);
        return SmallBlock {
            d,
            m,
            qh: None,
            qs,
            bias: 0,
        };
    }
    let qs = by.words(e, blk.at[0], 4, true);
    let qh = (dtype == DType::Q5_0).then(|| by.words(e, blk.at[1], 1, false)[0]);
    let d = by.half(e, blk.at[blk.at.len() - 1], false);
    let bias = if dtype == DType::Q4_0 { 8 } else { 16 };
    SmallBlock {
        d,
        m: None,
        qh,
        qs,
        bias,
    }
}

/// A Q4_K unit's fields: weight `j` is `dl * ((q byte j >> sh) & 15) - ml`.
struct Q4kUnit {
    dl: Val,
    ml: Val,
    q: Vec<Val>,
    sh: Val,
}

/// The fields of unit `unit` of the Q4_K super-block at byte `bo` (its sub-block
/// `unit % 8`'s 6-bit scale and min, unpacked as `poot_eval::dequant` does).
fn q4k_unit(e: &mut Emit, by: &Bytes, bo: Val, unit: Val) -> Q4kUnit {
    let eight = e.u(8);
    let sub = e.kb.bin(BinOp::Rem, unit, eight);
    let d = by.half(e, bo, false);
    let o2 = at(e, bo, 2);
    let dmin = by.half(e, o2, false);
    let s = |e: &mut Emit, i: Val| {
        let x = at(e, bo, 4);
        let x = e.kb.add(x, i);
        by.byte(e, x)
    };
    let four = e.u(4);
    let two = e.u(2);
    let low = e.kb.cmp(CmpOp::Lt, sub, four);
    let sb4 = e.kb.add(sub, four);
    let back = e.kb.sub(sub, four);
    let zero = e.u(0);
    let sbm = e.kb.select(low, zero, back);
    let s_sb = s(e, sub);
    let s_sb4 = s(e, sb4);
    let s_sbm = s(e, sbm);
    let c63 = e.u(63);
    let c15 = e.u(15);
    let c30 = e.u(0x30);
    let sc_lo = e.kb.bin(BinOp::And, s_sb, c63);
    let m_lo = e.kb.bin(BinOp::And, s_sb4, c63);
    let a = e.kb.bin(BinOp::And, s_sb4, c15);
    let b = e.kb.bin(BinOp::Shr, s_sbm, two);
    let b = e.kb.bin(BinOp::And, b, c30);
    let sc_hi = e.kb.bin(BinOp::Or, a, b);
    let a = e.kb.bin(BinOp::Shr, s_sb4, four);
    let b = e.kb.bin(BinOp::Shr, s_sb, two);
    let b = e.kb.bin(BinOp::And, b, c30);
    let m_hi = e.kb.bin(BinOp::Or, a, b);
    let sc = e.kb.select(low, sc_lo, sc_hi);
    let m = e.kb.select(low, m_lo, m_hi);
    let scf = i2f(e, sc);
    let mf = i2f(e, m);
    let dl = e.kb.mul(d, scf);
    let ml = e.kb.mul(dmin, mf);
    let one = e.u(1);
    let pair = e.kb.bin(BinOp::Shr, sub, one);
    let c32 = e.u(32);
    let pair = e.kb.mul(pair, c32);
    let qo = at(e, bo, 16);
    let qo = e.kb.add(qo, pair);
    let q = by.words(e, qo, 8, true);
    let odd = e.kb.bin(BinOp::And, sub, one);
    let sh = e.kb.mul(odd, four);
    Q4kUnit { dl, ml, q, sh }
}

/// A Q6_K unit's fields: weight `j` is `ds[j / 16] * (((ql byte j >> shl) & 15) |
/// ((qh byte j >> shh) & 3) << 4) - 32)`.
struct Q6kUnit {
    ds: [Val; 2],
    ql: Vec<Val>,
    qh: Vec<Val>,
    shl: Val,
    shh: Val,
}

/// The fields of unit `unit` of the Q6_K super-block `blk` (its first region: `ql`, `qh`
/// and the sub-block scales in GGUF order; then its scale).
fn q6k_unit(e: &mut Emit, by: &Bytes, blk: &Block, unit: Val) -> Q6kUnit {
    let eight = e.u(8);
    let u = e.kb.bin(BinOp::Rem, unit, eight);
    let d = by.half(e, blk.at[1], false);
    let bo = blk.at[0];
    let four = e.u(4);
    let two = e.u(2);
    let one = e.u(1);
    let half = e.kb.bin(BinOp::Div, u, four);
    let u4 = e.kb.bin(BinOp::Rem, u, four);
    let odd = e.kb.bin(BinOp::And, u, one);
    let c64 = e.u(64);
    let c32 = e.u(32);
    let lo_off = e.kb.mul(half, c64);
    let lo_off = e.kb.add(bo, lo_off);
    let oo = e.kb.mul(odd, c32);
    let lo_off = e.kb.add(lo_off, oo);
    let ql = by.words(e, lo_off, 8, true);
    let hi_off = at(e, bo, 128);
    let h32 = e.kb.mul(half, c32);
    let hi_off = e.kb.add(hi_off, h32);
    let qh = by.words(e, hi_off, 8, true);
    let u4h = e.kb.bin(BinOp::Shr, u4, one);
    let shl = e.kb.mul(u4h, four);
    let shh = e.kb.mul(u4, two);
    let so = at(e, bo, 192);
    let u2 = e.kb.mul(u, two);
    let so = e.kb.add(so, u2);
    let s0 = by.byte(e, so);
    let so1 = e.kb.add(so, one);
    let s1 = by.byte(e, so1);
    let ds = [s0, s1].map(|sc| {
        let f = sext8(e, sc);
        e.kb.mul(d, f)
    });
    Q6kUnit {
        ds,
        ql,
        qh,
        shl,
        shh,
    }
}

/// A unit of 32 weights for a dot product. In factored form (every block format), weight
/// `j` is `scale * codes[j] (+ min)`, `codes[j]` being the block's integer code less
/// its bias, as an exact f32: a dot product sums `x[j] * codes[j]` and scales the sum once,
/// instead of dequantizing each weight first (a multiply and a conversion per weight fewer);
/// it rounds differently from summing dequantized weights, within a reassociated sum's
/// bound. Otherwise `codes` are the weights themselves (as [`unit`] reads them) and there is
/// no scale.
pub struct Codes {
    /// The 32 codes (or weights).
    pub codes: Vec<Val>,
    /// In factored form, the scales of equal runs of codes: one, or (Q6_K) one for codes
    /// `0..16` and one for `16..32`; none for plain weights.
    pub scales: Vec<Val>,
    /// The unit's min (Q4_1, and Q4_K's negated sub-block min).
    pub min: Option<Val>,
}

/// The codes of the four bytes of `w` (each below 2^8), less `bias`, exactly: the float
/// with bits `0x4B000000 | b` is `2^23 + b`, and subtracting `2^23 + bias` is exact.
fn byte_codes(e: &mut Emit, w: Val, bias: u32) -> [Val; 4] {
    let ff = e.kb.u32(0xff);
    let magic = e.kb.u32(0x4B00_0000);
    let off = e.kb.f32(8_388_608.0 + bias as f32);
    std::array::from_fn(|b| {
        let x = if b == 0 {
            w
        } else {
            let s = e.kb.u32(8 * b as u32);
            e.kb.bin(BinOp::Shr, w, s)
        };
        let x = e.kb.bin(BinOp::And, x, ff);
        let bits = e.kb.bin(BinOp::Or, x, magic);
        let f = e.kb.bitcast(bits, Scalar::F32);
        e.kb.sub(f, off)
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
/// (the code plus 128), Q4_0/Q4_1/Q5_0's low and high nibbles (weights `j` and `j + 16`) with
/// Q5_0's fifth bits spread in.
pub fn unit_codes(
    e: &mut Emit,
    mem: Mem,
    words: usize,
    dtype: DType,
    row: Val,
    unit_v: Val,
    row_bytes: usize,
) -> Codes {
    if !matches!(
        dtype,
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q8_0 | DType::Q4K | DType::Q6K
    ) {
        return Codes {
            codes: unit(e, mem, words, dtype, row, unit_v, row_bytes),
            scales: Vec::new(),
            min: None,
        };
    }
    let by = Bytes::new(mem, words);
    let blk = block_at(e, &by, dtype, row, row_bytes, unit_v);
    let nibbles = e.kb.u32(0x0f0f_0f0f);
    if dtype == DType::Q4K {
        let k = q4k_unit(e, &by, blk.at[0], unit_v);
        let codes =
            k.q.iter()
                .flat_map(|&w| {
                    let w = e.kb.bin(BinOp::Shr, w, k.sh);
                    let w = e.kb.bin(BinOp::And, w, nibbles);
                    byte_codes(e, w, 0)
                })
                .collect();
        return Codes {
            codes,
            scales: vec![k.dl],
            min: Some(e.kb.un(UnOp::Neg, k.ml)),
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
                    byte_codes(e, q, 32)
                })
                .collect();
        return Codes {
            codes,
            scales: k.ds.to_vec(),
            min: None,
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
        };
    }
    let SmallBlock { d, m, qh, qs, bias } = small_block(e, &by, dtype, &blk);
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
        low.extend(byte_codes(e, lo, bias));
        high.extend(byte_codes(e, hi, bias));
    }
    low.extend(high);
    Codes {
        codes: low,
        scales: vec![d],
        min: m,
    }
}
