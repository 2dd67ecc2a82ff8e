//! The lockstep interpreter: runs a [`Program`]'s work-groups, each instruction for all
//! threads of the work-group at once under an active mask.
//!
//! Invariants:
//! - A mask is a register slot of `0`/`1` per thread; the work-group's root mask is the
//!   all-ones slot. Pure operations compute every lane, active or not (they are total);
//!   loads, stores, atomics, traps, reductions, shuffles and loop-carried updates honour the
//!   mask. Lanes a masked load skips keep their previous register contents.
//! - Registers keep stale contents between work-groups and dispatches. This is unobservable:
//!   an active thread only ever reads values computed while it was active (structured SSA),
//!   reductions replace inactive lanes with the identity, and a shuffle whose source lane is
//!   inactive returns the reader's own value. So results depend on the inputs only, whatever
//!   ran before on the same register file.
//! - A faulting load, store or atomic has no effect; everything before it stays done.

use super::gather::{first_oob, gather};
use super::lanes::{self, comb, identity, map1, map3, masked_copy, split};
use super::memory::{Global, Sink, Write};
use super::program::{Comb, Fixed, ForOp, IfOp, Op, Program, Space};
use super::{Fault, INEXACT_MMA, OUT_OF_BOUNDS, internal};
use half::f16;
use half::slice::HalfFloatSliceExt;

/// A register file, shared memory and scratch for one work-group at a time.
pub(crate) struct State {
    regs: Vec<u32>,
    shared: Vec<u32>,
    cur: Vec<u32>,
    next: Vec<u32>,
    halves: Vec<f16>,
    floats: Vec<f32>,
}

impl State {
    /// A register file with the program's fixed values written.
    pub(crate) fn new(prog: &Program) -> State {
        let t = prog.threads;
        let mut regs = vec![0u32; prog.regs_len];
        let [wx, wy, _] = prog.workgroup.map(|d| (d as usize).max(1));
        let sg = prog.subgroup.max(1);
        for &(off, fixed) in &prog.fixed {
            let Some(lanes) = regs.get_mut(off..off.saturating_add(t)) else {
                continue;
            };
            for (i, x) in lanes.iter_mut().enumerate() {
                // Thread ids are < 1024, so the casts are exact.
                *x = match fixed {
                    Fixed::Const(bits) => bits,
                    Fixed::LocalX => (i % wx) as u32,
                    Fixed::LocalY => ((i / wx) % wy) as u32,
                    Fixed::Lane => (i % sg) as u32,
                    Fixed::Ones => 1,
                };
            }
        }
        State {
            regs,
            shared: vec![0; prog.shared_len],
            cur: vec![0; t],
            next: vec![0; t],
            halves: vec![f16::ZERO; t],
            floats: vec![0.0; t],
        }
    }
}

/// Runs work-groups `lo..hi` (linear ids: x fastest) of a dispatch.
pub(crate) fn run_groups<G: Global>(
    prog: &Program,
    st: &mut State,
    mem: &mut G,
    grid: [u32; 3],
    lo: u64,
    hi: u64,
) -> Result<(), Fault> {
    let [gx, gy, _] = grid.map(|d| (d as u64).max(1));
    for linear in lo..hi {
        let wg = [
            (linear % gx) as u32,
            ((linear / gx) % gy) as u32,
            (linear / gx / gy) as u32,
        ];
        st.shared.fill(0);
        for &(off, axis) in &prog.group_ids {
            let v = wg.get(axis).copied().unwrap_or(0);
            if let Some(lanes) = st.regs.get_mut(off..off.saturating_add(prog.threads)) {
                lanes.fill(v);
            }
        }
        let mut ex = Exec { prog, st, mem, wg };
        ex.block(&prog.body, prog.ones, true)?;
    }
    Ok(())
}

struct Exec<'a, G> {
    prog: &'a Program,
    st: &'a mut State,
    mem: &'a mut G,
    wg: [u32; 3],
}

