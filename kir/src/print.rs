//! The text form of a kernel, for snapshots and error messages.

use crate::kernel::{Access, Expr, Inst, Kernel, Mem};
use std::fmt::Write;

/// The text of a memory reference: `p3` (parameter) or `s1` (shared array).
pub fn mem_text(m: Mem) -> String {
    match m {
        Mem::Param(i) => format!("p{i}"),
        Mem::Shared(i) => format!("s{i}"),
    }
}

fn list(vs: &[crate::Val]) -> String {
    vs.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One expression in text form (`add %3, %4`), as `print` writes it.
pub fn expr_text(e: &Expr) -> String {
    match e {
        Expr::Const(c) => format!("const {c}"),
        Expr::Special(s) => s.name().to_string(),
        Expr::Unary(op, a) => format!("{} {a}", op.name()),
        Expr::Binary(op, a, b) => format!("{} {a}, {b}", op.name()),
        Expr::Fma(a, b, c) => format!("fma {a}, {b}, {c}"),
        Expr::Cmp(op, a, b) => format!("{} {a}, {b}", op.name()),
        Expr::Select(c, a, b) => format!("select {c}, {a}, {b}"),
        Expr::Convert(a, s) => format!("convert {a} to {s}"),
        Expr::Bitcast(a, s) => format!("bitcast {a} to {s}"),
        Expr::HalfToF32(a, hi) => format!("f16_to_f32 {a}{}", if *hi { " high" } else { "" }),
        Expr::Bf16ToF32(a, hi) => format!("bf16_to_f32 {a}{}", if *hi { " high" } else { "" }),
        Expr::Load(m, i, n) => format!("load {}[{i}] x{n}", mem_text(*m)),
        Expr::Extract(v, l) => format!("extract {v}.{l}"),
        Expr::SubgroupReduce(op, a) => format!("subgroup_{} {a}", op.name()),
        Expr::ShuffleXor(a, m) => format!("shuffle_xor {a}, {m}"),
        Expr::Mma { a, b, c } => format!("mma a({}) b({}) c({})", list(a), list(b), list(c)),
    }
}

fn block(k: &Kernel, insts: &[Inst], depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    for i in insts {
        match i {
            Inst::Let(v, e) => writeln!(out, "{pad}{v} = {} : {}", expr_text(e), k.types[*v]),
            Inst::Store {
                mem: m,
                index,
                value,
            } => writeln!(out, "{pad}store {}[{index}] = {value}", mem_text(*m)),
            Inst::Atomic {
                op,
                mem: m,
                index,
                value,
                old,
            } => {
                let result = old.map_or(String::new(), |o| format!("{o} = "));
                writeln!(
                    out,
                    "{pad}{result}atomic_{} {}[{index}], {value}",
                    op.name(),
                    mem_text(*m)
                )
            }
            Inst::Barrier => writeln!(out, "{pad}barrier"),
            Inst::Fence => writeln!(out, "{pad}fence"),
            Inst::Prefetch {
                mem: m,
                index,
                count,
            } => {
                writeln!(out, "{pad}prefetch {}[{index}], {count}", mem_text(*m))
            }
            Inst::Trap(c) => writeln!(out, "{pad}trap {c}"),
            Inst::LaunchDependents => writeln!(out, "{pad}launch_dependents"),
            Inst::GridWait { early } => {
                let early: Vec<String> = early.iter().map(|p| format!("p{p}")).collect();
                writeln!(out, "{pad}grid_wait early({})", early.join(", "))
            }
            Inst::Clustered { dims, then, els } => {
                let [x, y, z] = dims;
                writeln!(out, "{pad}clustered {x}x{y}x{z} {{").ok();
                block(k, then, depth + 1, out);
                writeln!(out, "{pad}}} else {{").ok();
                block(k, els, depth + 1, out);
                writeln!(out, "{pad}}}")
            }
            Inst::Matrix { then, els } => {
                writeln!(out, "{pad}matrix {{").ok();
                block(k, then, depth + 1, out);
                writeln!(out, "{pad}}} else {{").ok();
                block(k, els, depth + 1, out);
                writeln!(out, "{pad}}}")
            }
            Inst::ClusterArrive { release } => {
                let sem = if *release { "release" } else { "relaxed" };
                writeln!(out, "{pad}cluster_arrive {sem}")
            }
            Inst::ClusterWait => writeln!(out, "{pad}cluster_wait"),
            Inst::StoreRemote {
                mem: m,
                rank,
                index,
                value,
            } => writeln!(
                out,
                "{pad}store_remote {}[{index}] of {rank} = {value}",
                mem_text(*m)
            ),
            Inst::If {
                cond,
                then,
                then_yield,
                els,
                else_yield,
                results,
            } => {
                let res = if results.is_empty() {
                    String::new()
                } else {
                    format!("{} = ", list(results))
                };
                writeln!(out, "{pad}{res}if {cond} {{").ok();
                block(k, then, depth + 1, out);
                if !then_yield.is_empty() {
                    writeln!(out, "{pad}  yield {}", list(then_yield)).ok();
                }
                if !els.is_empty() || !else_yield.is_empty() {
                    writeln!(out, "{pad}}} else {{").ok();
                    block(k, els, depth + 1, out);
                    if !else_yield.is_empty() {
                        writeln!(out, "{pad}  yield {}", list(else_yield)).ok();
                    }
                }
                writeln!(out, "{pad}}}")
            }
            Inst::For {
                var,
                start,
                end,
                step,
                carried,
                body,
                yields,
                results,
            } => {
                let res = if results.is_empty() {
                    String::new()
                } else {
                    format!("{} = ", list(results))
                };
                let carry: Vec<String> = carried
                    .iter()
                    .map(|c| format!("{} = {}", c.param, c.init))
                    .collect();
                let carry = if carry.is_empty() {
                    String::new()
                } else {
                    format!(" carry({})", carry.join(", "))
                };
                writeln!(
                    out,
                    "{pad}{res}for {var} = {start} to {end} step {step}{carry} {{"
                )
                .ok();
                block(k, body, depth + 1, out);
                if !yields.is_empty() {
                    writeln!(out, "{pad}  yield {}", list(yields)).ok();
                }
                writeln!(out, "{pad}}}")
            }
        }
        .ok();
    }
}

/// The kernel in text form.
pub fn print(k: &Kernel) -> String {
    let mut s = format!(
        "kernel {} workgroup={:?} subgroup={} {{\n",
        k.name, k.workgroup, k.subgroup
    );
    for (i, p) in k.params.iter().enumerate() {
        let access = match p.access {
            Access::Read => "read",
            Access::Write => "write",
            Access::ReadWrite => "read_write",
        };
        writeln!(s, "  param p{i} {}: {} {access}", p.name, p.elem).ok();
    }
    for (i, a) in k.shared.iter().enumerate() {
        writeln!(s, "  shared s{i}: {}[{}]", a.elem, a.len).ok();
    }
    block(k, &k.body, 1, &mut s);
    s.push_str("}\n");
    s
}
