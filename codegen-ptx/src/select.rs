//! Instruction selection over kir patterns: byte `k` of a 32-bit word moved into the low byte
//! (`(w >> 8k) & 0xff`, or `w >> 24` for a `u32`), possibly shifted on to byte `p` (`<< 8p`),
//! and or'ed with a constant whose byte `p` is zero is one `prmt.b32` (byte permute) instead
//! of a shift, a mask, a shift and an or. The quantized matmuls build every weight code this
//! way (`0x4B000000 | byte` is the f32 bit pattern of `2^23 + byte`; `0x3F000000 | byte <<
//! 16` that of `1 + q / 2^bits` for a byte `0x80 | q << (7 - bits)`), so it is most of their
//! integer work: ptxas then gave Qwen2.5-0.5B's decode gate/up kernel 1176 SASS
//! instructions a thread instead of 1336. A byte that is not or'ed is left as it is: as a
//! permute it saved nothing in the decode kernels and added instructions to the prefill
//! ones, whose shifted words have other readers.
//!
//! Invariant: a selected permute computes exactly the bits of the kir expression it replaces;
//! the replaced shift and mask are still emitted (ptxas drops them when nothing else reads
//! them).

use poot_kir::{BinOp, Const, Expr, Inst, Kernel, Scalar, Val};
use std::collections::HashMap;

/// The definition of every value a `let` defines, in any block.
fn definitions(k: &Kernel) -> HashMap<Val, &Expr> {
    fn walk<'k>(insts: &'k [Inst], defs: &mut HashMap<Val, &'k Expr>) {
        for i in insts {
            match i {
                Inst::Let(v, e) => {
                    defs.insert(*v, e);
                }
                Inst::If { then, els, .. }
                | Inst::Clustered { then, els, .. }
                | Inst::Matrix { then, els } => {
                    walk(then, defs);
                    walk(els, defs);
                }
                Inst::For { body, .. } => walk(body, defs),
                _ => {}
            }
        }
    }
    let mut defs = HashMap::new();
    walk(&k.body, &mut defs);
    defs
}

/// `prmt.b32 d, a, b, selector`: byte `i` of `d` is byte `selector >> 4i & 7` of the eight
/// bytes `{b, a}` (`a` holds bytes 0-3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Permute {
    /// The word whose byte moves.
    pub a: Val,
    /// The constant supplying bytes 1-3.
    pub b: Val,
    /// The selector.
    pub selector: u32,
}

/// What the selection reads of a kernel.
pub(crate) struct Patterns<'a> {
    defs: HashMap<Val, &'a Expr>,
    k: &'a Kernel,
}

