//! The tiled matrix multiply for matmuls of many input rows (prefill chunks): each
//! work-group computes a tile of `TM * rm` rows by `TN` columns (of each of its one or two
//! matmuls; `rm` rows per thread, `rows_per_thread`), stepping through `k` by `u` units of 32
//! weights (`step_units`): the step's inputs and dequantized weights go through shared
//! memory, so every input and weight element is loaded once per tile instead of once per
//! output column or row. Every thread issues the loads of its step's weight units (outside
//! any branch, so they leave with the input loads); the loading threads then decode theirs.
//!
//! Invariants: thread `t` loads input rows `t / 8 + 16 * i` (`i < rm`), the vectors of 4
//! inputs at `4 * (t % 8) + 32 * q` (`q < u`) of the step (adjacent threads read adjacent
//! vectors), and stores them as they are, rows kept whole (`xt`, row stride `32u + 4`, so a
//! subgroup's stores and its loads of four rows, or of a tensor-core fragment, fall in
//! distinct banks); threads below `TN * u * nm` decode one unit of weights each (matmul
//! `t / (TN * u)`, column `t % (TN * u) / u`, unit `t % u` of the step, so adjacent threads
//! read a column's adjacent units; every thread loads that column's unit of each matmul, the
//! others' loads unused), stored transposed (`wt`, one row of `w_row` floats a `k`, units
//! `unit_pad` floats apart). Tiles of 32 or 64 rows with enough steps a part (`form`) have
//! two forms (`Inst::Matrix`): with tensor cores each subgroup computes 16-row blocks of the
//! tile (`mma_form`; where every weight is a block format, from the units' exact codes, each
//! run's sum folded with its scale and min, `coded`); without, every thread computes the rows
//! it stages, columns
//! `2 * (t % 8)` and the next, of each matmul, each output summing its products in `k` order
//! (`fma_form`). An RMS norm in the prologue multiplies each input by its norm weight before
//! the sum and the row's `1 / sqrt(mean(x0^2) + eps)` after it (the row's eight loading
//! threads add their squares in a butterfly, so all hold the same bits). Barriers sit
//! outside any branch (or in one uniform over the work-group); rows and columns past the
//! matmul's edge load clamped indices and store nothing. Where the tiles are few, `k`'s steps are split over
//! `group_id.z` (`k_splits`): each part stores its partial sums, and the last part of a tile
//! to finish adds them in part order (see `split_finish`).
//!
//! This module plans and stages the tiles; `forms` holds the two forms' products, `coded` the
//! tensor-core form's products of coded weights, and `split` the end of a split `k`.

mod coded;
mod forms;
mod split;

use super::expr::Emit;
use super::kernels::{Launch, args, inv_rms, launch, store};
use super::matmul::{Operands, Weight, operands};
use super::place::{Place, Placement};
use super::quant::{unit, unit_codes};
use crate::Result;
use coded::{CODE_FIELDS, Coded, coded};
use forms::{fma_form, mma_form};
use poot_ir::{Graph, Op, Value};
use poot_kir::{Access, BinOp, CmpOp, Inst, Mem, Scalar, Special, Val};
use split::split_finish;

/// Input rows from which a matmul runs as tiles; fewer (decode steps) use the GEMV template.
pub const TILE_MIN_ROWS: usize = 16;
/// Threads of a tiled work-group.
pub const THREADS: usize = 128;
/// Rows per tile per row a thread computes (a thread computes rows `t / 8 + 16 * i`).
const TM: usize = 16;
/// The most shared memory a tiled work-group's step uses, in bytes: with the rows' squares
/// of the tensor-core form (`TM * 4` floats) and a subgroup fallback's scratch (a word a
/// thread), a tile stays within the SPIR-V targets' 32 KiB. From 24 KiB, SmolLM2's gate/up
/// (`k` of 18 units) takes two units a step instead of one; on the H100 (`poot bench
/// --steps 50`, twice each; BENCHMARKS.md, thirty-second session) its 256-token chunk went
/// from 2964-2981 to 2667-2679 us (gate/up 1053 to 740 us a chunk), 128 tokens from
/// 2026-2039 to 1974-2000 and 64 from 1570-1587 to 1529-1542; Qwen2.5-0.5B's (`k` of 28
/// units) 256-, 128- and 64-token chunks from 7424-7430, 4497-4616 and 2676-2685 us to
/// 6520-6529, 3772-3773 and 2260. 46 KiB (CUDA only) took SmolLM2's 256-token chunk to
/// 2572-2575 but its 64-token chunk to 1801-1820.
const MAX_SHARED: usize = 30 * 1024;

