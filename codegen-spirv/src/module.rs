//! The SPIR-V module under construction: ids, capabilities, deduplicated types and constants,
//! decorations, global variables and the blocks of the one entry function, assembled into an
//! rspirv `dr::Module` at the end.
//!
//! Invariants:
//! - Ids are allocated in the order things are first asked for, and every cache is only
//!   looked up, never iterated; capabilities and extensions are kept sorted. The words are
//!   therefore a pure function of the sequence of calls.
//! - Non-aggregate types and constants are unique (SPIR-V forbids duplicate scalar and vector
//!   types); struct types are created per binding so each carries its own decorations.
//! - Instructions go to the last block begun; a block is closed by the writer with exactly
//!   one terminator before the next one begins.

use poot_kir::{Scalar, Ty};
use rspirv::dr::{Block, Function, Instruction, Module as DrModule, ModuleHeader, Operand};
use rspirv::spirv::{
    AddressingModel, Capability, Decoration, ExecutionMode, ExecutionModel, FunctionControl,
    GlslStd450Op, MemoryModel, Op, StorageClass, Word,
};
use std::collections::{BTreeSet, HashMap};

/// A type, as the cache key of its declaration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TyKey {
    Void,
    Bool,
    Int(bool),
    F32,
    Vector(Word, u32),
    Pointer(StorageClass, Word),
    Function(Word),
    RuntimeArray(Word),
    Array(Word, u32),
}

/// Where a phi's operand sits, for patching a back edge once its value exists.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PhiAt {
    block: usize,
    inst: usize,
}

/// One module with one compute entry point.
pub(crate) struct Module {
    next: Word,
    caps: BTreeSet<Capability>,
    exts: BTreeSet<&'static str>,
    glsl: Option<Word>,
    names: Vec<Instruction>,
    annotations: Vec<Instruction>,
    globals: Vec<Instruction>,
    types: HashMap<TyKey, Word>,
    consts: HashMap<(Word, u32), Word>,
    composites: HashMap<(Word, Vec<Word>), Word>,
    nulls: HashMap<Word, Word>,
    blocks: Vec<Block>,
    /// The global variables, in declaration order (for the entry point's interface).
    pub vars: Vec<(Word, StorageClass)>,
}

/// An id operand.
pub(crate) fn id(w: Word) -> Operand {
    Operand::IdRef(w)
}

impl Module {
    /// An empty module (the `Shader` capability declared).
    pub(crate) fn new() -> Module {
        let mut m = Module {
            next: 1,
            caps: BTreeSet::new(),
            exts: BTreeSet::new(),
            glsl: None,
            names: Vec::new(),
            annotations: Vec::new(),
            globals: Vec::new(),
            types: HashMap::new(),
            consts: HashMap::new(),
            composites: HashMap::new(),
            nulls: HashMap::new(),
            blocks: Vec::new(),
            vars: Vec::new(),
        };
        m.capability(Capability::Shader);
        m
    }

    /// A fresh id.
    pub(crate) fn fresh(&mut self) -> Word {
        self.next += 1;
        self.next - 1
    }

    /// Declares a capability (once).
    pub(crate) fn capability(&mut self, c: Capability) {
        self.caps.insert(c);
    }

    /// Declares an extension (once).
    pub(crate) fn extension(&mut self, e: &'static str) {
        self.exts.insert(e);
    }

    /// `OpName`.
    pub(crate) fn name(&mut self, target: Word, name: &str) {
        let ops = vec![id(target), Operand::LiteralString(name.into())];
        self.names.push(Instruction::new(Op::Name, None, None, ops));
    }

    /// `OpDecorate`.
    pub(crate) fn decorate(&mut self, target: Word, d: Decoration, lits: &[u32]) {
        let mut ops = vec![id(target), Operand::Decoration(d)];
        ops.extend(lits.iter().map(|&l| Operand::LiteralBit32(l)));
        self.annotations
            .push(Instruction::new(Op::Decorate, None, None, ops));
    }

