#!/usr/bin/env python3
"""A timing prototype (BENCHMARKS.md, twenty-third session), not a kernel poot makes: the
combine of a decode attention's splits, alone, in four forms, to price thread-block clusters
(sm_90) against the global records and counter the attention uses today.

`proto-cluster-combine.py DIR` writes DIR/{direct,global,pull,push}.ptx. Each kernel runs on 72
work-groups of 128 threads, 9 (row, head) groups of 8 splits (SmolLM2 at cap 1024 past
position 895), with a record of 66 floats a split (max score, sum of exponentials, 64
dimensions). Time each with `launch_floor DIR/NAME.ptx 72 153` (153 dependent launches in one
graph, as in a decode step). Values are placeholders: the kernels are timed, never checked.

- direct: every work-group writes 64 floats, the cost of a split with no combine;
- global: today's protocol: records to global memory, every thread fences, a barrier, thread
  0 counts the split in its group's counter; the last to count fences, weighs the 8 records
  (64 threads, one dimension each) and restores the counter to zero;
- pull: a cluster of the 8 splits (`.reqnctapercluster`): records to each split's shared
  memory, a cluster barrier, each split combines 8 of the 64 dimensions from its peers'
  shared memory (`mapa`, `ld.shared::cluster`), a second cluster barrier so no split exits
  while a peer still reads it;
- push: each split stores its record's share for each peer straight into that peer's shared
  memory (`st.shared::cluster`), after an early cluster barrier that guarantees every peer is
  running (its arrive before the grid wait); then one cluster barrier and local combines."""
import pathlib
import sys

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
SPLITS, D = 8, 64
REGS = (
    "  .reg .u64 %rd<20>; .reg .u32 %r<30>; .reg .f32 %f<4>; .reg .pred %p<8>;\n"
    + "  .reg .f32 "
    + ", ".join(f"%fm{s}, %fl{s}, %fv{s}, %fw{s}" for s in range(SPLITS))
    + ", %fm, %fL, %fO;\n"
)


def entry(name, body, cluster=False):
    attrs = ".maxntid 128, 1, 1\n" + (f".reqnctapercluster {SPLITS}, 1, 1\n" if cluster else "")
    params = "(.param .u64 p0, .param .u64 p1, .param .u64 p2)"
    return f"{HEAD}\n.visible .entry comb_{name}{params}\n{attrs}{{\n{REGS}{body}  ret;\n}}\n"


def weigh(load):
    """Loads each split's (m, l, v) with `load(s)`, then out = sum(w v) / sum(w l) in %fO."""
    out = [line for s in range(SPLITS) for line in load(s)]
    out.append("  mov.f32 %fm, %fm0;")
    out += [f"  max.f32 %fm, %fm, %fm{s};" for s in range(1, SPLITS)]
    out += ["  mov.f32 %fL, 0f00000000;", "  mov.f32 %fO, 0f00000000;"]
    for s in range(SPLITS):
        out += [
            f"  sub.f32 %fw{s}, %fm{s}, %fm;",
            f"  mul.f32 %fw{s}, %fw{s}, 0f3FB8AA3B;",
            f"  ex2.approx.f32 %fw{s}, %fw{s};",
            f"  fma.rn.f32 %fL, %fw{s}, %fl{s}, %fL;",
            f"  fma.rn.f32 %fO, %fw{s}, %fv{s}, %fO;",
        ]
    out.append("  div.rn.f32 %fO, %fO, %fL;")
    return "\n".join(out) + "\n"


# Common prologue: %rd3 the output, %r1 the work-group, %r2 the thread, %r3 the group.
START = """  ld.param.u64 %rd3, [p2]; cvta.to.global.u64 %rd3, %rd3;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %tid.x;
  shr.u32 %r3, %r1, 3;
"""
# Stores %fO as dimension %r13 of group %r3.
STORE = """  mad.lo.u32 %r22, %r3, 64, %r13;
  mul.wide.u32 %rd14, %r22, 4;
  add.u64 %rd15, %rd3, %rd14;
  st.global.f32 [%rd15], %fO;
"""

DIRECT = entry("direct", "  griddepcontrol.wait;\n" + START + """  setp.lt.u32 %p1, %r2, 64;
  @!%p1 bra DONE;
  mov.u32 %r13, %r2;
  mov.u32 %r3, %r1;
  cvt.rn.f32.u32 %fO, %r2;
""" + STORE + "DONE:\n")


def global_load(s):
    return [
        f"  add.u32 %r20, %r10, {s};",
        "  mul.lo.u32 %r21, %r20, 66;",
        "  mul.wide.u32 %rd10, %r21, 4;",
        "  add.u64 %rd11, %rd1, %rd10;",
        f"  ld.global.f32 %fm{s}, [%rd11];",
        f"  ld.global.f32 %fl{s}, [%rd11+4];",
        "  add.u64 %rd13, %rd11, %rd12;",
        f"  ld.global.f32 %fv{s}, [%rd13+8];",
    ]