const _: () = assert!(MAX_SHARED + 4 * (TM * 4 + THREADS) <= 32 * 1024);
/// Columns per tile, of each matmul.
const TN: usize = 16;
/// Weights of a unit (a block of every block format, or 32 plain floats).
const UNIT: usize = 32;
/// The most units per step of `k`.
const MAX_STEP_UNITS: usize = 4;
/// Work-groups a tiled matmul aims for, by the rows a thread computes: where the tiles
/// running side by side (see `side_by_side`) are fewer than half as many, `k` is split over
/// `group_id.z` until they are this many, so a few rows do not run as a few long,
/// latency-bound work-groups. A split dispatch counts its parts in `Buf::Counters`; merged
/// with its neighbours (`merge`), each counts in words of its own. On the H200 (CUDA, `poot
/// bench`, us a chunk; BENCHMARKS.md, twenty-fourth session), with the split q/k/v merged,
/// aiming for 264 (two per SM), 396 and 528 work-groups took SmolLM2's 64-token chunk (four
/// rows a thread) 2092-2105, 1934-1940 and 2019-2022, its 16-token chunk (one row a thread)
/// 1169-1176, 1110-1111 and 1053-1056: a thread with fewer rows has less work to split. For
/// four rows, 330, 396 and 462 then took SmolLM2's 64-token chunk 1957-1971, 1930-1955 and
/// 1894-1903, and 396 and 462 Qwen2.5-0.5B's 4019-4025 and 3897-3906. Two rows a thread (32 to
/// 63 rows) take the one-row target, not measured apart.
fn target_groups(rows_per_thread: usize) -> usize {
    if rows_per_thread >= 4 { 462 } else { 528 }
}

const _: () = assert!(THREADS == 8 * TM && TN == 2 * 8);

/// Rows each thread computes for a matmul of `rows` input rows: four (a 64-row tile) for a
/// 64-token chunk, so each weight loaded from shared memory serves four products. On the
/// H200 (SmolLM2, `poot bench --steps 50`, twice each) its 64-token chunk went from 2911.9
/// and 2901.7 us to 2456.8 and 2455.9 on CUDA, from 3631.7 and 3642.3 to 3473.4 and 3489.8
/// on Vulkan.
fn rows_per_thread(rows: usize) -> usize {
    match rows {
        64.. => 4,
        32.. => 2,
        _ => 1,
    }
}

/// Whether matmul `mm` runs as tiles: enough input rows, and rows of whole units.
pub fn applies(g: &Graph, mm: Value) -> bool {
    let n = &g.nodes[mm];
    let (x, w) = (n.args[0], n.args[1]);
    let k = g.ty(w).shape.0[1];
    k.is_multiple_of(UNIT) && g.ty(x).shape.numel() / k >= TILE_MIN_ROWS
}

/// Units per step of `k`: the most, up to `MAX_STEP_UNITS`, that divide the row's units and
/// keep a step's arrays (`step_arrays`) of `tm` rows and `nm` matmuls within `MAX_SHARED`, so
/// a long row takes few steps (each waits for its loads about once).
fn step_units(k: usize, tm: usize, nm: usize, mma: bool) -> usize {
    (1..=MAX_STEP_UNITS)
        .rev()
        .find(|&u| {
            let [xt, wt, codes] = step_arrays(tm, nm, mma, u);
            (k / UNIT).is_multiple_of(u) && 4 * (xt + wt + codes) <= MAX_SHARED
        })
        .unwrap_or(1)
}

