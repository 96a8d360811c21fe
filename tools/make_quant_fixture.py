#!/usr/bin/env python3
"""Reference quantization data for every type `kvik quantize` writes, from llama.cpp's own code.

Uses the libggml-base.so / libggml-cpu-x64.so that node-llama-cpp 3.21.1 ships (the peer). Regenerate with
    bash ../shared/peer/setup.sh && python3 tools/make_quant_fixture.py /tmp/kvik-peer tests/data/quants_llamacpp.bin

Quantization goes through ggml_quantize_chunk(type, x, dst, 0, rows, 256, NULL): the very call llama-quantize
makes for a tensor without an importance matrix. Dequantization through ggml's dequantize_row_<type> /
ggml_{fp16,bf16}_to_fp32_row. Dot products through ggml's reference (generic) ggml_vec_dot_<type>_q8_<0|1>,
against activations quantized by quantize_row_q8_<0|1>_ref, one dot product per 256-element row.

File layout (little endian): "KVQ2", u32 rows, u32 cols, f32 input[rows*cols], f32 act[rows*cols]; u32 n_types;
per type: u32 ggml_type, u32 n_bytes, bytes of the quantized input, f32 dequantized[rows*cols], u32 n_dots
(0 or rows), f32 dots[n_dots].
Rows (256 elements each): Gaussian, Gaussian x1000, uniform, all zeros, constant, one spike, all negative,
heavy-tailed, denormals only, Gaussian with huge outliers (1e4..3e6, past fp16's range), zeros with a few tiny
values, half zeros / half Gaussian, mixed magnitudes per 32-block, a row of exact ties (integers), near-fp16-max
values, and a row of small positive values with one negative.
"""
import ctypes, glob, random, struct, sys

peer, out = sys.argv[1], sys.argv[2]
libdir = glob.glob(f"{peer}/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")[0]
base = ctypes.CDLL(f"{libdir}/libggml-base.so", mode=ctypes.RTLD_GLOBAL)
cpu = ctypes.CDLL(f"{libdir}/libggml-cpu-x64.so", mode=ctypes.RTLD_GLOBAL)
cpu.ggml_cpu_init()  # fills the fp16 table the CPU functions read scales through

rng = random.Random(20261201)
C = 256
def gauss(s=1.0, mu=0.0): return [rng.gauss(mu, s) for _ in range(C)]
rows = [
    gauss(),
    [v * 1000 for v in gauss(1, 0.3)],
    [rng.uniform(-1, 1) for _ in range(C)],
    [0.0] * C,
    [0.75] * C,
    [0.0] * 100 + [5.0] + [0.0] * 155,
    [-abs(v) for v in gauss(0.02)],
    [v ** 3 for v in gauss()],
    [rng.choice([-1, 1]) * rng.uniform(1e-45, 1e-38) for _ in range(C)],
    [v if i % 37 else v * rng.choice([1e4, -3e5, 3e6]) for i, v in enumerate(gauss())],
    [0.0 if i % 11 else rng.uniform(-1e-30, 1e-30) for i in range(C)],
    [0.0] * 128 + gauss()[:128],
    [v * 10 ** (i // 32 - 4) for i, v in enumerate(gauss())],
    [float(rng.randint(-8, 8)) for _ in range(C)],
    [rng.uniform(6e4, 6.5e4) * rng.choice([-1, 1]) for _ in range(C)],
    [rng.uniform(0.001, 0.01) for _ in range(C - 1)] + [-0.005],
]
R = len(rows)
N = R * C
x = (ctypes.c_float * N)(*[v for r in rows for v in r])
act = (ctypes.c_float * N)(*[rng.gauss(0, 1) for _ in range(N)])

# (name, ggml type id, bytes per 256 elements, dequantizer, vec_dot partner: 0 = q8_0, 1 = q8_1, None = no dot)
types = [
    ("f16", 1, 512, "ggml_fp16_to_fp32_row", None),
    ("bf16", 30, 512, "ggml_bf16_to_fp32_row", None),
    ("q8_0", 8, 8 * 34, "dequantize_row_q8_0", None),
    ("q4_0", 2, 8 * 18, "dequantize_row_q4_0", None),
    ("q4_1", 3, 8 * 20, "dequantize_row_q4_1", 1),
    ("q5_0", 6, 8 * 22, "dequantize_row_q5_0", 0),
    ("q5_1", 7, 8 * 24, "dequantize_row_q5_1", 1),
    ("iq4_nl", 20, 8 * 18, "dequantize_row_iq4_nl", 0),
    ("q4_K", 12, 144, "dequantize_row_q4_K", None),
    ("q5_K", 13, 176, "dequantize_row_q5_K", None),
    ("q6_K", 14, 210, "dequantize_row_q6_K", None),
]

act_q = {}
for partner, bb in ((0, 34), (1, 36)):
    buf = (ctypes.c_uint8 * (N // 32 * bb))()
    getattr(base, f"quantize_row_q8_{partner}_ref")(act, buf, ctypes.c_int64(N))
    act_q[partner] = buf

base.ggml_quantize_chunk.restype = ctypes.c_size_t
data = bytearray(b"KVQ2" + struct.pack("<II", R, C) + bytes(x) + bytes(act) + struct.pack("<I", len(types)))
for name, gid, bpr, deq, partner in types:
    nbytes = R * bpr
    q = (ctypes.c_uint8 * nbytes)()
    got = base.ggml_quantize_chunk(ctypes.c_int(gid), x, q, ctypes.c_int64(0), ctypes.c_int64(R), ctypes.c_int64(C), None)
    assert got == nbytes, (name, got, nbytes)
    y = (ctypes.c_float * N)()
    getattr(base, deq)(q, y, ctypes.c_int64(N))
    dots = []
    if partner is not None:
        fn = getattr(cpu, f"ggml_vec_dot_{name}_q8_{partner}_generic")
        abb = 34 if partner == 0 else 36
        for r in range(R):
            s = ctypes.c_float()
            wq = ctypes.cast(ctypes.addressof(q) + r * bpr, ctypes.c_void_p)
            aq = ctypes.cast(ctypes.addressof(act_q[partner]) + r * (C // 32) * abb, ctypes.c_void_p)
            fn(ctypes.c_int(C), ctypes.byref(s), ctypes.c_size_t(0), wq, ctypes.c_size_t(0), aq, ctypes.c_size_t(0), ctypes.c_int(1))
            dots.append(s.value)
    data += struct.pack("<II", gid, nbytes) + bytes(q) + bytes(y) + struct.pack("<I", len(dots))
    data += struct.pack(f"<{len(dots)}f", *dots)
open(out, "wb").write(data)
print(f"wrote {out}: {len(data)} bytes from {libdir}")
