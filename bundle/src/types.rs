//! The serde types of a bundle: the [`Manifest`] (everything except the weight bytes) and
//! what it is made of. Only `Vec`s and plain structs, so one manifest always encodes to the
//! same bytes. Keys and targets print the way error messages and `poot-compile inspect`
//! name them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::BundleError;

/// Everything a bundle holds except the weight bytes: encoded as the manifest section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The compiler that wrote the bundle (`poot-compile 0.1.0`), for diagnostics only.
    pub compiler_version: String,
    /// The model's family and dimensions.
    pub model: ModelInfo,
    /// Tokenizer and chat template.
    pub text: TextInfo,
    /// The kernels of each target; every target lists the same kernels in the same order.
    pub targets: Vec<TargetCode>,
    /// Every compiled step shape; shared by all targets.
    pub entries: Vec<Entry>,
    /// The size of each arena in bytes.
    pub arenas: ArenaSizes,
    /// Where each weight lies in the weights section.
    pub weights: Vec<WeightInfo>,
}

/// The model a bundle was compiled from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Family name (`llama`, `qwen2`).
    pub family: String,
    /// Transformer blocks.
    pub n_layers: u32,
    /// Hidden size.
    pub d_model: u32,
    /// Vocabulary size (rows of the logits).
    pub vocab: u32,
    /// The model's trained context length.
    pub context: u32,
}

/// What the runtime needs to turn text into tokens and back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextInfo {
    /// The Hugging Face `tokenizer.json` text.
    pub tokenizer_json: String,
    /// The Jinja chat template, for instruct models.
    pub chat_template: Option<String>,
    /// Beginning-of-sequence token id.
    pub bos: Option<u32>,
    /// End-of-sequence token id.
    pub eos: Option<u32>,
    /// Whether a prompt starts with `bos`.
    pub add_bos: bool,
}

/// A kind of device code. Prints as `ptx-sm90`, `spirv`, `spirv-sg32`, `reference` and parses back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Target {
    /// PTX text for CUDA devices of compute capability `sm` (90 for sm_90) and newer.
    Ptx {
        /// Compute capability, major * 10 + minor.
        sm: u32,
    },
    /// SPIR-V words for Vulkan and wgpu. With `native_subgroups` the kernels use 32-wide
    /// subgroup instructions and need a device whose compute subgroups are exactly 32 wide
    /// (`spirv-sg32`); without, subgroups are emulated in shared memory and the code runs on
    /// any Vulkan 1.1 device (`spirv`).
    Spirv {
        /// Whether the kernels need native 32-wide subgroups.
        native_subgroups: bool,
    },
    /// Kernel IR executed by the CPU reference device.
    Reference,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Ptx { sm } => write!(f, "ptx-sm{sm}"),
            Target::Spirv {
                native_subgroups: false,
            } => f.write_str("spirv"),
            Target::Spirv {
                native_subgroups: true,
            } => f.write_str("spirv-sg32"),
            Target::Reference => f.write_str("reference"),
        }
    }
}

impl FromStr for Target {
    type Err = BundleError;

    fn from_str(name: &str) -> Result<Target, BundleError> {
        match name {
            "spirv" => Ok(Target::Spirv {
                native_subgroups: false,
            }),
            "spirv-sg32" => Ok(Target::Spirv {
                native_subgroups: true,
            }),
            "reference" => Ok(Target::Reference),
            _ => name
                .strip_prefix("ptx-sm")
                .and_then(|sm| sm.parse().ok())
                .map(|sm| Target::Ptx { sm })
                .ok_or_else(|| BundleError::TargetName {
                    name: name.to_string(),
                }),
        }
    }
}

/// The kernels of one target, in the order every target of the bundle shares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetCode {
    /// Which target the code is for.
    pub target: Target,
    /// The kernels; `Dispatch::kernel` indexes this list.
    pub kernels: Vec<KernelCode>,
}

/// One kernel's code for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCode {
    /// The kernel's name, the same for every target.
    pub name: String,
    /// PTX text, SPIR-V words (little-endian) or encoded kernel IR.
    pub code: Vec<u8>,
    /// Work-group (block) size.
    pub workgroup: [u32; 3],
    /// Static shared memory in bytes.
    pub shared_bytes: u32,
    /// The kernel waits for the kernel launched before it to complete (and its writes to be
    /// visible) before it touches memory that kernel may write (it may read weights, tables
    /// and slots before), so a device may launch it as a programmatic dependent of that
    /// kernel, overlapping its launch with that kernel's run (PTX for sm_90:
    /// `griddepcontrol.wait`). False: launch it only after the previous kernel completes.
    pub dependent_launch: bool,
}

/// The step shape of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StepKind {
    /// One token per row.
    Decode,
    /// A prefill chunk of `tokens` tokens per row.
    Prefill {
        /// Tokens in the chunk.
        tokens: u32,
    },
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepKind::Decode => f.write_str("decode"),
            StepKind::Prefill { tokens } => write!(f, "prefill tokens={tokens}"),
        }
    }
}