/// Floats of a step's shared arrays in `gemm`: the inputs `xt` (`tm` rows of `32u`, each
/// padded by 4), the decoded weights `wt` (`w_at`'s layout), and where the tile has a
/// tensor-core form the coded form's units' scales and mins and rows' sums (`Coded`; counted
/// whether or not the weights are coded, so a tile's step does not depend on its dtypes).
fn step_arrays(tm: usize, nm: usize, mma: bool, u: usize) -> [usize; 3] {
    let tk = UNIT * u;
    let codes = if mma {
        nm * u * CODE_FIELDS * TN + tm * u
    } else {
        0
    };
    [tm * (tk + 4), w_at(tk - 1, nm, mma, u) + TN * nm, codes]
}

/// Floats between the weights of two units in `wt`: a subgroup's loaders store `32 / u`
/// columns of each of `u` units, so units `pad` apart put each store of a subgroup in a bank
/// of its own (even, so the products' pairs of columns stay 8-byte aligned).
fn unit_pad(u: usize) -> usize {
    (UNIT / u) & !1
}

/// Tiles of matmul `mm`.
fn tiles(g: &Graph, mm: Value) -> usize {
    let n = &g.nodes[mm];
    let wd = &g.ty(n.args[1]).shape.0;
    let rows = g.ty(n.args[0]).shape.numel() / wd[1];
    wd[0].div_ceil(TN) * rows.div_ceil(TM * rows_per_thread(rows))
}

/// Tiles of the dispatches that run side by side with the kernel of `mms` (one or two
/// matmuls of one input): its own, and those of the other tiled matmuls of that input with a
/// kernel of their own (a q/k/v's three, which `merge` runs as one dispatch).
pub fn side_by_side(g: &Graph, pl: &Placement, mms: &[Value]) -> usize {
    let x = g.nodes[mms[0]].args[0];
    let others: usize = g
        .nodes
        .iter()
        .filter(|&(m, n)| {
            n.op == Op::MatMul
                && n.args[0] == x
                && !mms.contains(&m)
                && pl.place[m] == Place::Buffer
                && applies(g, m)
        })
        .map(|(m, _)| tiles(g, m))
        .sum();
    tiles(g, mms[0]) + others
}

/// Parts `k`'s `steps` are split into where `groups` tiles of `rm` rows a thread run side by
/// side (see `target_groups`).
fn k_splits(steps: usize, groups: usize, rm: usize) -> usize {
    let target = target_groups(rm);
    if 2 * groups >= target {
        1
    } else {
        target.div_ceil(groups).clamp(1, steps.max(1))
    }
}

/// How a tiled matmul's kernel computes (`Dispatch::tiles`), for reports and for tests that
/// must know which form a shape reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileForm {
    /// Rows of a tile (16 times the rows a thread computes).
    pub rows: usize,
    /// Parts `k`'s steps are split into (over `group_id.z`).
    pub k_parts: usize,
    /// How the products are computed.
    pub products: Products,
}

/// The products of a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Products {
    /// Multiply-adds on every target (`fma_form`).
    Fma,
    /// Tensor cores where the target has them, multiply-adds elsewhere (`Inst::Matrix`);
    /// `coded`: from the units' exact codes (`coded`) rather than decoded weights.
    TensorCores {
        /// Whether the tensor-core form multiplies codes.
        coded: bool,
    },
}

/// How a tiled matmul runs: whether its tiles have the tensor-core form, the units of a step,
/// and the parts `k`'s steps are split into.
struct Form {
    mma: bool,
    u: usize,
    ks: usize,
}

/// The form of a matmul of `rows` input rows, `k` and `nm` matmuls, with `side` tiles side by
/// side. Tiles of 32 or 64 rows (two or four 16-row blocks for the four subgroups) take the
/// tensor-core form unless `k` is split into parts of less than one and a half steps: such a
/// part pays the form's fixed costs (three chains to start and add, the rows' squares
/// through shared memory) for about one step's products. On the H100 (`poot bench
/// --profile`, 64-token chunks, us a chunk; BENCHMARKS.md, twenty-eighth session), without
/// and with tensor cores: SmolLM2's q/k/v (1.1 steps a part) 242.6 and 272.8, its o (1.0)
/// 220.5 and 271.6, its down (1.8) 384.3 and 324.3, its gate/up (3.6) 567.0 and 553.6;
/// Qwen2.5-0.5B's gate/up (28) 783.4 + 767.1 and 674.7 + 666.8, its `gemm_19` (o or down, 1.6
/// and 8.4) 349.0 and 276.1.
fn form(k: usize, rows: usize, nm: usize, side: usize) -> Form {
    let rm = rows_per_thread(rows);
    let at = |mma| {
        let u = step_units(k, TM * rm, nm, mma);
        let ks = k_splits(k / (UNIT * u), side, rm);
        Form { mma, u, ks }
    };
    let m = at(true);
    if rm >= 2 && (m.ks == 1 || 2 * (k / (UNIT * m.u)) >= 3 * m.ks) {
        m
    } else {
        at(false)
    }
}

