# TEMPORARY numeric check of rendered PTX on a GPU (cupy). Not part of the crate.
import os, sys, struct, math
import numpy as np, cupy as cp
D = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(7)
fails = []
def ok(name, cond, msg=""):
    print(("ok   " if cond else "FAIL ") + name + (" " + msg if msg else ""))
    if not cond: fails.append(name)
def run(name, grid, block, *arrays):
    mod = cp.RawModule(path=os.path.join(D, name + ".ptx"))
    f = mod.get_function(name)
    devs = [cp.asarray(a) for a in arrays]
    g = grid if isinstance(grid, tuple) else (grid,)
    bl = block if isinstance(block, tuple) else (block,)
    f(g, bl, tuple(devs))
    cp.cuda.Device().synchronize()
    return [d.get() for d in devs]
N = 128 * 64
f32 = np.float32
# ---------- unary f32
specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1.0, -1.0], f32)
def inputs(lo, hi):
    x = rng.uniform(lo, hi, N).astype(f32); x[:len(specials)] = specials; return x
# exp
x = inputs(-87, 88); (_, y) = run("un_exp", N // 128, 128, x, np.zeros(N, f32))
ref = np.exp(x.astype(np.float64)); fin = np.isfinite(ref) & (ref > 1e-37) & (ref < 3e38)
rel = np.abs(y[fin] - ref[fin]) / ref[fin]
ok("exp", np.nanmax(rel) < 1e-5 and y[2] == np.inf and y[3] == 0 and np.isnan(y[4]), f"max rel {np.nanmax(rel):.3g}; |x|<16: {np.max(rel[np.abs(x[fin])<16]):.3g}")
for op, fn in [("sin", np.sin), ("cos", np.cos)]:
    for lo, hi in [(-7, 7), (-1e3, 1e3), (-1e5, 1e5), (-1e6, 1e6)]:
        x = inputs(lo, hi); (_, y) = run("un_" + op, N // 128, 128, x, np.zeros(N, f32))
        ref = fn(x.astype(np.float64)); m = np.isfinite(x)
        err = np.max(np.abs(y[m] - ref[m]))
        ok(f"{op} |x|<={hi:g}", err < 2e-6 and np.all(np.isnan(y[~m])), f"max abs {err:.3g}")
x = np.abs(inputs(1e-30, 1e30)); x[:9] = np.abs(specials)
(_, y) = run("un_rsqrt", N // 128, 128, x, np.zeros(N, f32))
ref = 1 / np.sqrt(x.astype(np.float64)); m = np.isfinite(ref) & (x > 0) & (ref < 1e38) & (ref > 1e-37)
rel = np.max(np.abs(y[m] - ref[m]) / ref[m]); ok("rsqrt", rel < 2 ** -22, f"max rel {rel:.3g} (2^{math.log2(rel):.2f})")
for op, fn in [("sqrt", lambda a: np.sqrt(a)), ("recip", lambda a: f32(1) / a), ("abs", np.abs), ("neg", np.negative)]:
    x = inputs(-1e30, 1e30); x = np.abs(x) if op == "sqrt" else x
    with np.errstate(all="ignore"):
        (_, y) = run("un_" + op, N // 128, 128, x, np.zeros(N, f32)); ref = fn(x).astype(f32)
    ok(op, np.array_equal(y.view(np.uint32)[~np.isnan(ref)], ref.view(np.uint32)[~np.isnan(ref)]) and np.all(np.isnan(y[np.isnan(ref)])))
# ---------- binary f32
a = inputs(-10, 10); b = inputs(-10, 10)[::-1].copy(); b[100] = np.nan; a[101] = np.nan
for op, fn in [("min", np.minimum), ("max", np.maximum), ("div", np.divide)]:
    with np.errstate(all="ignore"):
        (_, _, y) = run(f"bin_{op}_f32", N // 128, 128, a, b, np.zeros(N, f32)); ref = fn(a, b).astype(f32)
    nan = np.isnan(ref)
    ok(f"f32 {op}", np.all(np.isnan(y[nan])) and np.all(y[~nan] == ref[~nan]))
# ---------- integer
def wrap_i32(v): return ((v + 2**31) % 2**32 - 2**31)
def ref_int(op, s, a, b):
    out = []
    for p, q in zip(a.tolist(), b.tolist()):
        if op == "div":
            r = 0 if q == 0 else (abs(p) // abs(q)) * (1 if (p < 0) == (q < 0) else -1)
        elif op == "rem":
            r = 0 if q == 0 else p - q * ((abs(p) // abs(q)) * (1 if (p < 0) == (q < 0) else -1))
        elif op == "shl": r = p << (q & 31)
        elif op == "shr": r = p >> (q & 31)  # python >> is arithmetic on negatives, logical on u32 values
        elif op == "mul": r = p * q
        elif op == "min": r = min(p, q)
        out.append(wrap_i32(r) if s == "i32" else r % 2**32)
    return np.array(out, np.int32 if s == "i32" else np.uint32)
for s, dt in [("i32", np.int32), ("u32", np.uint32)]:
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, N, dtype=np.int64).astype(dt); b = rng.integers(-40 if s == "i32" else 0, 40, N).astype(dt)
    a[:6] = [info.min, info.min, 7, info.max, 0, 5]; b[:6] = [dt(-1) if s == "i32" else 1, 0, 0, 2, 0, 33 % 2**32]
    for op in ["div", "rem", "shl", "shr", "mul", "min"]:
        (_, _, y) = run(f"bin_{op}_{s}", N // 128, 128, a, b, np.zeros(N, dt))
        ref = ref_int(op, s, a, b)
        bad = np.nonzero(y != ref)[0]
        ok(f"{s} {op}", len(bad) == 0, "" if len(bad) == 0 else f"first bad {a[bad[0]]} {op} {b[bad[0]]}: got {y[bad[0]]} want {ref[bad[0]]}")
# ---------- cmp
a = inputs(-2, 2); b = a.copy(); b[::3] = inputs(-2, 2)[::3]
for op, fn in [("lt", np.less), ("le", np.less_equal), ("eq", np.equal), ("ne", np.not_equal), ("gt", np.greater), ("ge", np.greater_equal)]:
    (_, _, y) = run(f"cmp_{op}", N // 128, 128, a, b, np.zeros(N, np.uint32))
    ok(f"cmp {op}", np.array_equal(y, fn(a, b).astype(np.uint32)))
# ---------- conversions
x = inputs(-3e9, 5e9); x[20:30] = [0.5, -0.5, 1.9999, -1.9999, 2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 4294967040.0, 4294967296.0]
def sat(v, lo, hi):
    r = []
    for t in v.tolist():
        if math.isnan(t): r.append(0)
        elif math.isinf(t): r.append(hi if t > 0 else lo)
        else: r.append(max(lo, min(hi, int(t))))
    return np.array(r)
(_, y) = run("conv_f32_i32", N // 128, 128, x, np.zeros(N, np.int32)); ok("f32->i32", np.array_equal(y, sat(x, -2**31, 2**31 - 1).astype(np.int32)))
(_, y) = run("conv_f32_u32", N // 128, 128, x, np.zeros(N, np.uint32)); ok("f32->u32", np.array_equal(y, sat(x, 0, 2**32 - 1).astype(np.uint32)))
xi = rng.integers(-2**31, 2**31, N, dtype=np.int64).astype(np.int32)
(_, y) = run("conv_i32_f32", N // 128, 128, xi, np.zeros(N, f32)); ok("i32->f32", np.array_equal(y, xi.astype(f32)))
(_, y) = run("conv_u32_f32", N // 128, 128, xi.view(np.uint32), np.zeros(N, f32)); ok("u32->f32", np.array_equal(y, xi.view(np.uint32).astype(f32)))
(_, y) = run("conv_i32_u32", N // 128, 128, xi, np.zeros(N, np.uint32)); ok("i32->u32 bits", np.array_equal(y, xi.view(np.uint32)))
# ---------- halves
w = rng.integers(0, 2**32, N, dtype=np.int64).astype(np.uint32)
(_, y) = run("halves", N // 128, 128, w, np.zeros(4 * N, f32)); y = y.reshape(N, 4)
h = w.view(np.float16).reshape(N, 2).astype(f32)
bl = (w << 16).view(f32); bh = (w & 0xFFFF0000).view(f32)
def same(p, q): return np.array_equal(np.isnan(p), np.isnan(q)) and np.array_equal(p[~np.isnan(p)], q[~np.isnan(q)])
ok("f16 lo/hi", same(y[:, 0], h[:, 0]) and same(y[:, 1], h[:, 1])); ok("bf16 lo/hi", same(y[:, 2], bl) and same(y[:, 3], bh))
# ---------- loops
st = rng.integers(0, 200, N).astype(np.uint32); en = rng.integers(0, 400, N).astype(np.uint32)
st[:6] = [0xFFFFFFF0, 0xFFFFFFF0, 5, 0, 0xFFFFFFFE, 0x7FFFFFFF]; en[:6] = [0xFFFFFFFF, 0xFFFFFFF1, 5, 0, 0xFFFFFFFF, 0xFFFFFFFF]
for step in [1, 3, 8, 1 << 31]:
    (_, _, y) = run(f"loop_s{step}", N // 128, 128, st, en, np.zeros(2 * N, np.uint32)); y = y.reshape(N, 2)
    ref = []
    for s0, e0 in zip(st.tolist(), en.tolist()):
        r = range(s0, e0, step); x_ = 0
        for v in r: x_ ^= v
        ref.append((len(r), x_))
    ok(f"loop step {step}", np.array_equal(y, np.array(ref, np.uint32)))
# ---------- warp
x = rng.standard_normal(N).astype(f32); x[40] = np.nan; xi = rng.integers(-1000, 1000, N).astype(np.int32); xi[64:96] = np.abs(xi[64:96]) + 1
(_, _, y, yi) = run("warp", N // 128, 128, x, xi, np.zeros(8 * N, f32), np.zeros(8 * N, np.int32)); y = y.reshape(N, 8); yi = yi.reshape(N, 8)
xw = x.reshape(-1, 32); iw = xi.reshape(-1, 32)
good = True
for wi in range(N // 32):
    r = y[wi * 32:(wi + 1) * 32]; ri = yi[wi * 32:(wi + 1) * 32]
    same_bits = all(np.unique(r[:, k].view(np.uint32)).size == 1 for k in range(3))
    s = xw[wi].astype(np.float64).sum()
    good &= same_bits and ((np.isnan(s) and np.isnan(r[0, 0])) or abs(r[0, 0] - s) < 1e-4)
    good &= (np.isnan(r[0, 1]) if np.isnan(xw[wi]).any() else r[0, 1] == xw[wi].max()) and (np.isnan(r[0, 2]) if np.isnan(xw[wi]).any() else r[0, 2] == xw[wi].min())
    good &= np.array_equal(r[:, 3].view(np.uint32), xw[wi][np.arange(32) ^ 5].view(np.uint32))
    good &= ri[0, 0] == iw[wi].sum() and ri[0, 1] == iw[wi].max() and ri[0, 2] == iw[wi].min() and ri[0, 3] == np.bitwise_or.reduce(iw[wi])
    good &= np.array_equal(ri[:, 4], iw[wi][np.arange(32) ^ 17]) and ri[0, 5] == int((iw[wi] > 0).any()) and ri[0, 6] == int((iw[wi] > 0).all())
    good &= np.array_equal(ri[:, 7], np.arange(32))
ok("warp reduce/shuffle/vote/lane", bool(good))
# ---------- golden cases
R = 40; xv = rng.standard_normal(1024).astype(f32); wv = rng.standard_normal(R * 1024).astype(f32)
(_, _, o) = run("dot_x4", R, 32, xv, wv, np.zeros(R, f32)); ref = wv.reshape(R, 1024).astype(np.float64) @ xv
ok("dot_x4", np.max(np.abs(o - ref)) < 1e-3, f"max abs {np.max(np.abs(o - ref)):.3g}")
G = 8; xs = rng.standard_normal(G * 256).astype(f32); words = rng.integers(0, 2**32, 1024, dtype=np.int64).astype(np.uint32)
(_, w2, o) = run("shared_reduce", G, (16, 16), xs, words.copy(), np.zeros(G, f32))
ok("shared_reduce", np.max(np.abs(o - xs.reshape(G, 256).astype(np.float64).sum(1))) < 1e-3 and np.array_equal(w2, words))
xe = rng.standard_normal(64 * 4).astype(f32)
(_, _, codes) = run("if_else", 4, 64, xe, np.zeros(2 * 256 + 2, f32), np.zeros(256, np.uint32))
ok("if_else codes", np.array_equal(codes, np.where(xe > 0, 1, 2).astype(np.uint32)))
lens = rng.integers(0, 50, 64).astype(np.uint32)
(_, o) = run("divergent_loop", 1, 64, lens, np.zeros(64, np.uint32))
ref = []
for t, n in enumerate(lens.tolist()):
    a_, b_ = 0, 1
    for _ in range(n): a_, b_ = b_, (a_ + b_) % 2**32
    c = a_
    for i in range(t, 1000, 7):
        p = (c, i)
        for _ in range(0, i, 3): p = (p[1], p[0])
        c = p[0] ^ p[1]
    ref.append((c + b_) % 2**32)
ok("divergent_loop", np.array_equal(o, np.array(ref, np.uint32)))
for name, grid, block, arrs in [("ops_f32", 1, 64, [rng.standard_normal(512).astype(f32), np.zeros(512, f32), np.zeros(64, np.uint32)]),
                                ("ops_int", 1, 64, [rng.integers(-99, 99, 64).astype(np.int32), rng.integers(0, 99, 512).astype(np.uint32), np.zeros(64, np.int32), np.zeros(64, np.uint32)]),
                                ("subgroup_ops", (2, 2, 2), (64, 2), [rng.standard_normal(1024).astype(f32), np.zeros(512, f32), np.zeros(512, np.uint32)]),
                                ("conversions", 1, 256, [rng.integers(0, 2**32, 1024, dtype=np.int64).astype(np.uint32), np.zeros(1024, f32), np.zeros(256, np.int32), np.zeros(256, np.uint32)]),
                                ("atomics", 4, 128, [np.zeros(4, f32), np.zeros(4, np.int32), np.zeros(4, np.uint32)])]:
    run(name, grid, block, *arrs); ok(f"{name} runs", True)
# traps last: the fault poisons the context
(_, y) = run("traps", 1, 32, np.array([32], np.uint32), rng.standard_normal(64).astype(f32)); ok("traps: no trap when in bounds", True)
try:
    run("traps", 1, 32, np.array([16], np.uint32), rng.standard_normal(64).astype(f32)); ok("trap faults", False)
except Exception as e:
    ok("trap faults", True, type(e).__name__ + ": " + str(e)[:80])
print("FAILURES:", fails)
