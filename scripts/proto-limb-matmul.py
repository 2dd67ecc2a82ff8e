#!/usr/bin/env python3
"""A timing prototype (BENCHMARKS.md, eighteenth session), not a kernel poot makes: a decode matmul (Q4_1 weights, residual added) whose input is staged as
three 8-bit limbs of a block floating point (a power-of-two scale per 32 inputs) and summed by
dp4a: `gen2.py N K COLS > f.ptx`, launched on N / (4 * COLS) work-groups of 128 threads
(`launch_floor f.ptx GRID 154`). Its arithmetic is never checked against a reference: it was
only timed, on zeroed buffers, against the bundle's own kernels of the same shapes.

Each work-group stages its input row as limbs: per block of 32 inputs, the scale 2^e with the
block's largest magnitude in [64, 128) * 2^e; each input's x / 2^e split into floor (signed
byte) and two more bytes of fraction, all exact, so the integer sums of a Q4_1 code with each
limb (dp4a) are exact and the dot product keeps f32's precision."""
import sys
N, K, COLS = map(int, sys.argv[1:4])
BLOCKS, QUADS = K // 32, K // 4
UNITS = COLS * BLOCKS
ROUNDS = -(-UNITS // 32)
SROUNDS = -(-QUADS // 128)
L = []
n = {"r": 0, "f": 0, "p": 0, "rd": 0, "h": 0}
def reg(c):
    n[c] += 1
    return f"%{c}{n[c]}"
def e(s): L.append("\t" + s)
e("griddepcontrol.wait;")
P = []
for i in range(5):
    r = reg("rd"); P.append(r)
    e(f"ld.param.u64 {r}, [p{i}];")
    e(f"cvta.to.global.u64 {r}, {r};")
tid, wg, lane, warp = reg("r"), reg("r"), reg("r"), reg("r")
e(f"mov.u32 {tid}, %tid.x;"); e(f"mov.u32 {wg}, %ctaid.x;")
e(f"and.b32 {lane}, {tid}, 31;"); e(f"shr.u32 {warp}, {tid}, 5;")
for sr in range(SROUNDS):
    q = reg("r"); ok = reg("p")
    e(f"add.u32 {q}, {tid}, {128*sr};")
    e(f"setp.lt.u32 {ok}, {q}, {QUADS};")
    e(f"min.u32 {q}, {q}, {QUADS-1};")
    a = reg("rd")
    e(f"mul.wide.u32 {a}, {q}, 16;"); e(f"add.s64 {a}, {P[0]}, {a};")
    x = [reg("f") for _ in range(4)]
    e(f"ld.global.v4.f32 {{{', '.join(x)}}}, [{a}];")
    ax = [reg("f") for _ in range(4)]
    for i in range(4): e(f"abs.f32 {ax[i]}, {x[i]};")
    m = reg("f"); m2 = reg("f"); s = reg("f"); s2 = reg("f")
    e(f"max.f32 {m}, {ax[0]}, {ax[1]};"); e(f"max.f32 {m2}, {ax[2]}, {ax[3]};"); e(f"max.f32 {m}, {m}, {m2};")
    e(f"add.f32 {s}, {x[0]}, {x[1]};"); e(f"add.f32 {s2}, {x[2]}, {x[3]};"); e(f"add.f32 {s}, {s}, {s2};")
    for b in (1, 2, 4):
        t = reg("f"); e(f"shfl.sync.bfly.b32 {t}, {m}, {b}, 31, 0xffffffff;"); e(f"max.f32 {m}, {m}, {t};")
        t = reg("f"); e(f"shfl.sync.bfly.b32 {t}, {s}, {b}, 31, 0xffffffff;"); e(f"add.f32 {s}, {s}, {t};")
    ef, sc, inv = reg("r"), reg("r"), reg("r")
    e(f"mov.b32 {ef}, {m};"); e(f"shr.u32 {ef}, {ef}, 23;"); e(f"max.u32 {ef}, {ef}, 7;")
    e(f"sub.u32 {sc}, 260, {ef};"); e(f"shl.b32 {sc}, {sc}, 23;")
    e(f"sub.u32 {inv}, {ef}, 6;"); e(f"shl.b32 {inv}, {inv}, 23;")
    limbs = [[], [], []]
    for i in range(4):
        v, scf = reg("f"), reg("f")
        e(f"mov.b32 {scf}, {sc};")
        e(f"mul.f32 {v}, {x[i]}, {scf};")
        for li in range(3):
            k = reg("r"); kf = reg("f")
            typ = "s32" if li == 0 else "u32"
            e(f"cvt.rmi.{typ}.f32 {k}, {v};")
            limbs[li].append(k)
            if li < 2:
                e(f"cvt.rn.f32.{typ} {kf}, {k};")
                nv = reg("f"); e(f"sub.f32 {nv}, {v}, {kf};"); e(f"mul.f32 {nv}, {nv}, 0f43800000;"); v = nv
    off = reg("r"); e(f"shl.b32 {off}, {q}, 2;")
    for li in range(3):
        a0, a1, w = reg("r"), reg("r"), reg("r")
        e(f"prmt.b32 {a0}, {limbs[li][0]}, {limbs[li][1]}, 0x0040;")
        e(f"prmt.b32 {a1}, {limbs[li][2]}, {limbs[li][3]}, 0x0040;")
        e(f"prmt.b32 {w}, {a0}, {a1}, 0x5410;")
        ad = reg("r"); e(f"mov.u32 {ad}, sl{li};"); e(f"add.u32 {ad}, {ad}, {off};")
        e(f"@{ok} st.shared.u32 [{ad}], {w};")
    first = reg("p"); l8 = reg("r")
    e(f"and.b32 {l8}, {tid}, 7;"); e(f"setp.eq.u32 {first}, {l8}, 0;"); e(f"and.pred {first}, {first}, {ok};")
    bo = reg("r"); e(f"shr.u32 {bo}, {q}, 3;"); e(f"shl.b32 {bo}, {bo}, 2;")
    for arr, val in (("ssc", inv), ("ssum", s)):
        ad = reg("r"); e(f"mov.u32 {ad}, {arr};"); e(f"add.u32 {ad}, {ad}, {bo};")
        e(f"@{first} st.shared.b32 [{ad}], {val};")
e("bar.sync 0;")
c0 = reg("r")
e(f"shl.b32 {c0}, {wg}, 2;"); e(f"add.u32 {c0}, {c0}, {warp};"); e(f"mul.lo.u32 {c0}, {c0}, {COLS};")
acc = [reg("f") for _ in range(COLS)]
for a in acc: e(f"mov.f32 {a}, 0f00000000;")
units = []
for rnd in range(ROUNDS):
    u, ok = reg("r"), reg("p")
    e(f"add.u32 {u}, {lane}, {32*rnd};"); e(f"setp.lt.u32 {ok}, {u}, {UNITS};"); e(f"min.u32 {u}, {u}, {UNITS-1};")
    col, blk = reg("r"), reg("r")
    e(f"div.u32 {col}, {u}, {BLOCKS};"); e(f"rem.u32 {blk}, {u}, {BLOCKS};")
    gu = reg("r"); e(f"add.u32 {gu}, {c0}, {col};"); e(f"mad.lo.u32 {gu}, {gu}, {BLOCKS}, {blk};")
    a = reg("rd"); e(f"mul.wide.u32 {a}, {gu}, 16;"); e(f"add.s64 {a}, {P[1]}, {a};")
    cw = [reg("r") for _ in range(4)]
    e(f"ld.global.nc.v4.u32 {{{', '.join(cw)}}}, [{a}];")
    a2 = reg("rd"); e(f"mul.wide.u32 {a2}, {gu}, 4;"); e(f"add.s64 {a2}, {P[2]}, {a2};")
    dm = reg("r"); e(f"ld.global.nc.u32 {dm}, [{a2}];")
    units.append((ok, col, blk, cw, dm))
for ok, col, blk, cw, dm in units:
    bo = reg("r"); e(f"shl.b32 {bo}, {blk}, 5;")
    lw = []
    for li in range(3):
        ad = reg("r"); e(f"mov.u32 {ad}, sl{li};"); e(f"add.u32 {ad}, {ad}, {bo};")
        rs = [reg("r") for _ in range(8)]
        e(f"ld.shared.v4.u32 {{{', '.join(rs[:4])}}}, [{ad}];")
        e(f"ld.shared.v4.u32 {{{', '.join(rs[4:])}}}, [{ad}+16];")
        lw.append(rs)
    d = [reg("r") for _ in range(3)]
    first = [True] * 3
    for w in range(4):
        lo, hi = reg("r"), reg("r")
        e(f"and.b32 {lo}, {cw[w]}, 0x0F0F0F0F;"); e(f"shr.u32 {hi}, {cw[w]}, 4;"); e(f"and.b32 {hi}, {hi}, 0x0F0F0F0F;")
        for half, code in ((0, lo), (1, hi)):
            qi = w + 4 * half
            for li in range(3):
                c = "0" if first[li] else d[li]
                first[li] = False
                t = "s32" if li == 0 else "u32"
                e(f"dp4a.u32.{t} {d[li]}, {code}, {lw[li][qi]}, {c};")
    f0, f1, f2, f3 = reg("f"), reg("f"), reg("f"), reg("f")
    e(f"cvt.rn.f32.s32 {f0}, {d[0]};"); e(f"cvt.rn.f32.u32 {f1}, {d[1]};"); e(f"cvt.rn.f32.u32 {f2}, {d[2]};")
    e(f"fma.rn.f32 {f3}, {f2}, 0f3B800000, {f1};"); e(f"fma.rn.f32 {f3}, {f3}, 0f3B800000, {f0};")
    b4 = reg("r"); e(f"shl.b32 {b4}, {blk}, 2;")
    sc, sm = reg("f"), reg("f")
    ad = reg("r"); e(f"mov.u32 {ad}, ssc;"); e(f"add.u32 {ad}, {ad}, {b4};"); e(f"ld.shared.f32 {sc}, [{ad}];")
    ad = reg("r"); e(f"mov.u32 {ad}, ssum;"); e(f"add.u32 {ad}, {ad}, {b4};"); e(f"ld.shared.f32 {sm}, [{ad}];")
    e(f"mul.f32 {f3}, {f3}, {sc};")
    h0, h1 = reg("h"), reg("h"); e(f"mov.b32 {{{h0}, {h1}}}, {dm};")
    dd, mm = reg("f"), reg("f"); e(f"cvt.f32.f16 {dd}, {h0};"); e(f"cvt.f32.f16 {mm}, {h1};")
    y = reg("f"); e(f"mul.f32 {y}, {mm}, {sm};"); e(f"fma.rn.f32 {y}, {dd}, {f3}, {y};")
    e(f"selp.f32 {y}, {y}, 0f00000000, {ok};")
    for ci in range(COLS):
        p = reg("p"); z = reg("f")
        e(f"setp.eq.u32 {p}, {col}, {ci};"); e(f"selp.f32 {z}, {y}, 0f00000000, {p};"); e(f"add.f32 {acc[ci]}, {acc[ci]}, {z};")
e("griddepcontrol.launch_dependents;")
for b in (16, 8, 4, 2, 1):
    for a in acc:
        t = reg("f"); e(f"shfl.sync.bfly.b32 {t}, {a}, {b}, 31, 0xffffffff;"); e(f"add.f32 {a}, {a}, {t};")
p0 = reg("p"); e(f"setp.ne.u32 {p0}, {lane}, 0;"); e(f"@{p0} bra DONE;")
for ci, a in enumerate(acc):
    ad = reg("rd"); cc = reg("r")
    e(f"add.u32 {cc}, {c0}, {ci};"); e(f"mul.wide.u32 {ad}, {cc}, 4;")
    r1, r2 = reg("rd"), reg("rd"); e(f"add.s64 {r1}, {P[3]}, {ad};"); e(f"add.s64 {r2}, {P[4]}, {ad};")
    v = reg("f"); e(f"ld.global.f32 {v}, [{r1}];"); e(f"add.f32 {v}, {v}, {a};"); e(f"st.global.f32 [{r2}], {v};")
L.append("DONE:")
e("ret;")
print(f""".version 8.0
.target sm_90
.address_size 64
.visible .entry proto_{N}_{K}_{COLS}(.param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u64 p3, .param .u64 p4)
.maxntid 128, 1, 1
{{
\t.reg .pred %p<{n['p']+1}>;
\t.reg .b32 %r<{n['r']+1}>;
\t.reg .f32 %f<{n['f']+1}>;
\t.reg .b64 %rd<{n['rd']+1}>;
\t.reg .b16 %h<{n['h']+1}>;
\t.shared .align 16 .b32 sl0[{QUADS}];
\t.shared .align 16 .b32 sl1[{QUADS}];
\t.shared .align 16 .b32 sl2[{QUADS}];
\t.shared .align 16 .b32 ssc[{BLOCKS}];
\t.shared .align 16 .b32 ssum[{BLOCKS}];
""" + "\n".join(L) + "\n}")