/// Where one thread's outputs go, and what the epilogue needs to compute them.
struct Outputs<'a> {
    root: Value,
    mms: &'a [Value],
    out: Mem,
    /// The norm's epsilon and `k`, where the input is an RMS norm in the prologue.
    norm: Option<(f32, usize)>,
    /// Output row, the same clamped to the last row, and whether it exists.
    row: [Val; 3],
    /// The thread's first column, and the last column of the matmul.
    cols: [Val; 2],
    /// Whether this thread stores the row's partial sum of squares in a split `k` (one
    /// thread a row does).
    lead: Option<Val>,
    n: usize,
}

/// Scales the thread's sums by its row's norm (from the row's sum of squares `ssq`), runs
/// the epilogue and stores the outputs that exist.
fn finish(e: &mut Emit, o: &Outputs, sums: &[Val], ssq: Val) -> Result<()> {
    let mut sums = sums.to_vec();
    if let Some((eps, k)) = o.norm {
        let scale = inv_rms(e, ssq, k, eps);
        for s in &mut sums {
            *s = e.kb.mul(*s, scale);
        }
    }
    let root_ty = e.g.ty(o.root).clone();
    let [_, xrow, row_ok] = o.row;
    let [first, last_col] = o.cols;
    let nv = e.u(o.n);
    for j in 0..2 {
        let jv = e.u(j);
        let col = e.kb.add(first, jv);
        let ok = e.kb.cmp(CmpOp::Lt, col, nv);
        let ok = e.kb.bin(BinOp::And, ok, row_ok);
        let colc = e.kb.bin(BinOp::Min, col, last_col);
        let rn = e.kb.mul(xrow, nv);
        let at = e.kb.add(rn, colc);
        let y = if o.mms == [o.root] {
            sums[j]
        } else {
            for (i, &mm) in o.mms.iter().enumerate() {
                e.set_override(mm, sums[2 * i + j]);
            }
            let idx = e.unravel(&root_ty.shape.0, at);
            e.compute(o.root, &idx)?
        };
        e.when(ok, |e| {
            store(e, o.out, at, y, root_ty.dtype);
            Ok(())
        })?;
    }
    Ok(())
}

/// A unit of weights whose loads are issued: the statements that decode it, and its 32
/// weights once they have run.
type Decode = (Vec<Inst>, Vec<Val>);

/// Issues the loads of unit `unit` of column `col` of every matmul `ws`, in every thread
/// (indices in range wherever the thread is), outside any branch, so they issue with the
/// step's input loads; returns each unit's decoding, for `decode`: its 32 weights, or with
/// `codes` its 32 exact codes and then its `CODE_FIELDS` (`Coded`).
fn load_units(e: &mut Emit, ws: &[Weight], [col, unit_at]: [Val; 2], codes: bool) -> Vec<Decode> {
    ws.iter()
        .map(|&(m, words, dt, rbytes)| {
            let (w, loads, rest) = e.split_loads(|e| {
                if !codes {
                    return unit(e, m, words, dt, col, unit_at, rbytes);
                }
                let c = unit_codes(e, m, words, dt, col, unit_at, rbytes, true);
                let zero = e.kb.f32(0.0);
                let second = c.scales.get(1).copied().unwrap_or(zero);
                let mut w = c.codes;
                w.extend([c.scales[0], second, c.min.unwrap_or(zero)]);
                w
            });
            e.kb.append(loads);
            (rest, w)
        })
        .collect()
}

