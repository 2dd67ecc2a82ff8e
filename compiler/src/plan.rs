//! The planner: programs become bundle entries over five arenas, and a model's weights and
//! tables become the weights section.
//!
//! Invariants: weights and tables are packed once and shared by every entry, weights in the
//! kernels' device layout (`lower::layout`); carried state has one layout shared by every
//! entry (a prefill chunk writes the K/V the decode entry reads), and each entry that uses
//! counters (`Buf::Counters`) has a region of the state arena of its own after the states
//! placed before it; slot, scratch and readback layouts are per entry, each arena sized to
//! the largest entry; scratch buffers are packed first-fit by liveness over the dispatch list
//! (a buffer lives from its first to its last dispatch, outputs to the end); every offset is
//! 256-byte aligned, which satisfies every vector access a kernel makes.

use crate::families::Model;
use crate::lower::layout::device_bytes;
use crate::lower::{Buf, Program, Tables};
use crate::{CompileError, Result};
use poot_bundle::{
    Arena, ArenaSizes, Binding, Dispatch, Entry, EntryKey, ReadbackInfo, SlotInfo, SlotKind,
    StateInfo, WeightInfo, WeightPacker,
};
use poot_ir::{Op, Value};
use poot_kir::Kernel;
use std::collections::{BTreeMap, HashMap};

/// The alignment of every offset in an arena, in bytes.
pub(crate) const ALIGN: u64 = 256;

fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// Which outputs an entry reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readback {
    /// Only the sampled token and the non-finite flag (the generation path).
    Sampled,
    /// Every output (verification: logits included).
    All,
}

/// Accumulates the entries of one bundle.
pub struct Planner<'m> {
    model: &'m Model,
    packer: WeightPacker,
    weights: HashMap<String, WeightInfo>,
    /// Kernels shared by all entries.
    pub kernels: Vec<Kernel>,
    by_text: HashMap<String, usize>,
    state: BTreeMap<String, StateInfo>,
    state_size: u64,
    tables_packed: usize,
    /// The entries so far.
    pub entries: Vec<Entry>,
    arenas: ArenaSizes,
}

fn slot_kind(k: poot_ir::SlotKind) -> SlotKind {
    match k {
        poot_ir::SlotKind::Token => SlotKind::Token,
        poot_ir::SlotKind::Pos => SlotKind::Pos,
        poot_ir::SlotKind::LogitIndex => SlotKind::LogitIndex,
        poot_ir::SlotKind::SlotMap => SlotKind::SlotMap,
        poot_ir::SlotKind::WriteMap => SlotKind::WriteMap,
    }
}

