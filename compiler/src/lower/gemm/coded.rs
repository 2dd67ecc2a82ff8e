//! The coded products of the tensor-core form (`mma_form` where `k` is split and every
//! weight of the tile is a block format): the staged weights are the units' exact integer
//! codes (`unit_codes`), exact in tf32, so each product `x c` is two exact tf32 products
//! `lo(x) c + hi(x) c` (within `2^-20 |x c|` of it) instead of the three a decoded weight
//! takes, and the sums of each run of codes that share a scale are folded into the outputs
//! with the run's scale and min: `sum(x w) = sum over runs (scale * sum(x c) + min *
//! sum(x))`.
//!
//! Invariants: the loader threads stage each unit's `CODE_FIELDS` (the scale of its first run,
//! of its second, its min; zero where the format has none) for every column of every matmul
//! and unit of the step; where a weight has a min, the eight threads that stage a row's 32
//! inputs of a unit add them in a butterfly (all eight hold the same bits) and the first
//! stores the row's sum for the unit. A run's sum is an `mma` chain from zero over its blocks
//! of 8 `k` (the low product first), never across steps (a step is whole units); the folds
//! run in `k` order, the scale's before the min's, so the outputs do not depend on scheduling.

use super::forms::Frags;
use super::{TN, Tile, UNIT, Weight};
use crate::lower::expr::Emit;
use poot_ir::DType;
use poot_kir::{CmpOp, Expr, Mem, Scalar, Val};

/// Values staged per unit of a column: the scales of its two runs and its min.
pub(super) const CODE_FIELDS: usize = 3;

/// The coded form's shared arrays and what each matmul's codes need.
pub(super) struct Coded {
    /// Each (matmul `mi`, unit `q`, field `f`, column `c`) of the step at
    /// `((mi * u + q) * CODE_FIELDS + f) * TN + c`.
    fields: Mem,
    /// Each (unit `q`, row `r`) of the step's rows' sums of inputs at `q * tm + r`, where a
    /// weight has a min.
    sums: Option<Mem>,
    /// Each matmul's run (weights sharing a scale: 16 for Q6_K, else 32) and whether it has
    /// a min (Q4_1, Q4_K).
    runs: Vec<(usize, bool)>,
    /// Rows of the tile, units of a step.
    tm: usize,
    u: usize,
    /// Where a loader thread's fields go in `fields` (field `f` at `TN * f` more), and
    /// whether the thread stores its rows' sums (the first of each row's eight).
    fdst: Val,
    lead: Val,
}

/// The run and min of a block format's codes (`Coded::runs`); none for plain weights.
fn run_of(dt: DType) -> Option<(usize, bool)> {
    match dt {
        DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => Some((UNIT, false)),
        DType::Q4_1 | DType::Q4K => Some((UNIT, true)),
        DType::Q6K => Some((UNIT / 2, false)),
        _ => None,
    }
}

/// The coded form of a tile of `tm` rows, `u` units a step and the matmuls of `ws`, if every
/// weight is a block format; `mi`, `c_in` and `wu` are the thread's unit to stage (matmul,
/// column and unit of the step), `tc` its place among its row's eight.
pub(super) fn coded(
    e: &mut Emit,
    ws: &[Weight],
    [tm, u]: [usize; 2],
    [mi, c_in, wu, tc]: [Val; 4],
) -> Option<Coded> {
    let runs = ws.iter().map(|w| run_of(w.2)).collect::<Option<Vec<_>>>()?;
    let fields =
        e.kb.shared(Scalar::F32, (ws.len() * u * CODE_FIELDS * TN) as u32);
    let sums = runs
        .iter()
        .any(|r| r.1)
        .then(|| e.kb.shared(Scalar::F32, (tm * u) as u32));
    let per_mm = e.u(u * CODE_FIELDS * TN);
    let per_unit = e.u(CODE_FIELDS * TN);
    let m = e.kb.mul(mi, per_mm);
    let q = e.kb.mul(wu, per_unit);
    let fdst = e.kb.add(m, q);
    let fdst = e.kb.add(fdst, c_in);
    let zero = e.u(0);
    let lead = e.kb.cmp(CmpOp::Eq, tc, zero);
    Some(Coded {
        fields,
        sums,
        runs,
        tm,
        u,
        fdst,
        lead,
    })
}