impl<'a> Patterns<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Patterns<'a> {
        Patterns {
            defs: definitions(k),
            k,
        }
    }

    /// The integer constant `v` is defined as, if any.
    pub(crate) fn konst(&self, v: Val) -> Option<u32> {
        match self.defs.get(&v)? {
            Expr::Const(Const::U32(c)) => Some(*c),
            Expr::Const(Const::I32(c)) => Some(*c as u32),
            _ => None,
        }
    }

    /// The permute computing the one-lane integer `op(x, y)` where it is one: an `or` of
    /// byte `k` of a word, placed at byte `p`, and a constant whose byte `p` is zero.
    pub(crate) fn permute(&self, op: BinOp, x: Val, y: Val) -> Option<Permute> {
        if op != BinOp::Or {
            return None;
        }
        [(x, y), (y, x)].into_iter().find_map(|(v, c)| {
            let (byte, at) = self.placed(v);
            if (self.konst(c)? >> (8 * at)) & 0xff != 0 {
                return None;
            }
            let (a, k) = self.byte_of(byte)?;
            let selector = (0..4).fold(0, |s, i| s | (if i == at { k } else { 4 + i }) << (4 * i));
            Some(Permute { a, b: c, selector })
        })
    }

    /// `(b, p)` when `v` is `b << 8p` for `p` in 1..4, else `(v, 0)`.
    fn placed(&self, v: Val) -> (Val, u32) {
        if let Some(Expr::Binary(BinOp::Shl, b, s)) = self.defs.get(&v)
            && let Some(s) = self.konst(*s)
            && s % 8 == 0
            && (8..32).contains(&s)
        {
            return (*b, s / 8);
        }
        (v, 0)
    }

    /// `(a, k)` when `v` holds byte `k` of `a` in its low byte and zeros above.
    fn byte_of(&self, v: Val) -> Option<(Val, u32)> {
        match self.defs.get(&v)? {
            Expr::Binary(BinOp::And, p, m) => {
                [(*p, *m), (*m, *p)].into_iter().find_map(|(p, m)| {
                    if self.konst(m)? != 0xff {
                        return None;
                    }
                    self.shifted(p).or(Some((p, 0)))
                })
            }
            // Only a logical shift leaves zeros above the top byte.
            Expr::Binary(BinOp::Shr, w, s)
                if self.konst(*s) == Some(24) && self.k.types[*w].scalar == Scalar::U32 =>
            {
                Some((*w, 3))
            }
            _ => None,
        }
    }

    /// `(a, k)` when `v` is `a >> 8k` for `k` in 0..4 (arithmetic or logical: the caller
    /// keeps only the low byte).
    fn shifted(&self, v: Val) -> Option<(Val, u32)> {
        match self.defs.get(&v)? {
            Expr::Binary(BinOp::Shr, w, s) => {
                let s = self.konst(*s)?;
                (s % 8 == 0 && s < 32).then_some((*w, s / 8))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poot_kir::KernelBuilder;

    /// `prmt.b32` as the PTX ISA defines its default mode.
    fn prmt(a: u32, b: u32, selector: u32) -> u32 {
        let bytes = (u64::from(b) << 32) | u64::from(a);
        (0..4).fold(0, |d, i| {
            let s = (selector >> (4 * i)) & 7;
            d | ((((bytes >> (8 * s)) & 0xff) as u32) << (8 * i))
        })
    }

    #[test]
    fn selected_permutes_compute_the_expressions() {
        let words = [
            0x0000_0000,
            0xffff_ffff,
            0x8f7e_6d5c,
            0x0102_0304,
            0xdead_beef,
        ];
        let ors = [0x4B00_0000, 0x0000_0000, 0x1234_5600, 0xffff_ff00];
        let mut b = KernelBuilder::new("t", [32, 1, 1], 32);
        let w = b.param("w", Scalar::U32, poot_kir::Access::Read);
        let zero = b.u32(0);
        let word = b.load(w, zero, 1);
        let mask = b.u32(0xff);
        let mut cases = Vec::new();
        for k in 0..4u32 {
            let s = b.u32(8 * k);
            let shifted = b.bin(BinOp::Shr, word, s);
            let byte = b.bin(BinOp::And, shifted, mask);
            for c in ors {
                let cv = b.u32(c);
                cases.push((byte, cv, c, k));
                cases.push((cv, byte, c, k));
            }
        }
        let s24 = b.u32(24);
        let top = b.bin(BinOp::Shr, word, s24);
        let c = b.u32(0x4B00_0000);
        cases.push((top, c, 0x4B00_0000, 3));
        let byte0 = b.bin(BinOp::And, word, mask);
        cases.push((byte0, c, 0x4B00_0000, 0));
        // Not selected: a constant with a low byte, a mask other than 0xff, a shift by 4, an
        // arithmetic shift by 24 without a mask, another operator, a byte alone.
        let low = b.u32(0x4B00_0001);
        let s0 = b.u32(0);
        let b0 = b.bin(BinOp::Shr, word, s0);
        let b0 = b.bin(BinOp::And, b0, mask);
        let m0f = b.u32(0x0f);
        let nib = b.bin(BinOp::And, word, m0f);
        let s4 = b.u32(4);
        let half = b.bin(BinOp::Shr, word, s4);
        let signed = b.bitcast(word, Scalar::I32);
        let stop = b.bin(BinOp::Shr, signed, s24);
        let ci = b.i32(0x4B00_0000);
        let rejected = [
            (BinOp::Or, b0, low),
            (BinOp::Or, nib, c),
            (BinOp::And, half, mask),
            (BinOp::Or, stop, ci),
            (BinOp::Xor, b0, c),
            (BinOp::And, b0, mask),
        ];
        // A byte placed at byte `at` (the mantissa codes' form), or'ed with constants whose
        // byte `at` is zero (selected) or not (rejected).
        let mut placed = Vec::new();
        for k in 0..4u32 {
            let s = b.u32(8 * k);
            let shifted = b.bin(BinOp::Shr, word, s);
            let byte = b.bin(BinOp::And, shifted, mask);
            for at in 1..4u32 {
                let up = b.u32(8 * at);
                let v = b.bin(BinOp::Shl, byte, up);
                for c in [
                    0x3F00_0000,
                    0x0000_0000,
                    0xff00_ffff,
                    0x00ff_00ff,
                    0x1234_5678,
                ] {
                    let cv = b.u32(c);
                    placed.push((k, at, c, v, cv));
                }
            }
        }
        let k = b.finish();
        let pats = Patterns::new(&k);
        for (x, y, c, byte) in cases {
            let p = pats
                .permute(BinOp::Or, x, y)
                .unwrap_or_else(|| panic!("byte {byte} | {c:#x} not selected"));
            assert_eq!(p.a, word);
            assert_eq!(pats.konst(p.b), Some(c));
            for &wv in &words {
                let want = ((wv >> (8 * byte)) & 0xff) | c;
                assert_eq!(
                    prmt(wv, c, p.selector),
                    want,
                    "{wv:#x} byte {byte} | {c:#x}"
                );
            }
        }
        for (op, x, y) in rejected {
            assert_eq!(pats.permute(op, x, y), None, "{op:?} {x} {y}");
        }
        for (byte, at, c, v, cv) in placed {
            let p = pats.permute(BinOp::Or, v, cv);
            if (c >> (8 * at)) & 0xff != 0 {
                assert_eq!(p, None, "byte {byte} at {at} | {c:#x}");
                continue;
            }
            let p = p.unwrap_or_else(|| panic!("byte {byte} at {at} | {c:#x} not selected"));
            assert_eq!(p.a, word);
            for &wv in &words {
                let want = (((wv >> (8 * byte)) & 0xff) << (8 * at)) | c;
                assert_eq!(prmt(wv, c, p.selector), want, "{wv:#x} byte {byte} at {at}");
            }
        }
    }
}