impl<'m> Planner<'m> {
    /// A planner for `model`'s bundle.
    pub fn new(model: &'m Model) -> Planner<'m> {
        Planner {
            model,
            packer: WeightPacker::new(),
            weights: HashMap::new(),
            kernels: Vec::new(),
            by_text: HashMap::new(),
            state: BTreeMap::new(),
            state_size: 0,
            tables_packed: 0,
            entries: Vec::new(),
            arenas: ArenaSizes {
                weights: 0,
                state: 0,
                slots: 0,
                scratch: 0,
                readback: 0,
            },
        }
    }

    fn weight(&mut self, name: &str, dtype: &str, dims: &[usize], bytes: &[u8]) -> WeightInfo {
        if let Some(w) = self.weights.get(name) {
            return w.clone();
        }
        let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        let info = self.packer.push(name, dtype, &dims, bytes);
        self.weights.insert(name.to_string(), info.clone());
        info
    }

    fn pack_tables(&mut self, tables: &Tables) {
        for (name, data) in &tables.data[self.tables_packed..] {
            let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
            let name = format!("table:{name}");
            self.weight(&name, "f32", &[data.len()], &bytes);
        }
        self.tables_packed = tables.data.len();
    }

    /// Adds `program` as the entry `key`; `tables` are the bundle's shared tables.
    pub fn add(
        &mut self,
        key: EntryKey,
        p: &Program,
        tables: &Tables,
        readback: Readback,
    ) -> Result<()> {
        self.pack_tables(tables);
        let g = &p.graph;
        let bytes_of = |v: Value| 4 * g.ty(v).shape.numel() as u64;
        let kmap: Vec<usize> = p
            .kernels
            .iter()
            .map(|k| {
                let mut blank = k.clone();
                blank.name.clear();
                let text = poot_kir::print(&blank);
                *self.by_text.entry(text).or_insert_with(|| {
                    let mut k = k.clone();
                    let kind = k
                        .name
                        .rsplit_once('_')
                        .map_or(k.name.as_str(), |(a, _)| a)
                        .to_string();
                    k.name = format!("{kind}_{}", self.kernels.len());
                    self.kernels.push(k);
                    self.kernels.len() - 1
                })
            })
            .collect();
        // Per-entry layouts.
        let mut slots: Vec<SlotInfo> = Vec::new();
        let mut slot_at: HashMap<Value, u64> = HashMap::new();
        let mut slot_size = 0;
        for (v, k) in g.slots() {
            let len = bytes_of(v);
            slot_at.insert(v, slot_size);
            slots.push(SlotInfo {
                kind: slot_kind(k),
                offset: slot_size,
                len,
                dtype: g.ty(v).dtype.to_string(),
                dims: g.ty(v).shape.0.iter().map(|&d| d as u64).collect(),
            });
            slot_size = align(slot_size + len);
        }
        for (v, name) in g.states() {
            let len = bytes_of(v);
            let dims: Vec<u64> = g.ty(v).shape.0.iter().map(|&d| d as u64).collect();
            match self.state.get(name) {
                Some(s) if s.len != len || s.dims != dims => {
                    return Err(CompileError::Lower(format!(
                        "state `{name}` is {dims:?} in {key} but {:?} in an earlier entry",
                        s.dims
                    )));
                }
                Some(_) => {}
                None => {
                    let info = StateInfo {
                        name: name.to_string(),
                        offset: self.state_size,
                        len,
                        dims,
                    };
                    self.state_size = align(self.state_size + len);
                    self.state.insert(name.to_string(), info);
                }
            }
        }
        // This entry's counters: a region of the state arena of its own, listed with no state
        // (they are not model state), zeroed with the arena.
        let counters = (4 * p.counters) as u64;
        let counters_at = self.state_size;
        self.state_size = align(self.state_size + counters);
        let mut readbacks: Vec<ReadbackInfo> = Vec::new();
        let mut read_at: HashMap<Buf, u64> = HashMap::new();
        let mut read_size = 0;
        for (name, buf) in &p.outputs {
            let Buf::Value(v) = *buf else { continue };
            let wanted = readback == Readback::All || name == "token" || name == "nonfinite";
            if !wanted || read_at.contains_key(buf) {
                continue;
            }
            let len = bytes_of(v);
            read_at.insert(*buf, read_size);
            readbacks.push(ReadbackInfo {
                name: name.clone(),
                offset: read_size,
                len,
                dtype: g.ty(v).dtype.to_string(),
                dims: g.ty(v).shape.0.iter().map(|&d| d as u64).collect(),
            });
            read_size = align(read_size + len);
        }
        // Scratch by liveness.
        let n = p.dispatches.len();
        let mut life: BTreeMap<Buf, (usize, usize, u64)> = BTreeMap::new();
        for (i, d) in p.dispatches.iter().enumerate() {
            for (b, _) in &d.args {
                let len = match b {
                    Buf::Value(v)
                        if matches!(g.nodes[*v].op, Op::Weight(_) | Op::State(_) | Op::Slot(_)) =>
                    {
                        continue;
                    }
                    Buf::Value(_) if read_at.contains_key(b) => continue,
                    Buf::Value(v) => bytes_of(*v),
                    Buf::Scratch(..) => p.scratch.get(b).copied().unwrap_or(0),
                    Buf::Table(_) | Buf::Counters(_) | Buf::Ahead(_) => continue,
                };
                let e = life.entry(*b).or_insert((i, i, len));
                e.1 = i;
            }
        }
        for (_, b) in &p.outputs {
            if let Some(l) = life.get_mut(b) {
                l.1 = n;
            }
        }
        let mut order: Vec<(Buf, (usize, usize, u64))> = life.into_iter().collect();
        order.sort_by_key(|(b, (s, _, _))| (*s, *b));
        let mut placed: Vec<(u64, u64, usize, usize)> = Vec::new();
        let mut scratch_at: HashMap<Buf, u64> = HashMap::new();
        let mut scratch_size = 0;
        for (b, (s, e, len)) in order {
            let mut off = 0;
            let mut clash: Vec<(u64, u64)> = placed
                .iter()
                .filter(|(_, _, ps, pe)| *ps <= e && s <= *pe)
                .map(|(o, l, _, _)| (*o, *l))
                .collect();
            clash.sort();
            for (o, l) in clash {
                if off + len <= o {
                    break;
                }
                off = off.max(align(o + l));
            }
            placed.push((off, len, s, e));
            scratch_at.insert(b, off);
            scratch_size = scratch_size.max(align(off + len));
        }
        // Dispatches.
        let mut dispatches = Vec::with_capacity(n);
        let mut bytes_read = 0;
        for d in &p.dispatches {
            let mut bindings = Vec::with_capacity(d.args.len());
            for (b, access) in &d.args {
                let writes = *access != poot_kir::Access::Read;
                let (arena, offset, len) = match *b {
                    Buf::Value(v) => match &g.nodes[v].op {
                        Op::Weight(role) => {
                            let w = self.bind_weight(*role)?;
                            bytes_read += w.len;
                            (Arena::Weights, w.offset, w.len)
                        }
                        Op::State(name) => {
                            let s = &self.state[name];
                            bytes_read += s.len;
                            (Arena::State, s.offset, s.len)
                        }
                        Op::Slot(_) => (Arena::Slots, slot_at[&v], bytes_of(v)),
                        _ => match read_at.get(b) {
                            Some(&o) => (Arena::Readback, o, bytes_of(v)),
                            None => (Arena::Scratch, scratch_at[b], bytes_of(v)),
                        },
                    },
                    Buf::Table(i) => {
                        let w = &self.weights[&format!("table:{}", tables.data[i].0)];
                        bytes_read += w.len;
                        (Arena::Weights, w.offset, w.len)
                    }
                    Buf::Scratch(..) => (
                        Arena::Scratch,
                        scratch_at[b],
                        p.scratch.get(b).copied().unwrap_or(0),
                    ),
                    Buf::Counters(n) => {
                        let skip = 4 * u64::from(n);
                        (Arena::State, counters_at + skip, counters - skip)
                    }
                    // Bound for a prefetch only: not counted as read.
                    Buf::Ahead(v) => match &g.nodes[v].op {
                        Op::Weight(role) => {
                            let w = self.bind_weight(*role)?;
                            (Arena::Weights, w.offset, w.len)
                        }
                        _ => {
                            return Err(CompileError::Lower(format!(
                                "{v} is prefetched but is not a weight"
                            )));
                        }
                    },
                };
                bindings.push(Binding {
                    arena,
                    offset,
                    len,
                    writes,
                });
            }
            dispatches.push(Dispatch {
                kernel: kmap[d.kernel] as u32,
                grid: d.grid,
                bindings,
                work: d.work,
            });
        }
        let state: Vec<StateInfo> = p
            .states
            .iter()
            .map(|(name, _)| self.state[name].clone())
            .collect();
        self.arenas.slots = self.arenas.slots.max(slot_size);
        self.arenas.scratch = self.arenas.scratch.max(scratch_size);
        self.arenas.readback = self.arenas.readback.max(read_size);
        self.entries.push(Entry {
            key,
            dispatches,
            slots,
            readback: readbacks,
            state,
            scratch_bytes: scratch_size,
            bytes_read,
        });
        Ok(())
    }

    fn bind_weight(&mut self, role: poot_ir::WeightRole) -> Result<WeightInfo> {
        let m = self.model;
        let missing = || CompileError::MissingTensor {
            path: m.path.clone(),
            tensor: poot_ir::role_text(role),
        };
        let name = m.map.get(&role).ok_or_else(missing)?;
        let view = m.store.view(name).ok_or_else(missing)?;
        let role_name = poot_ir::role_text(role);
        if let Some(w) = self.weights.get(&role_name) {
            return Ok(w.clone());
        }
        let bytes = device_bytes(view.dtype, view.bytes);
        Ok(self.weight(&role_name, view.dtype.name(), view.dims, &bytes))
    }

    /// The arena sizes, the weight map and the weights section.
    pub fn finish(mut self) -> (ArenaSizes, Vec<WeightInfo>, Vec<u8>) {
        self.arenas.state = self.state_size;
        self.arenas.weights = self.packer.len();
        let (infos, bytes) = self.packer.finish();
        (self.arenas, infos, bytes)
    }
}