    /// `OpMemberDecorate`.
    pub(crate) fn member_decorate(
        &mut self,
        target: Word,
        member: u32,
        d: Decoration,
        lits: &[u32],
    ) {
        let mut ops = vec![
            id(target),
            Operand::LiteralBit32(member),
            Operand::Decoration(d),
        ];
        ops.extend(lits.iter().map(|&l| Operand::LiteralBit32(l)));
        self.annotations
            .push(Instruction::new(Op::MemberDecorate, None, None, ops));
    }

    fn declare(&mut self, key: TyKey, op: Op, ops: Vec<Operand>) -> Word {
        if let Some(&w) = self.types.get(&key) {
            return w;
        }
        let w = self.fresh();
        self.globals.push(Instruction::new(op, None, Some(w), ops));
        self.types.insert(key, w);
        w
    }

    /// `void`.
    pub(crate) fn void(&mut self) -> Word {
        self.declare(TyKey::Void, Op::TypeVoid, vec![])
    }

    /// The type of a scalar.
    pub(crate) fn scalar(&mut self, s: Scalar) -> Word {
        match s {
            Scalar::Bool => self.declare(TyKey::Bool, Op::TypeBool, vec![]),
            Scalar::F32 => self.declare(TyKey::F32, Op::TypeFloat, vec![Operand::LiteralBit32(32)]),
            Scalar::I32 | Scalar::U32 => {
                let signed = s == Scalar::I32;
                let ops = vec![
                    Operand::LiteralBit32(32),
                    Operand::LiteralBit32(u32::from(signed)),
                ];
                self.declare(TyKey::Int(signed), Op::TypeInt, ops)
            }
        }
    }

    /// The type of a kir value (scalar or vector).
    pub(crate) fn ty(&mut self, t: Ty) -> Word {
        let s = self.scalar(t.scalar);
        if t.lanes == 1 {
            return s;
        }
        let n = u32::from(t.lanes);
        self.declare(
            TyKey::Vector(s, n),
            Op::TypeVector,
            vec![id(s), Operand::LiteralBit32(n)],
        )
    }

    /// A pointer type.
    pub(crate) fn pointer(&mut self, class: StorageClass, to: Word) -> Word {
        self.declare(
            TyKey::Pointer(class, to),
            Op::TypePointer,
            vec![Operand::StorageClass(class), id(to)],
        )
    }

    /// `void()`.
    pub(crate) fn fn_void(&mut self) -> Word {
        let v = self.void();
        self.declare(TyKey::Function(v), Op::TypeFunction, vec![id(v)])
    }

    /// A runtime array of `stride`-byte elements (`ArrayStride stride`; each element type
    /// has one stride: 4 for scalars, 4 per lane for vectors).
    pub(crate) fn runtime_array(&mut self, elem: Word, stride: u32) -> Word {
        if let Some(&w) = self.types.get(&TyKey::RuntimeArray(elem)) {
            return w;
        }
        let w = self.declare(
            TyKey::RuntimeArray(elem),
            Op::TypeRuntimeArray,
            vec![id(elem)],
        );
        self.decorate(w, Decoration::ArrayStride, &[stride]);
        w
    }

    /// A fixed array of `len` elements.
    pub(crate) fn array(&mut self, elem: Word, len: u32) -> Word {
        let u = self.scalar(Scalar::U32);
        let n = self.const32(u, len);
        self.declare(
            TyKey::Array(elem, len),
            Op::TypeArray,
            vec![id(elem), id(n)],
        )
    }

    /// A new `Block` struct with one member at offset 0.
    pub(crate) fn block_struct(&mut self, member: Word) -> Word {
        let w = self.fresh();
        self.globals.push(Instruction::new(
            Op::TypeStruct,
            None,
            Some(w),
            vec![id(member)],
        ));
        self.decorate(w, Decoration::Block, &[]);
        self.member_decorate(w, 0, Decoration::Offset, &[0]);
        w
    }