/// Decodes the unit of the matmul thread `local` loads for (`per` threads per matmul, from
/// `units[i]` on), `len` zeros for the threads past them.
fn decode(e: &mut Emit, units: Vec<Decode>, [i, per, len]: [usize; 3], local: Val) -> Vec<Val> {
    let mut units = units.into_iter();
    let Some((rest, w)) = units.next() else {
        let zero = e.kb.f32(0.0);
        return vec![zero; len];
    };
    let lim = e.u(per * (i + 1));
    let cond = e.kb.cmp(CmpOp::Lt, local, lim);
    e.kb.begin();
    e.kb.append(rest);
    let then_b = e.kb.end();
    e.kb.begin();
    let els = decode(e, units.collect(), [i + 1, per, len], local);
    let els_b = e.kb.end();
    e.kb.finish_if(cond, then_b, w, els_b, els)
}

/// What both forms of a tiled kernel share: the matmuls, their operands, and the values
/// defined before the forms (thread and tile coordinates, the step's shared arrays).
struct Tile<'a> {
    root: Value,
    mms: &'a [Value],
    out: Mem,
    xm: Mem,
    /// The norm's weight, epsilon and `k`, where the input is an RMS norm in the prologue.
    norm: Option<(Mem, f32, usize)>,
    ws: Vec<Weight>,
    /// Input rows, output columns, matmuls, rows a thread stages, units a step.
    rows: usize,
    n: usize,
    nm: usize,
    rm: usize,
    u: usize,
    local: Val,
    tr: Val,
    tc: Val,
    m0: Val,
    n0: Val,
    /// The rows the thread stages (`tr + 16 * i`), each with its clamped row.
    trows: Vec<(Val, Val)>,
    xbases: Vec<Val>,
    kpart: Val,
    /// The thread's weight unit: its column, unit, whether the thread decodes one, and its
    /// column in a row of `wt`.
    wcol: Val,
    wu: Val,
    loads_w: Val,
    wcol_at: Val,
    xt: Mem,
    wt: Mem,
    /// The thread's unit's matmul and column in the tile.
    wslot: [Val; 2],
    /// The parts of a split `k`: this work-group's steps, the parts, the tiles along `x`.
    steps: [Val; 2],
    ks: usize,
    gxn: usize,
    group: [Val; 3],
    last_col: Val,
}