GLOBAL = entry("global", """  .shared .align 4 .u32 arrived;
  griddepcontrol.wait;
  ld.param.u64 %rd1, [p0]; cvta.to.global.u64 %rd1, %rd1;
  ld.param.u64 %rd2, [p1]; cvta.to.global.u64 %rd2, %rd2;
""" + START + """  and.b32 %r4, %r1, 7;
  shl.b32 %r10, %r3, 3;
  setp.lt.u32 %p1, %r2, 66;
  @!%p1 bra WROTE;
  mad.lo.u32 %r5, %r1, 66, %r2;
  mul.wide.u32 %rd4, %r5, 4;
  add.u64 %rd5, %rd1, %rd4;
  add.u32 %r6, %r2, %r4;
  cvt.rn.f32.u32 %f1, %r6;
  st.global.f32 [%rd5], %f1;
WROTE:
  fence.acq_rel.gpu;
  bar.sync 0;
  setp.eq.u32 %p2, %r2, 0;
  mul.wide.u32 %rd6, %r3, 4;
  add.u64 %rd7, %rd2, %rd6;
  @!%p2 bra COUNTED;
  atom.global.add.u32 %r7, [%rd7], 1;
  st.shared.u32 [arrived], %r7;
COUNTED:
  bar.sync 0;
  ld.shared.u32 %r8, [arrived];
  setp.ne.u32 %p3, %r8, 7;
  @%p3 bra DONE;
  fence.acq_rel.gpu;
  setp.lt.u32 %p4, %r2, 64;
  @!%p4 bra RESET;
  mov.u32 %r13, %r2;
  mul.wide.u32 %rd12, %r2, 4;
""" + weigh(global_load) + STORE + """RESET:
  @!%p2 bra DONE;
  atom.global.min.u32 %r9, [%rd7], 0;
DONE:
""")


def pull_load(s):
    return [
        f"  mapa.shared::cluster.u32 %r20, %r11, {s};",
        f"  ld.shared::cluster.f32 %fm{s}, [%r20];",
        f"  ld.shared::cluster.f32 %fl{s}, [%r20+4];",
        "  add.u32 %r21, %r20, %r12;",
        f"  ld.shared::cluster.f32 %fv{s}, [%r21+8];",
    ]


PULL = entry("pull", """  .shared .align 16 .f32 rec[72];
  griddepcontrol.wait;
""" + START + """  mov.u32 %r4, %cluster_ctarank;
  mov.u32 %r11, rec;
  setp.lt.u32 %p1, %r2, 66;
  @!%p1 bra WROTE;
  shl.b32 %r5, %r2, 2;
  add.u32 %r5, %r11, %r5;
  add.u32 %r6, %r2, %r4;
  cvt.rn.f32.u32 %f1, %r6;
  st.shared.f32 [%r5], %f1;
WROTE:
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  setp.lt.u32 %p4, %r2, 8;
  @!%p4 bra DONE;
  shl.b32 %r13, %r4, 3;
  add.u32 %r13, %r13, %r2;
  shl.b32 %r12, %r13, 2;
""" + weigh(pull_load) + STORE + """DONE:
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
""", cluster=True)


def push_load(s):
    return [
        f"  ld.shared.f32 %fm{s}, [%r11+{s * 40}];",
        f"  ld.shared.f32 %fl{s}, [%r11+{s * 40 + 4}];",
        f"  ld.shared.f32 %fv{s}, [%r14+{s * 40 + 8}];",
    ]


# inbox[s][10] of split r: split s's (m, l) and dimensions 8r .. 8r + 8 of its output.
PUSH = entry("push", """  .shared .align 16 .f32 inbox[80];
  barrier.cluster.arrive.relaxed.aligned;
  griddepcontrol.wait;
""" + START + """  mov.u32 %r4, %cluster_ctarank;
  mov.u32 %r11, inbox;
  barrier.cluster.wait.aligned;
  setp.lt.u32 %p1, %r2, 80;
  @!%p1 bra WROTE;
  div.u32 %r5, %r2, 10;
  rem.u32 %r6, %r2, 10;
  mad.lo.u32 %r7, %r4, 10, %r6;
  shl.b32 %r7, %r7, 2;
  add.u32 %r7, %r11, %r7;
  mapa.shared::cluster.u32 %r8, %r7, %r5;
  add.u32 %r9, %r2, %r4;
  cvt.rn.f32.u32 %f1, %r9;
  st.shared::cluster.f32 [%r8], %f1;
WROTE:
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  setp.lt.u32 %p4, %r2, 8;
  @!%p4 bra DONE;
  shl.b32 %r14, %r2, 2;
  add.u32 %r14, %r14, %r11;
  shl.b32 %r13, %r4, 3;
  add.u32 %r13, %r13, %r2;
""" + weigh(push_load) + STORE + "DONE:\n", cluster=True)

if __name__ == "__main__":
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in [("direct", DIRECT), ("global", GLOBAL), ("pull", PULL), ("push", PUSH)]:
        (out / f"{name}.ptx").write_text(text)