    /// A 32-bit constant of type `ty` with bits `bits`.
    pub(crate) fn const32(&mut self, ty: Word, bits: u32) -> Word {
        if let Some(&w) = self.consts.get(&(ty, bits)) {
            return w;
        }
        let w = self.fresh();
        let inst = Instruction::new(
            Op::Constant,
            Some(ty),
            Some(w),
            vec![Operand::LiteralBit32(bits)],
        );
        self.globals.push(inst);
        self.consts.insert((ty, bits), w);
        w
    }

    /// A `u32` constant.
    pub(crate) fn u32(&mut self, x: u32) -> Word {
        let u = self.scalar(Scalar::U32);
        self.const32(u, x)
    }

    /// A bool constant.
    pub(crate) fn bool(&mut self, b: bool) -> Word {
        let t = self.scalar(Scalar::Bool);
        if let Some(&w) = self.consts.get(&(t, u32::from(b))) {
            return w;
        }
        let w = self.fresh();
        let op = if b {
            Op::ConstantTrue
        } else {
            Op::ConstantFalse
        };
        self.globals
            .push(Instruction::new(op, Some(t), Some(w), vec![]));
        self.consts.insert((t, u32::from(b)), w);
        w
    }

    /// A constant vector of type `ty` from constant `parts`.
    pub(crate) fn composite(&mut self, ty: Word, parts: Vec<Word>) -> Word {
        if let Some(&w) = self.composites.get(&(ty, parts.clone())) {
            return w;
        }
        let w = self.fresh();
        let ops = parts.iter().map(|&p| id(p)).collect();
        self.globals.push(Instruction::new(
            Op::ConstantComposite,
            Some(ty),
            Some(w),
            ops,
        ));
        self.composites.insert((ty, parts), w);
        w
    }

    /// The zero (`OpConstantNull`) of a type.
    pub(crate) fn null(&mut self, ty: Word) -> Word {
        if let Some(&w) = self.nulls.get(&ty) {
            return w;
        }
        let w = self.fresh();
        self.globals.push(Instruction::new(
            Op::ConstantNull,
            Some(ty),
            Some(w),
            vec![],
        ));
        self.nulls.insert(ty, w);
        w
    }

    /// A global variable of pointer type `ptr`.
    pub(crate) fn variable(&mut self, ptr: Word, class: StorageClass) -> Word {
        let w = self.fresh();
        let inst = Instruction::new(
            Op::Variable,
            Some(ptr),
            Some(w),
            vec![Operand::StorageClass(class)],
        );
        self.globals.push(inst);
        self.vars.push((w, class));
        w
    }

    /// The `GLSL.std.450` import.
    fn glsl_set(&mut self) -> Word {
        if let Some(w) = self.glsl {
            return w;
        }
        let w = self.fresh();
        self.glsl = Some(w);
        w
    }

    /// Starts a block labelled `label`.
    pub(crate) fn begin(&mut self, label: Word) {
        let mut b = Block::new();
        b.label = Some(Instruction::new(Op::Label, None, Some(label), vec![]));
        self.blocks.push(b);
    }

    /// The label of the block being written.
    pub(crate) fn current(&self) -> Word {
        self.blocks
            .last()
            .and_then(|b| b.label.as_ref())
            .and_then(|l| l.result_id)
            .unwrap_or(0)
    }

    fn push(&mut self, inst: Instruction) {
        if let Some(b) = self.blocks.last_mut() {
            b.instructions.push(inst);
        }
    }

    /// An instruction with a result of type `ty`; returns the result.
    pub(crate) fn op(&mut self, op: Op, ty: Word, ops: Vec<Operand>) -> Word {
        let w = self.fresh();
        self.push(Instruction::new(op, Some(ty), Some(w), ops));
        w
    }

    /// An instruction of id operands with a result of type `ty`.
    pub(crate) fn ids(&mut self, op: Op, ty: Word, args: &[Word]) -> Word {
        self.op(op, ty, args.iter().map(|&a| id(a)).collect())
    }

    /// An instruction without a result.
    pub(crate) fn exec(&mut self, op: Op, ops: Vec<Operand>) {
        self.push(Instruction::new(op, None, None, ops));
    }

