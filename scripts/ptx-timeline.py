#!/usr/bin/env python3
"""Adds a device timeline to a kernel cut from a bundle (`poot-compile inspect --kernels`).

`ptx-timeline.py IN.ptx OUT.ptx [A,B]`: the kernel reads `%globaltimer` on entry, after its
`griddepcontrol.wait` and at its `ret`, and `%clock64` after the wait, after its first
`bar.sync`, before its `griddepcontrol.launch_dependents` and at its `ret` (a stamp it never
reaches keeps the one before). Each work-group counts its own launches in `poot_tl_cnt` (read
after the wait, so the previous launch has written it); at the `ret`, thread 0 writes record
`launch * groups + group` of `poot_tl`: the eight words
`[gt_entry, gt_release, gt_end, clk_release, clk_barrier, clk_trigger, clk_end, group]`.
No atomics and no load on the way out, so the stamps add little to the kernel's own tail.
With `A,B` (1-based), the two middle clock stamps are taken after the kernel's `A`th and
`B`th `bar.sync` instead (a barrier inside a branch is stamped only where it is reached).
`kernel_timeline` reads the records back (runtime/examples/kernel_timeline.rs). The stamps
cost registers (ptxas keeps values live across the clock reads: Qwen2.5-0.5B's gate/up 56 ->
163 a thread), so a stamped kernel may hold fewer work-groups an SM than its plain build;
`kernel_timeline` prints the occupancy of each file it runs.
"""
import sys

RECORDS = 1 << 16  # 64-byte records: 4 MiB
GROUPS = 1 << 14  # launch counters, one per work-group

src = open(sys.argv[1]).read()
marks = [int(a) for a in sys.argv[3].split(",")] if len(sys.argv) > 3 else None
bars = 0
out = []
entry_open = False
seen_bar = False
for line in src.split("\n"):
    s = line.strip()
    if s.startswith(".visible .entry") and not entry_open:
        out.append(f".global .align 16 .b8 poot_tl[{RECORDS * 64}];")
        out.append(f".global .align 4 .u32 poot_tl_cnt[{GROUPS}];")
        out.append("")
    if s == "{" and not entry_open:
        entry_open = True
        out += [
            line,
            "\t.reg .b64 %tg<3>, %tc<4>, %tla, %tlw;",
            "\t.reg .b32 %tlr<8>;",
            "\t.reg .pred %tlp<2>;",
            "\tmov.u64 %tg0, %globaltimer;",
            "\tmov.u32 %tlr0, %ctaid.x;",
            "\tmov.u32 %tlr1, %ctaid.y;",
            "\tmov.u32 %tlr2, %ctaid.z;",
            "\tmov.u32 %tlr3, %nctaid.x;",
            "\tmov.u32 %tlr4, %nctaid.y;",
            "\tmul.lo.u32 %tlr5, %tlr3, %tlr4;",
            "\tmad.lo.u32 %tlr0, %tlr1, %tlr3, %tlr0;",
            "\tmad.lo.u32 %tlr0, %tlr2, %tlr5, %tlr0;",
            "\tmov.u32 %tlr6, %nctaid.z;",
            "\tmul.lo.u32 %tlr5, %tlr5, %tlr6;",
            "\tmov.u64 %tlw, poot_tl_cnt;",
            "\tmad.wide.u32 %tlw, %tlr0, 4, %tlw;",
            "\tmov.u64 %tg1, %tg0;",
            "\tmov.u64 %tc0, %clock64;",
            "\tmov.u64 %tc1, %tc0;",
            "\tmov.u64 %tc2, %tc0;",
        ]
        continue
    if s == "griddepcontrol.wait;":
        out += [
            line,
            "\tmov.u64 %tg1, %globaltimer;",
            "\tmov.u64 %tc0, %clock64;",
            "\tmov.u64 %tc1, %tc0;",
            "\tmov.u64 %tc2, %tc0;",
            "\tld.global.u32 %tlr7, [%tlw];",
        ]
        continue
    if s == "bar.sync 0;" and marks:
        bars += 1
        out.append(line)
        if bars == marks[0]:
            out += ["\tmov.u64 %tc1, %clock64;", "\tmov.u64 %tc2, %tc1;"]
        elif bars == marks[1]:
            out.append("\tmov.u64 %tc2, %clock64;")
        continue
    if s == "bar.sync 0;" and not seen_bar:
        seen_bar = True
        out += [line, "\tmov.u64 %tc1, %clock64;", "\tmov.u64 %tc2, %tc1;"]
        continue
    if s == "griddepcontrol.launch_dependents;" and not marks:
        out += ["\tmov.u64 %tc2, %clock64;", line]
        continue
    if s == "ret;" and entry_open:
        out += [
            "\tmov.u64 %tc3, %clock64;",
            "\tmov.u64 %tg2, %globaltimer;",
            "\tmov.u32 %tlr1, %tid.x;",
            "\tsetp.ne.u32 %tlp0, %tlr1, 0;",
            "\t@%tlp0 bra $TL_SKIP;",
            "\tadd.u32 %tlr2, %tlr7, 1;",
            "\tst.global.u32 [%tlw], %tlr2;",
            "\tmad.lo.u32 %tlr2, %tlr7, %tlr5, %tlr0;",
            f"\tsetp.ge.u32 %tlp1, %tlr2, {RECORDS};",
            "\t@%tlp1 bra $TL_SKIP;",
            "\tmov.u64 %tla, poot_tl;",
            "\tmad.wide.u32 %tla, %tlr2, 64, %tla;",
            "\tcvt.u64.u32 %tlw, %tlr0;",
            "\tst.global.v2.u64 [%tla], {%tg0, %tg1};",
            "\tst.global.v2.u64 [%tla+16], {%tg2, %tc0};",
            "\tst.global.v2.u64 [%tla+32], {%tc1, %tc2};",
            "\tst.global.v2.u64 [%tla+48], {%tc3, %tlw};",
            "$TL_SKIP:",
            line,
        ]
        continue
    out.append(line)
if not entry_open or src.count("ret;") != 1:
    sys.exit(f"{sys.argv[1]}: expected one entry with one ret")
open(sys.argv[2], "w").write("\n".join(out))
