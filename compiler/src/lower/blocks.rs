//! Reading a weight's block fields from its words in the device layout (`layout`): where a
//! block's fields lie, and the fields of each block format's unit.
//!
//! Invariants: every load is clamped into the weight (a scalar to its last word, a 4-word
//! vector to its last whole vector); vector loads are only issued at 16-byte offsets, which
//! the layout guarantees for codes fields; the fields are unpacked with exactly
//! `poot_eval::dequant`'s integer and f32 operations.

use super::expr::Emit;
use super::layout::regions;
use poot_ir::DType;
use poot_kir::{BinOp, CmpOp, Mem, Scalar, Val};

/// A weight's words (parameter `mem`, `words` of them).
pub(super) struct Bytes {
    mem: Mem,
    words: usize,
}

impl Bytes {
    /// The `words` words of parameter `mem`.
    pub(super) fn new(mem: Mem, words: usize) -> Bytes {
        Bytes { mem, words }
    }
    pub(super) fn word(&self, e: &mut Emit, word: Val) -> Val {
        let last = e.kb.u32(self.words.saturating_sub(1) as u32);
        let at = e.kb.bin(BinOp::Min, word, last);
        e.kb.load(self.mem, at, 1)
    }
    /// `n` words from word-aligned byte offset `off`; as 4-word vectors where `off` is a
    /// multiple of 16 and `n` of 4 (`vec`), each clamped to the weight's last whole vector.
    pub(super) fn words(&self, e: &mut Emit, off: Val, n: usize, vec: bool) -> Vec<Val> {
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
    pub(super) fn half(&self, e: &mut Emit, off: Val, bf16: bool) -> Val {
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
pub(super) struct Block {
    pub(super) at: Vec<Val>,
}

/// The block holding unit `unit` of row `row` (`row_bytes` per row) of a block format.
pub(super) fn block_at(
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

pub(super) fn i2f(e: &mut Emit, x: Val) -> Val {
    e.kb.convert(x, Scalar::F32)
}

pub(super) fn sext8(e: &mut Emit, b: Val) -> Val {
    let s24 = e.kb.u32(24);
    let x = e.kb.bin(BinOp::Shl, b, s24);
    let xi = e.kb.bitcast(x, Scalar::I32);
    let s24i = e.kb.i32(24);
    let q = e.kb.bin(BinOp::Shr, xi, s24i);
    i2f(e, q)
}

/// A Q4_0, Q4_1 or Q5_0 block's fields: its scale, min (Q4_1), fifth bits (Q5_0), the four
/// words of nibbles, and the bias its codes carry.
pub(super) struct SmallBlock {
    pub(super) d: Val,
    pub(super) m: Option<Val>,
    pub(super) qh: Option<Val>,
    pub(super) qs: Vec<Val>,
    pub(super) bias: u32,
}

/// The fields of the Q4_0, Q4_1 or Q5_0 block `blk`: Q4_1's scale, min and nibbles in GGUF
/// order; Q4_0's and Q5_0's nibbles (the first region), Q5_0's fifth bits, then the scale.
pub(super) fn small_block(e: &mut Emit, by: &Bytes, dtype: DType, blk: &Block) -> SmallBlock {
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
pub(super) struct Q4kUnit {
    pub(super) dl: Val,
    pub(super) ml: Val,
    pub(super) q: Vec<Val>,
    pub(super) sh: Val,
}

/// The fields of unit `unit` of the Q4_K super-block at byte `bo` (its sub-block
/// `unit % 8`'s 6-bit scale and min, unpacked as `poot_eval::dequant` does).
pub(super) fn q4k_unit(e: &mut Emit, by: &Bytes, bo: Val, unit: Val) -> Q4kUnit {
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
pub(super) struct Q6kUnit {
    pub(super) ds: [Val; 2],
    pub(super) ql: Vec<Val>,
    pub(super) qh: Vec<Val>,
    pub(super) shl: Val,
    pub(super) shh: Val,
}

/// The fields of unit `unit` of the Q6_K super-block `blk` (its first region: `ql`, `qh`
/// and the sub-block scales in GGUF order; then its scale).
pub(super) fn q6k_unit(e: &mut Emit, by: &Bytes, blk: &Block, unit: Val) -> Q6kUnit {
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