/// `x @ w^T` for one or two matmuls `mms` of the same `x` (a SwiGLU's gate and up), as
/// tiles; the root is the matmul itself or an element-wise value of their shape computed
/// from them (the epilogue, as in the GEMV template). Where `form` says so, the tiles have two
/// forms (`Inst::Matrix`): products by tensor cores (`mma_form`) and by each thread's own
/// multiply-adds.
pub fn gemm(e: &mut Emit, root: Value, mms: &[Value], side: usize) -> Result<Launch> {
    let [x, w0] = args(e, mms[0])?;
    let (n, k) = (e.g.ty(w0).shape.0[0], e.g.ty(w0).shape.0[1]);
    let rows = e.g.ty(x).shape.numel() / k;
    let nm = mms.len();
    let Operands { x: xm, norm, ws } = operands(e, mms, k)?;
    let out = e.buffer(root, Access::Write)?;
    let local = e.kb.special(Special::LocalX);
    let gx = e.kb.special(Special::GroupX);
    let gy = e.kb.special(Special::GroupY);
    let eight = e.u(8);
    let tr = e.kb.bin(BinOp::Div, local, eight);
    let tc = e.kb.bin(BinOp::Rem, local, eight);
    let rm = rows_per_thread(rows);
    let tm = TM * rm;
    let tm_v = e.u(tm);
    let m0 = e.kb.mul(gy, tm_v);
    let tn = e.u(TN);
    let n0 = e.kb.mul(gx, tn);
    let last_row = e.u(rows - 1);
    // The thread's rows: `tr + 16 * i` of the tile, each clamped to the last row.
    let trows: Vec<(Val, Val)> = (0..rm)
        .map(|i| {
            let o = e.u(TM * i);
            let r = e.kb.add(m0, tr);
            let r = e.kb.add(r, o);
            (r, e.kb.bin(BinOp::Min, r, last_row))
        })
        .collect();
    let Form { mma, u, ks } = form(k, rows, nm, side);
    let tk = UNIT * u;
    let kv = e.u(k);
    let four = e.u(4);
    let kpart = e.kb.mul(tc, four);
    let xbases: Vec<Val> = trows
        .iter()
        .map(|&(_, xr)| {
            let b = e.kb.mul(xr, kv);
            e.kb.add(b, kpart)
        })
        .collect();
    // This thread's weight unit: matmul `local / (TN * u)`, its column and unit in the step.
    let per = TN * u;
    let per_v = e.u(per);
    let li = e.kb.bin(BinOp::Rem, local, per_v);
    let uv = e.u(u);
    let c_in = e.kb.bin(BinOp::Div, li, uv);
    let wu = e.kb.bin(BinOp::Rem, li, uv);
    let wc = e.kb.add(n0, c_in);
    let last_col = e.u(n - 1);
    let wcol = e.kb.bin(BinOp::Min, wc, last_col);
    let loaders = e.u(per * nm);
    let loads_w = e.kb.cmp(CmpOp::Lt, local, loaders);
    // The column the thread's unit goes to in `wt`: `local / per * TN + local % per / u`.
    let mi = e.kb.bin(BinOp::Div, local, per_v);
    let wcol_at = e.kb.mul(mi, tn);
    let wcol_at = e.kb.add(wcol_at, c_in);
    let [xt_len, wt_len, _] = step_arrays(tm, nm, mma, u);
    let xt = e.kb.shared(Scalar::F32, xt_len as u32);
    let wt = e.kb.shared(Scalar::F32, wt_len as u32);

    let steps = k / tk;
    let (gxn, gyn) = (n.div_ceil(TN), rows.div_ceil(tm));
    // This work-group's steps: part `group_id.z` of `ks`.
    let z = e.kb.special(Special::GroupZ);
    let steps_v = e.u(steps);
    let ks_v = e.u(ks);
    let s0 = e.kb.mul(z, steps_v);
    let s0 = e.kb.bin(BinOp::Div, s0, ks_v);
    let one_u = e.u(1);
    let z1 = e.kb.add(z, one_u);
    let s1 = e.kb.mul(z1, steps_v);
    let s1 = e.kb.bin(BinOp::Div, s1, ks_v);
    let t = Tile {
        root,
        mms,
        out,
        xm,
        norm: norm.map(|(m, eps)| (m, eps, k)),
        ws,
        rows,
        n,
        nm,
        rm,
        u,
        local,
        tr,
        tc,
        m0,
        n0,
        trows,
        xbases,
        kpart,
        wcol,
        wu,
        loads_w,
        wcol_at,
        xt,
        wt,
        wslot: [mi, c_in],
        steps: [s0, s1],
        ks,
        gxn,
        group: [gx, gy, z],
        last_col,
    };
    let mut products = Products::Fma;
    if mma {
        e.matrix(
            |e| {
                let [mi, c_in] = t.wslot;
                // Coded only where `k` is split: on the H100 (SmolLM2, `poot bench`, two
                // rounds; BENCHMARKS.md, thirty-fourth session) the coded form everywhere
                // took 2.7% off the 128-token chunk and 2.5% off 64 tokens (gate/up, `k` in
                // 3 and 5 parts, 740 to 668 and 527 to 479 us) but added 9.9% to 256 tokens,
                // whose gate/up (`k` whole) went from 742 to 937 us; coded only where `k` is
                // split, 2.0% and 2.3% off 128 and 64 tokens, 1.5% more at 256.
                let c = if t.ks > 1 {
                    coded(e, &t.ws, [tm, u], [mi, c_in, t.wu, t.tc])
                } else {
                    None
                };
                products = Products::TensorCores { coded: c.is_some() };
                mma_form(e, &t, c.as_ref())
            },
            |e| fma_form(e, &t),
        )?;
    } else {
        fma_form(e, &t)?;
    }
    let mut l = launch([gxn, gyn, ks], 0);
    l.tiles = vec![TileForm {
        rows: tm,
        k_parts: ks,
        products,
    }];
    if ks > 1 {
        l.scratch = vec![(4 * ks * (nm * rows * n + rows)) as u64];
        l.counters = gxn * gyn;
    }
    let wbytes: usize = t.ws.iter().map(|w| n * w.3).sum();
    l.work = (wbytes + 4 * rows * k) as u64;
    Ok(l)
}