impl Coded {
    /// Stores a loader thread's unit's fields (`CODE_FIELDS` values).
    pub(super) fn stage_fields(&self, e: &mut Emit, f: &[Val]) {
        for (i, &v) in f.iter().enumerate() {
            let o = e.u(TN * i);
            let at = e.kb.add(self.fdst, o);
            e.kb.store(self.fields, at, v);
        }
    }

    /// Adds the thread's four staged inputs `y` of row `tr + 16 i` and unit `q` of the step
    /// into the row's sum for the unit (a butterfly over the row's eight threads), which the
    /// first of them stores; nothing where no weight has a min.
    pub(super) fn stage_sums(&self, e: &mut Emit, t: &Tile, [i, q]: [usize; 2], y: Val) {
        let Some(sums) = self.sums else {
            return;
        };
        let mut s = e.kb.extract(y, 0);
        for c in 1..4 {
            let x = e.kb.extract(y, c);
            s = e.kb.add(s, x);
        }
        for mask in [1, 2, 4] {
            let o = e.kb.expr(Expr::ShuffleXor(s, mask));
            s = e.kb.add(s, o);
        }
        let o = e.u(q * self.tm + 16 * i);
        let at = e.kb.add(t.tr, o);
        e.kb.begin();
        e.kb.store(sums, at, s);
        let body = e.kb.end();
        e.kb.finish_if(self.lead, body, vec![], vec![], vec![]);
    }

    /// One step's products into the outputs' sums `next` (at `(mi * nb + b) * 4 + i` for
    /// matmul `mi`, block `b` and element `i` of D): each run's `mma` chain over its blocks
    /// of 8 `k`, then the fold (`fold`).
    pub(super) fn products(&self, e: &mut Emit, t: &Tile, f: &Frags, next: &mut [Val]) {
        let nb = f.blocks.len();
        let zero = e.kb.f32(0.0);
        let mut runs = vec![[zero; 4]; t.nm * nb];
        for c8 in 0..UNIT * self.u / 8 {
            let kk = 8 * c8;
            let [a_hi, a_lo] = f.a(e, t, c8);
            for (mi, &(run, _)) in self.runs.iter().enumerate() {
                for b in 0..nb {
                    let bv = [0, 4].map(|dk| f.b(e, t, [b, mi, kk + dk]));
                    let mut c = if kk % run == 0 {
                        [zero; 4]
                    } else {
                        runs[mi * nb + b]
                    };
                    for a in [a_lo, a_hi] {
                        let r = e.kb.expr(Expr::Mma { a, b: bv, c });
                        c = std::array::from_fn(|i| e.kb.extract(r, i as u8));
                    }
                    runs[mi * nb + b] = c;
                }
                if (kk + 8) % run == 0 {
                    self.fold(e, f, [mi, kk / UNIT, kk % UNIT / run], &runs, next);
                }
            }
        }
    }

    /// Folds matmul `mi`'s run sums `runs` (of run `r` of unit `q` of the step) into `next`:
    /// each output adds its column's scale times its run sum, then (with a min) its column's
    /// min times its row's sum of the unit's inputs.
    fn fold(
        &self,
        e: &mut Emit,
        f: &Frags,
        [mi, q, r]: [usize; 3],
        runs: &[[Val; 4]],
        next: &mut [Val],
    ) {
        let nb = f.blocks.len();
        let has_min = self.runs[mi].1;
        let sums = match (self.sums, has_min) {
            (Some(sums), true) => Some(f.rows.map(|row| {
                let o = e.u(q * self.tm);
                let at = e.kb.add(row, o);
                e.kb.load(sums, at, 1)
            })),
            _ => None,
        };
        let field = |e: &mut Emit, fi: usize, b: usize| {
            let o = e.u(((mi * self.u + q) * CODE_FIELDS + fi) * TN);
            let at = e.kb.add(f.blocks[b], o);
            let at = e.kb.add(at, f.q2);
            let v = e.kb.load(self.fields, at, 2);
            [0, 1].map(|j| e.kb.extract(v, j))
        };
        for b in 0..nb {
            let scale = field(e, r, b);
            let min = sums.map(|_| field(e, 2, b));
            for i in 0..4 {
                let at = (mi * nb + b) * 4 + i;
                next[at] = e.kb.fma(scale[i % 2], runs[mi * nb + b][i], next[at]);
                if let (Some(min), Some(s)) = (min, sums) {
                    next[at] = e.kb.fma(min[i % 2], s[i / 2], next[at]);
                }
            }
        }
    }
}