/// The sampling suffix compiled into an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Sampling {
    /// Argmax over the logits.
    Greedy,
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sampling::Greedy => f.write_str("greedy"),
        }
    }
}

/// What identifies an entry. Tokens, positions and sampler parameters are slot data and are
/// never part of a key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntryKey {
    /// The program (`generate`, `encode`).
    pub program: String,
    /// Decode or a prefill chunk.
    pub kind: StepKind,
    /// Batch rows.
    pub rows: u32,
    /// KV cache capacity in tokens.
    pub cap: u32,
    /// The sampling suffix.
    pub sampling: Sampling,
}

impl fmt::Display for EntryKey {
    /// `generate decode rows=4 cap=2048 greedy`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let EntryKey {
            program,
            kind,
            rows,
            cap,
            sampling,
        } = self;
        write!(f, "{program} {kind} rows={rows} cap={cap} {sampling}")
    }
}

/// The memory regions a dispatch binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Arena {
    /// The weights section, uploaded once; read-only.
    Weights,
    /// Carried between steps (K/V); shared by the entries of a bundle.
    State,
    /// Written by the host before each replay (tokens, positions, maps).
    Slots,
    /// Temporaries, packed by liveness.
    Scratch,
    /// Copied back to the host after each replay.
    Readback,
}

impl fmt::Display for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arena::Weights => "weights",
            Arena::State => "state",
            Arena::Slots => "slots",
            Arena::Scratch => "scratch",
            Arena::Readback => "readback",
        })
    }
}

/// A byte range of an arena bound to a kernel argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    /// The arena.
    pub arena: Arena,
    /// Start in bytes, relative to the arena.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Whether the kernel writes the range (never for weights).
    pub writes: bool,
}

/// One kernel launch of an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// Index into `TargetCode::kernels` (the same for every target).
    pub kernel: u32,
    /// Grid size in work-groups.
    pub grid: [u32; 3],
    /// The kernel's buffer arguments, in order.
    pub bindings: Vec<Binding>,
    /// Relative cost, so a device with a watchdog can split a replay.
    pub work: u64,
}

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SlotKind {
    /// Token ids.
    Token,
    /// Positions.
    Pos,
    /// Which row of the logits the sampler reads.
    LogitIndex,
    /// Logical to physical KV page per row.
    SlotMap,
    /// Where this step's K/V are written.
    WriteMap,
}

/// A host-written input of an entry, in the slots arena.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotInfo {
    /// What the slot holds.
    pub kind: SlotKind,
    /// Start in the slots arena.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Element type (`i32`, `u32`).
    pub dtype: String,
    /// Shape.
    pub dims: Vec<u64>,
}

/// An output of an entry, in the readback arena.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadbackInfo {
    /// What it is (`token`, `nonfinite`).
    pub name: String,
    /// Start in the readback arena.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Element type.
    pub dtype: String,
    /// Shape.
    pub dims: Vec<u64>,
}

/// A carried buffer an entry reads or writes, in the state arena.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateInfo {
    /// Its name (`blk.0.k`).
    pub name: String,
    /// Start in the state arena.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Shape.
    pub dims: Vec<u64>,
}

/// One compiled step shape: its dispatch list and where its inputs and outputs live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// What identifies it.
    pub key: EntryKey,
    /// The kernel launches, in order.
    pub dispatches: Vec<Dispatch>,
    /// Host-written inputs.
    pub slots: Vec<SlotInfo>,
    /// Outputs copied back.
    pub readback: Vec<ReadbackInfo>,
    /// Carried buffers.
    pub state: Vec<StateInfo>,
    /// Scratch this entry uses (at most the scratch arena).
    pub scratch_bytes: u64,
    /// Bytes read per replay: read-only weight bindings plus state, as the planner counted them.
    pub bytes_read: u64,
}

/// The size of each arena in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ArenaSizes {
    /// Equal to the weights section's length.
    pub weights: u64,
    /// Carried state.
    pub state: u64,
    /// Slots.
    pub slots: u64,
    /// Scratch.
    pub scratch: u64,
    /// Readback.
    pub readback: u64,
}

impl ArenaSizes {
    /// The size of `arena`.
    pub fn size(&self, arena: Arena) -> u64 {
        match arena {
            Arena::Weights => self.weights,
            Arena::State => self.state,
            Arena::Slots => self.slots,
            Arena::Scratch => self.scratch,
            Arena::Readback => self.readback,
        }
    }
}

/// Where one weight tensor lies in the weights section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeightInfo {
    /// Its typed role (`blk.0.attn_q`).
    pub role: String,
    /// Start, relative to the weights section; a multiple of [`crate::WEIGHT_ALIGN`].
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Storage type (`f32`, `q8_0`). The bytes are the checkpoint's, in the layout the
    /// bundle's kernels read (the compiler's `lower::layout`: a block format may keep each
    /// field group of its blocks in a region of its own).
    pub dtype: String,
    /// Shape.
    pub dims: Vec<u64>,
}