/// Floats between two consecutive `k` of the staged weights (`wt`): the tile's columns of
/// every matmul, and in the tensor-core form (`padded`) 8 more, so the eight columns and
/// four `k` a subgroup's `mma` reads of them fall in distinct banks (the row stride is 24 or
/// 40, 24 or 8 modulo 32). The form without tensor cores keeps the rows packed: with the
/// wider rows there, SmolLM2's 16-token chunks (then without a tensor-core form, and whose
/// kernels differed in nothing else) took 1014-1016 us on the H100 against 969-974.
fn w_row(nm: usize, padded: bool) -> usize {
    TN * nm + if padded { 8 } else { 0 }
}

/// Where weight `kk` of a step's column 0 of matmul 0 is in `wt` (rows `padded` or not).
fn w_at(kk: usize, nm: usize, padded: bool, u: usize) -> usize {
    kk * w_row(nm, padded) + kk / UNIT * unit_pad(u)
}

/// Loads step `s`'s inputs and weight units, decodes the thread's unit, and stores both into
/// `xt` and `wt` between two barriers; adds the squares of the thread's inputs to `ssq`
/// where the input is normed. With `codes` (the coded tensor-core form) the units are
/// decoded to exact codes, and their scales and mins and the rows' sums are staged too
/// (`Coded::stage_fields`, `Coded::stage_sums`). The weights' rows are `padded` in the
/// tensor-core form (`w_row`).
fn stage(
    e: &mut Emit,
    t: &Tile,
    s: Val,
    ssq: &mut [Val],
    codes: Option<&Coded>,
    padded: bool,
) -> Result<()> {
    let (rm, u, nm) = (t.rm, t.u, t.nm);
    let tk = UNIT * u;
    // The step's loads: each row's `u` vectors of inputs (row-major), the norm weight's
    // `u` vectors, the units of weights; then the thread's unit decoded.
    let tkv = e.u(tk);
    let k0 = e.kb.mul(s, tkv);
    let mut xv = Vec::with_capacity(rm * u + u);
    for &xb in &t.xbases {
        for q in 0..u {
            let o = e.u(32 * q);
            let at = e.kb.add(xb, k0);
            let at = e.kb.add(at, o);
            xv.push(e.kb.load(t.xm, at, 4));
        }
    }
    if let Some((nw, _, _)) = t.norm {
        for q in 0..u {
            let o = e.u(32 * q);
            let at = e.kb.add(k0, t.kpart);
            let at = e.kb.add(at, o);
            xv.push(e.kb.load(nw, at, 4));
        }
    }
    let uv = e.u(u);
    let su = e.kb.mul(s, uv);
    let unit_at = e.kb.add(su, t.wu);
    let units = load_units(e, &t.ws, [t.wcol, unit_at], codes.is_some());
    let len = UNIT + if codes.is_some() { CODE_FIELDS } else { 0 };
    let w = decode(e, units, [0, TN * u, len], t.local);
    e.kb.barrier();
    let xs_stride = e.u(tk + 4);
    for (i, ssq) in ssq.iter_mut().enumerate() {
        let ro = e.u(TM * i);
        let tri = e.kb.add(t.tr, ro);
        let row_at = e.kb.mul(tri, xs_stride);
        let row_at = e.kb.add(row_at, t.kpart);
        for q in 0..u {
            let x4 = xv[i * u + q];
            let y = match t.norm {
                Some(_) => {
                    for c in 0..4 {
                        let x1 = e.kb.extract(x4, c);
                        *ssq = e.kb.fma(x1, x1, *ssq);
                    }
                    e.kb.mul(x4, xv[rm * u + q])
                }
                None => x4,
            };
            let o = e.u(32 * q);
            let at = e.kb.add(row_at, o);
            e.kb.store(t.xt, at, y);
            if let Some(c) = codes {
                c.stage_sums(e, t, [i, q], y);
            }
        }
    }
    // Weight `j` of unit `wu` (step row `wu * 32 + j`) of the thread's column, at `w_at`'s
    // place.
    let unit_row = e.u(UNIT * w_row(nm, padded) + unit_pad(u));
    let wdst = e.kb.mul(t.wu, unit_row);
    let wdst = e.kb.add(wdst, t.wcol_at);
    e.when(t.loads_w, |e| {
        for (j, &wv) in w[..UNIT].iter().enumerate() {
            let o = e.u(j * w_row(nm, padded));
            let at = e.kb.add(o, wdst);
            e.kb.store(t.wt, at, wv);
        }
        if let Some(c) = codes {
            c.stage_fields(e, &w[UNIT..]);
        }
        Ok(())
    })?;
    e.kb.barrier();
    Ok(())
}