impl<G: Global> Exec<'_, G> {
    fn internal(&self, what: &str) -> Fault {
        internal(self.prog, what)
    }

    fn block(&mut self, ops: &[Op], mask: usize, full: bool) -> Result<(), Fault> {
        let t = self.prog.threads;
        for op in ops {
            let done = match op {
                Op::Un { f, dst, a, n } => lanes::run_un(*f, &mut self.st.regs, *dst, *a, *n),
                Op::Bin { f, dst, a, b, n } => {
                    lanes::run_bin(*f, &mut self.st.regs, *dst, *a, *b, *n)
                }
                Op::Fma { dst, a, b, c, n } => {
                    lanes::run_fma(&mut self.st.regs, *dst, [*a, *b, *c], *n)
                }
                Op::Select {
                    dst,
                    cond,
                    a,
                    b,
                    comps,
                    cond_vec,
                } => (0..*comps).try_for_each(|c| {
                    let at = c.checked_mul(t)?;
                    let cond = if *cond_vec {
                        cond.checked_add(at)?
                    } else {
                        *cond
                    };
                    let ab = [cond, a.checked_add(at)?, b.checked_add(at)?];
                    map3(&mut self.st.regs, dst.checked_add(at)?, ab, t, |c, x, y| {
                        if c != 0 { x } else { y }
                    })
                }),
                Op::HalfToF32 { dst, a, high } => self.half(*dst, *a, *high),
                Op::Load {
                    space,
                    dst,
                    index,
                    comps,
                } => {
                    self.load(*space, *dst, *index, *comps, mask)?;
                    Some(())
                }
                Op::Store {
                    space,
                    index,
                    value,
                    comps,
                } => {
                    self.store(*space, *index, *value, *comps, mask)?;
                    Some(())
                }
                Op::Atomic {
                    f,
                    space,
                    index,
                    value,
                    old,
                } => {
                    self.atomic(*f, *space, *index, *value, *old, mask)?;
                    Some(())
                }
                Op::Prefetch {
                    space,
                    index,
                    count,
                } => {
                    self.prefetch(*space, *index, *count, mask)?;
                    Some(())
                }
                Op::Reduce { f, dst, a, comps } => self.reduce(*f, *dst, *a, *comps, mask),
                Op::Shuffle {
                    dst,
                    a,
                    mask: xor,
                    comps,
                } => self.shuffle(*dst, *a, *xor, *comps, mask),
                Op::Mma { dst, a, b, c } => {
                    self.mma(*dst, [a, b, c], mask)?;
                    Some(())
                }
                Op::Trap(code) => {
                    let m = self.st.regs.get(mask..mask.saturating_add(t));
                    let lane = if full {
                        Some(0)
                    } else {
                        m.and_then(|m| m.iter().position(|&x| x != 0))
                    };
                    if let Some(lane) = lane {
                        return Err(Fault {
                            kernel: self.prog.name.clone(),
                            code: *code,
                            detail: format!("trap {code} in {}", where_(self.prog, self.wg, lane)),
                        });
                    }
                    Some(())
                }
                Op::If(i) => {
                    self.if_(i, mask)?;
                    Some(())
                }
                Op::For(l) => {
                    self.for_(l, mask)?;
                    Some(())
                }
            };
            if done.is_none() {
                return Err(self.internal("a register range is outside the register file"));
            }
        }
        Ok(())
    }

    fn half(&mut self, dst: usize, a: usize, high: bool) -> Option<()> {
        let t = self.prog.threads;
        let State {
            regs,
            halves,
            floats,
            ..
        } = &mut *self.st;
        let (d, [a]) = split(regs, dst, t, [(a, t)])?;
        let shift = if high { 16 } else { 0 };
        for (h, &x) in halves.iter_mut().zip(a) {
            *h = f16::from_bits((x >> shift) as u16);
        }
        if halves.len() != floats.len() {
            return None;
        }
        // ok: equal lengths, checked just above (the only panic of `convert_to_f32_slice`).
        halves.convert_to_f32_slice(floats);
        for (d, &y) in d.iter_mut().zip(floats.iter()) {
            *d = y.to_bits();
        }
        Some(())
    }

    fn load(
        &mut self,
        space: Space,
        dst: usize,
        index: usize,
        comps: usize,
        mask: usize,
    ) -> Result<(), Fault> {
        let t = self.prog.threads;
        let n = comps.saturating_mul(t);
        let State { regs, shared, .. } = &mut *self.st;
        let buf: &[u32] = match space {
            Space::Param(p) => self.mem.read(p),
            Space::Shared(s) => self
                .prog
                .shared
                .get(s)
                .and_then(|&(o, l)| shared.get(o..o.checked_add(l)?)),
        }
        .ok_or_else(|| internal(self.prog, "a load's memory is missing"))?;
        let (d, [idx, m]) = split(regs, dst, n, [(index, t), (mask, t)])
            .ok_or_else(|| internal(self.prog, "a load's registers are out of range"))?;
        gather(d, idx, m, buf, comps).map_err(|lane| {
            let i = idx.get(lane).copied().unwrap_or(0);
            let o = Oob {
                what: "load",
                space,
                lane,
                index: i,
                comps,
                len: buf.len(),
            };
            oob(self.prog, self.wg, o)
        })
    }

    /// A prefetch reads nothing; an active lane whose range leaves the binding faults as a
    /// load there would.
    fn prefetch(
        &mut self,
        space: Space,
        index: usize,
        count: usize,
        mask: usize,
    ) -> Result<(), Fault> {
        let t = self.prog.threads;
        let len = match space {
            Space::Param(p) => self.mem.read(p).map(<[u32]>::len),
            Space::Shared(_) => None,
        }
        .ok_or_else(|| internal(self.prog, "a prefetch's memory is missing"))?;
        let [idx, n, m] = ranges(
            self.prog,
            &self.st.regs,
            [(index, t), (count, t), (mask, t)],
            "a prefetch",
        )?;
        let bad = idx.iter().zip(n).zip(m).position(|((&i, &n), &m)| {
            m != 0 && n > 0 && (i as usize).checked_add(n as usize).is_none_or(|e| e > len)
        });
        match bad {
            Some(lane) => Err(oob(
                self.prog,
                self.wg,
                Oob {
                    what: "prefetch",
                    space,
                    lane,
                    index: idx.get(lane).copied().unwrap_or(0),
                    comps: n.get(lane).map_or(0, |&c| c as usize),
                    len,
                },
            )),
            None => Ok(()),
        }
    }

    fn store(
        &mut self,
        space: Space,
        index: usize,
        value: usize,
        comps: usize,
        mask: usize,
    ) -> Result<(), Fault> {
        let t = self.prog.threads;
        let n = comps.saturating_mul(t);
        let State { regs, shared, .. } = &mut *self.st;
        let regs: &[u32] = regs;
        let [idx, m, vals] = ranges(
            self.prog,
            regs,
            [(index, t), (mask, t), (value, n)],
            "a store",
        )?;
        let sink = match space {
            Space::Param(p) => self.mem.sink(p),
            Space::Shared(s) => self
                .prog
                .shared
                .get(s)
                .and_then(|&(o, l)| shared.get_mut(o..o.checked_add(l)?))
                .map(Sink::Direct),
        };
        let sink = sink.ok_or_else(|| internal(self.prog, "a store's memory is missing"))?;
        let len = match &sink {
            Sink::Direct(b) => b.len(),
            Sink::Log { len, .. } => *len,
        };
        if let Some(lane) = first_oob(idx, m, comps, len) {
            let i = idx.get(lane).copied().unwrap_or(0);
            let o = Oob {
                what: "store",
                space,
                lane,
                index: i,
                comps,
                len,
            };
            return Err(oob(self.prog, self.wg, o));
        }
        let active = idx.iter().zip(m).enumerate().filter(|(_, (_, m))| **m != 0);
        match sink {
            Sink::Direct(buf) => {
                // ok (index arithmetic below): c < comps <= 4, lane < t <= 1024, and
                // `first_oob` found no active lane with i + comps > len.
                for (lane, (&i, _)) in active {
                    for c in 0..comps {
                        let v = vals.get(c * t + lane).copied().unwrap_or(0);
                        if let Some(w) = buf.get_mut(i as usize + c) {
                            *w = v;
                        }
                    }
                }
            }
            Sink::Log { log, param, .. } => {
                // ok: as above.
                for (lane, (&i, _)) in active {
                    for c in 0..comps {
                        let value = vals.get(c * t + lane).copied().unwrap_or(0);
                        let index = i as usize + c;
                        log.push(Write {
                            param,
                            index,
                            value,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn atomic(
        &mut self,
        f: Comb,
        space: Space,
        index: usize,
        value: usize,
        old: Option<usize>,
        mask: usize,
    ) -> Result<(), Fault> {
        let t = self.prog.threads;
        let State {
            regs: file, shared, ..
        } = &mut *self.st;
        let mut olds = vec![0u32; if old.is_some() { t } else { 0 }];
        let regs: &[u32] = file;
        let [idx, m, vals] = ranges(
            self.prog,
            regs,
            [(index, t), (mask, t), (value, t)],
            "an atomic",
        )?;
        let buf = match space {
            Space::Param(p) => match self.mem.sink(p) {
                Some(Sink::Direct(b)) => Some(b),
                _ => None,
            },
            Space::Shared(s) => self
                .prog
                .shared
                .get(s)
                .and_then(|&(o, l)| shared.get_mut(o..o.checked_add(l)?)),
        };
        let buf = buf.ok_or_else(|| internal(self.prog, "an atomic's memory is missing"))?;
        if let Some(lane) = first_oob(idx, m, 1, buf.len()) {
            let i = idx.get(lane).copied().unwrap_or(0);
            let o = Oob {
                what: "atomic",
                space,
                lane,
                index: i,
                comps: 1,
                len: buf.len(),
            };
            return Err(oob(self.prog, self.wg, o));
        }
        for (lane, ((&i, &m), &v)) in idx.iter().zip(m).zip(vals).enumerate() {
            if m != 0
                && let Some(w) = buf.get_mut(i as usize)
            {
                if let Some(o) = olds.get_mut(lane) {
                    *o = *w;
                }
                *w = comb(f, *w, v);
            }
        }
        if let Some(o) = old {
            let dst = file
                .get_mut(o..o.saturating_add(t))
                .ok_or_else(|| internal(self.prog, "an atomic's registers are out of range"))?;
            dst.copy_from_slice(&olds);
        }
        Ok(())
    }

    /// A butterfly over lane xor `w/2, ..., 2, 1` within each subgroup of width `w`, inactive
    /// lanes contributing the identity; every lane gets its own butterfly's result.
    fn reduce(&mut self, f: Comb, dst: usize, a: usize, comps: usize, mask: usize) -> Option<()> {
        let t = self.prog.threads;
        let w = self.prog.subgroup.max(1);
        let id = identity(f);
        let State {
            regs, cur, next, ..
        } = &mut *self.st;
        for c in 0..comps {
            let at = c.checked_mul(t)?;
            let (d, [a, m]) = split(
                regs,
                dst.checked_add(at)?,
                t,
                [(a.checked_add(at)?, t), (mask, t)],
            )?;
            for ((x, &y), &m) in cur.iter_mut().zip(a).zip(m) {
                *x = if m != 0 { y } else { id };
            }
            lanes::butterfly(f, cur, next, w);
            let r = cur.get(..t).filter(|r| r.len() == d.len())?;
            d.copy_from_slice(r); // ok: equal lengths, checked just above
        }
        Some(())
    }

    /// Lane `l` reads lane `l ^ xor` of its subgroup, or keeps its own value when that lane
    /// is outside the subgroup or inactive.
    fn shuffle(&mut self, dst: usize, a: usize, xor: u32, comps: usize, mask: usize) -> Option<()> {
        let t = self.prog.threads;
        let w = self.prog.subgroup.max(1);
        let regs = &mut self.st.regs;
        for c in 0..comps {
            let at = c.checked_mul(t)?;
            let (d, [a, m]) = split(
                regs,
                dst.checked_add(at)?,
                t,
                [(a.checked_add(at)?, t), (mask, t)],
            )?;
            for (i, x) in d.iter_mut().enumerate() {
                let own = a.get(i).copied().unwrap_or(0);
                let lane = i % w;
                let src_lane = (lane as u64) ^ (xor as u64);
                let src = (i - lane) as u64 + src_lane; // ok: lane = i % w <= i
                *x = if src_lane < w as u64 && m.get(src as usize) == Some(&1) {
                    a.get(src as usize).copied().unwrap_or(own)
                } else {
                    own
                };
            }
        }
        Some(())
    }

    /// Each subgroup with an active lane multiplies its 16x8 and 8x8 fragments (`Expr::Mma`'s
    /// layout) and adds C, every element's products in `k` order, each sum rounded; a subgroup
    /// with an inactive lane or an operand of A or B that is not exact in tf32 faults
    /// ([`INEXACT_MMA`]).
    fn mma(&mut self, dst: usize, [a, b, c]: [&[usize]; 3], mask: usize) -> Result<(), Fault> {
        const W: usize = 32;
        let t = self.prog.threads;
        let bad = || internal(self.prog, "an mma operand outside the register file");
        let regs = &self.st.regs;
        let comp = |base: usize, i: usize, lane: usize| {
            let at = base.checked_add(i.checked_mul(t)?)?.checked_add(lane)?;
            regs.get(at).copied()
        };
        let reg = |r: &[usize], i: usize, lane: usize| comp(*r.get(i)?, 0, lane);
        let mut out = Vec::with_capacity(t);
        for s in 0..t / W {
            let lanes = s * W..(s + 1) * W;
            let active = lanes
                .clone()
                .filter(|&l| comp(mask, 0, l) == Some(1))
                .count();
            if active == 0 {
                continue;
            }
            if active != W {
                return Err(self.mma_fault(s * W, "an mma with inactive lanes".into()));
            }
            let (mut am, mut bm, mut cm) = ([[0f32; 8]; 16], [[0f32; 8]; 8], [[0f32; 8]; 16]);
            for l in 0..W {
                let (g, q) = (l / 4, l % 4);
                let lane = s * W + l;
                let at = |r, i| reg(r, i, lane).ok_or_else(bad);
                for (i, (r, k)) in [(g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4)]
                    .into_iter()
                    .enumerate()
                {
                    am[r][k] = self.tf32(at(a, i)?, lane, "a")?;
                }
                for (i, k) in [q, q + 4].into_iter().enumerate() {
                    bm[k][g] = self.tf32(at(b, i)?, lane, "b")?;
                }
                for (i, (r, n)) in Self::mma_d(g, q).into_iter().enumerate() {
                    cm[r][n] = f32::from_bits(at(c, i)?);
                }
            }
            for l in 0..W {
                for (i, (r, n)) in Self::mma_d(l / 4, l % 4).into_iter().enumerate() {
                    let d = (0..8).fold(cm[r][n], |acc, k| acc + am[r][k] * bm[k][n]);
                    out.push((dst + i * t + s * W + l, d.to_bits()));
                }
            }
        }
        for (at, bits) in out {
            *self.st.regs.get_mut(at).ok_or_else(bad)? = bits;
        }
        Ok(())
    }

    /// The D (and C) elements lane `(g, q)` holds.
    fn mma_d(g: usize, q: usize) -> [(usize, usize); 4] {
        [
            (g, 2 * q),
            (g, 2 * q + 1),
            (g + 8, 2 * q),
            (g + 8, 2 * q + 1),
        ]
    }

    /// `bits` as f32, or a fault when it is not exact in tf32.
    fn tf32(&self, bits: u32, lane: usize, what: &str) -> Result<f32, Fault> {
        if bits & 0x1FFF == 0 {
            Ok(f32::from_bits(bits))
        } else {
            let v = f32::from_bits(bits);
            Err(self.mma_fault(
                lane,
                format!("mma operand {what} {v:e} is not exact in tf32"),
            ))
        }
    }

    fn mma_fault(&self, lane: usize, what: String) -> Fault {
        Fault {
            kernel: self.prog.name.clone(),
            code: INEXACT_MMA,
            detail: format!("{what} in {}", where_(self.prog, self.wg, lane)),
        }
    }

    fn if_(&mut self, i: &IfOp, mask: usize) -> Result<(), Fault> {
        let t = self.prog.threads;
        let regs = &mut self.st.regs;
        let mut counts = [0usize; 2];
        for (slot, want, n) in [(i.then_mask, 1u32, 0usize), (i.else_mask, 0, 1)] {
            let (d, [c, m]) = split(regs, slot, t, [(i.cond, t), (mask, t)])
                .ok_or_else(|| internal(self.prog, "an if's registers are out of range"))?;
            let mut k = 0;
            for ((d, &c), &m) in d.iter_mut().zip(c).zip(m) {
                *d = (m != 0 && (c != 0) as u32 == want) as u32;
                k += *d as usize;
            }
            if let Some(x) = counts.get_mut(n) {
                *x = k;
            }
        }
        let [nt, ne] = counts;
        if nt > 0 {
            self.block(&i.then, i.then_mask, nt == t)?;
        }
        if ne > 0 {
            self.block(&i.els, i.else_mask, ne == t)?;
        }
        for &(dst, a, b, n) in &i.merges {
            let merged = (0..n / t.max(1)).try_for_each(|c| {
                let at = c.checked_mul(t)?;
                let ab = [i.cond, a.checked_add(at)?, b.checked_add(at)?];
                map3(&mut self.st.regs, dst.checked_add(at)?, ab, t, |c, x, y| {
                    if c != 0 { x } else { y }
                })
            });
            merged.ok_or_else(|| self.internal("an if's results are out of range"))?;
        }
        Ok(())
    }

    fn for_(&mut self, l: &ForOp, parent: usize) -> Result<(), Fault> {
        let t = self.prog.threads;
        let bad = |p: &Program| internal(p, "a loop's registers are out of range");
        let copy = |x| x;
        let regs = &mut self.st.regs;
        if l.mask != l.var.saturating_add(t) {
            return Err(bad(self.prog));
        }
        map1(regs, l.var, l.start, t, copy).ok_or_else(|| bad(self.prog))?;
        for c in &l.carried {
            map1(regs, c.param, c.init, c.n, copy).ok_or_else(|| bad(self.prog))?;
        }
        // The threads of the parent mask with var < end.
        // ok (`2 * t`, here and below): t <= 1024.
        let (vm, [e, p]) =
            split(regs, l.var, 2 * t, [(l.end, t), (parent, t)]).ok_or_else(|| bad(self.prog))?;
        let (v, m) = vm.split_at_mut(t.min(vm.len()));
        let mut k = 0u32;
        for (((m, &v), &e), &p) in m.iter_mut().zip(v.iter()).zip(e).zip(p) {
            *m = p & (v < e) as u32;
            k += *m;
        }
        while k > 0 {
            let full = k as usize == t;
            self.block(&l.body, l.mask, full)?;
            let regs = &mut self.st.regs;
            let ok = l.carried.iter().try_for_each(|c| {
                if l.staged {
                    map1(regs, c.stage, c.yielded, c.n, copy)
                } else if full {
                    map1(regs, c.param, c.yielded, c.n, copy)
                } else {
                    masked_copy(regs, c.param, c.yielded, l.mask, c.n, t)
                }
            });
            ok.ok_or_else(|| bad(self.prog))?;
            if l.staged {
                let ok = l.carried.iter().try_for_each(|c| {
                    if full {
                        map1(regs, c.param, c.stage, c.n, copy)
                    } else {
                        masked_copy(regs, c.param, c.stage, l.mask, c.n, t)
                    }
                });
                ok.ok_or_else(|| bad(self.prog))?;
            }
            // Advance the iterating threads; a thread stops when var + step would overflow
            // (as `step_by` does) or reaches `end`.
            let step = l.step;
            let (vm, [e]) =
                split(regs, l.var, 2 * t, [(l.end, t)]).ok_or_else(|| bad(self.prog))?;
            let (v, m) = vm.split_at_mut(t.min(vm.len()));
            k = 0;
            for ((v, m), &e) in v.iter_mut().zip(m.iter_mut()).zip(e) {
                let next = v.wrapping_add(step);
                let go = *m & (next > *v) as u32 & (next < e) as u32;
                *v = if *m != 0 { next } else { *v };
                *m = go;
                k += go;
            }
        }
        let regs = &mut self.st.regs;
        for c in &l.carried {
            map1(regs, c.result, c.param, c.n, copy).ok_or_else(|| bad(self.prog))?;
        }
        Ok(())
    }
}

/// The register ranges `[start, start + len)` of `regs`, one for each of `want`; an internal
/// fault naming `what` (an instruction) when one lies outside the register file.
fn ranges<'a, const N: usize>(
    prog: &Program,
    regs: &'a [u32],
    want: [(usize, usize); N],
    what: &str,
) -> Result<[&'a [u32]; N], Fault> {
    let mut out: [&[u32]; N] = [&[]; N];
    for (o, (start, len)) in out.iter_mut().zip(want) {
        *o = regs
            .get(start..start.saturating_add(len))
            .ok_or_else(|| internal(prog, &format!("{what}'s registers are out of range")))?;
    }
    Ok(out)
}

/// Where a thread is, for fault details.
fn where_(prog: &Program, wg: [u32; 3], lane: usize) -> String {
    let [wx, wy, _] = prog.workgroup.map(|d| (d as usize).max(1));
    format!(
        "thread [{}, {}, {}] of work-group {wg:?}",
        lane % wx,
        (lane / wx) % wy,
        lane / wx / wy,
    )
}

fn space_name(prog: &Program, space: Space) -> String {
    match space {
        Space::Param(p) => {
            let name = prog.params.get(p).map_or("?", |(n, _)| n.as_str());
            format!("param {p} `{name}`")
        }
        Space::Shared(s) => format!("shared array {s}"),
    }
}

/// An access of `comps` elements at `index` by thread `lane` that leaves `len` elements.
struct Oob {
    what: &'static str,
    space: Space,
    lane: usize,
    index: u32,
    comps: usize,
    len: usize,
}

fn oob(prog: &Program, wg: [u32; 3], o: Oob) -> Fault {
    let x = if o.comps > 1 {
        format!(" (x{})", o.comps)
    } else {
        String::new()
    };
    // A flagged access that fits its binding was flagged for alignment (loads and stores:
    // `first_oob`); prefetches are flagged only past the end.
    let fits = (o.index as usize)
        .checked_add(o.comps)
        .is_some_and(|end| end <= o.len);
    let what = if fits {
        format!("is not aligned to {} elements", o.comps)
    } else {
        format!("is outside its {} elements", o.len)
    };
    Fault {
        kernel: prog.name.clone(),
        code: OUT_OF_BOUNDS,
        detail: format!(
            "{} of {} at index {}{x} {what}, in {}",
            o.what,
            space_name(prog, o.space),
            o.index,
            where_(prog, wg, o.lane)
        ),
    }
}