    /// A `GLSL.std.450` instruction.
    pub(crate) fn glsl(&mut self, f: GlslStd450Op, ty: Word, args: &[Word]) -> Word {
        let set = self.glsl_set();
        let mut ops = vec![id(set), Operand::LiteralExtInstInteger(f as u32)];
        ops.extend(args.iter().map(|&a| id(a)));
        self.op(Op::ExtInst, ty, ops)
    }

    /// `OpPhi` of `incoming` (value, predecessor) pairs; returns the result and where it is.
    pub(crate) fn phi(&mut self, ty: Word, incoming: &[(Word, Word)]) -> (Word, PhiAt) {
        let ops = incoming.iter().flat_map(|&(v, b)| [id(v), id(b)]).collect();
        let w = self.op(Op::Phi, ty, ops);
        let block = self.blocks.len() - 1;
        let inst = self.blocks[block].instructions.len() - 1;
        (w, PhiAt { block, inst })
    }

    /// Sets incoming pair `k` of the phi at `at` to (`value`, `pred`).
    pub(crate) fn patch_phi(&mut self, at: PhiAt, k: usize, value: Word, pred: Word) {
        if let Some(inst) = self
            .blocks
            .get_mut(at.block)
            .and_then(|b| b.instructions.get_mut(at.inst))
            && inst.operands.len() >= 2 * k + 2
        {
            inst.operands[2 * k] = id(value);
            inst.operands[2 * k + 1] = id(pred);
        }
    }

    /// The finished module: a GLCompute entry point `name` with function `func`,
    /// `LocalSize` `workgroup`, interface `interface`.
    pub(crate) fn finish(
        mut self,
        version: (u8, u8),
        func: Word,
        name: &str,
        workgroup: [u32; 3],
        interface: Vec<Word>,
    ) -> DrModule {
        let void = self.void();
        let fn_ty = self.fn_void();
        let mut m = DrModule::new();
        let mut header = ModuleHeader::new(self.next);
        header.set_version(version.0, version.1);
        m.header = Some(header);
        m.capabilities = self
            .caps
            .iter()
            .map(|&c| Instruction::new(Op::Capability, None, None, vec![Operand::Capability(c)]))
            .collect();
        m.extensions = self
            .exts
            .iter()
            .map(|&e| {
                Instruction::new(
                    Op::Extension,
                    None,
                    None,
                    vec![Operand::LiteralString(e.into())],
                )
            })
            .collect();
        if let Some(set) = self.glsl {
            let ops = vec![Operand::LiteralString("GLSL.std.450".into())];
            m.ext_inst_imports = vec![Instruction::new(Op::ExtInstImport, None, Some(set), ops)];
        }
        m.memory_model = Some(Instruction::new(
            Op::MemoryModel,
            None,
            None,
            vec![
                Operand::AddressingModel(AddressingModel::Logical),
                Operand::MemoryModel(MemoryModel::GLSL450),
            ],
        ));
        let mut ep = vec![
            Operand::ExecutionModel(ExecutionModel::GLCompute),
            id(func),
            Operand::LiteralString(name.into()),
        ];
        ep.extend(interface.into_iter().map(id));
        m.entry_points = vec![Instruction::new(Op::EntryPoint, None, None, ep)];
        let mut mode = vec![id(func), Operand::ExecutionMode(ExecutionMode::LocalSize)];
        mode.extend(workgroup.iter().map(|&x| Operand::LiteralBit32(x)));
        m.execution_modes = vec![Instruction::new(Op::ExecutionMode, None, None, mode)];
        m.debug_names = self.names;
        m.annotations = self.annotations;
        m.types_global_values = self.globals;
        let mut f = Function::new();
        f.def = Some(Instruction::new(
            Op::Function,
            Some(void),
            Some(func),
            vec![Operand::FunctionControl(FunctionControl::NONE), id(fn_ty)],
        ));
        f.blocks = self.blocks;
        f.end = Some(Instruction::new(Op::FunctionEnd, None, None, vec![]));
        m.functions = vec![f];
        m
    }
}