/// Each staged row's sum of squares: its eight loading threads' partial sums, added in a
/// butterfly so all eight hold the same bits (the sums as they are without a norm).
fn row_squares(e: &mut Emit, t: &Tile, ssq: &[Val]) -> Vec<Val> {
    ssq.iter()
        .map(|&s| {
            let mut s = s;
            if t.norm.is_some() {
                for mask in [1, 2, 4] {
                    let o = e.kb.expr(poot_kir::Expr::ShuffleXor(s, mask));
                    s = e.kb.add(s, o);
                }
            }
            s
        })
        .collect()
}

/// The tile's end: each output group finished, directly or through the split's parts.
fn tile_end(e: &mut Emit, t: &Tile, outs: &[(Outputs, Vec<Val>, Val)]) -> Result<()> {
    if t.ks == 1 {
        for (o, sums, ssq) in outs {
            finish(e, o, sums, *ssq)?;
        }
        Ok(())
    } else {
        split_finish(e, outs, t.group, [t.gxn, t.ks, t.rows])
    }
}

/// The tile's loop over its steps of `k`: each step staged (`stage`, with `codes` where the
/// form takes them, rows `padded` in the tensor-core form), then `products` adds it into the
/// `n` carried sums. Returns the sums and
/// the staged rows' sums of squares (`row_squares`), emitted after the hint that the products
/// are done (what remains, the reductions and the epilogue, is short).
fn step_loop(
    e: &mut Emit,
    t: &Tile,
    n: usize,
    codes: Option<&Coded>,
    padded: bool,
    products: impl FnOnce(&mut Emit, &mut Vec<Val>) -> Result<()>,
) -> Result<(Vec<Val>, Vec<Val>)> {
    let zero = e.kb.f32(0.0);
    let init = vec![zero; n + t.rm];
    let [s0, s1] = t.steps;
    let mut acc = e.repeat(s0, s1, 1, &init, |e, s, acc| {
        let mut ssq = acc[n..].to_vec();
        stage(e, t, s, &mut ssq, codes, padded)?;
        let mut next = acc[..n].to_vec();
        products(e, &mut next)?;
        next.extend(ssq);
        Ok(next)
    })?;
    e.kb.launch_dependents();
    let ssq = row_squares(e, t, &acc.split_off(n));
    Ok((acc, ssq))
}

/// The outputs of one row and two columns from `first`; `lead` says whether this thread
/// stores the row's partial sum of squares in a split (at most one thread a row).
fn outputs<'a>(t: &Tile<'a>, row: [Val; 3], first: Val, lead: Option<Val>) -> Outputs<'a> {
    Outputs {
        root: t.root,
        mms: t.mms,
        out: t.out,
        norm: t.norm.map(|(_, eps, k)| (eps, k)),
        row,
        cols: [first, t.last_col],
        lead,
        n: t.n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checkpoints' prefill matmuls in 64-row tiles with tensor cores (BENCHMARKS.md,
    /// thirty-second session): gate/up (two matmuls) of SmolLM2 (`k` 576) and Qwen2.5-0.5B
    /// (896) take two units a step, as do their q/k/v, o and down projections; three units
    /// would not fit `MAX_SHARED`.
    #[test]
    fn the_checkpoints_matmuls_take_two_units_a_step() {
        for (k, nm) in [(576, 2), (896, 2), (576, 1), (1536, 1), (896, 1), (4864, 1)] {
            assert_eq!(step_units(k, 4 * TM, nm, true), 2, "k {k}, {nm} matmuls");
        }
    }
}
