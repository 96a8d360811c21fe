#!/usr/bin/env python3
"""Reference K-quant data from llama.cpp's own code (libggml-base.so shipped with node-llama-cpp).

Regenerate (after `bash ../shared/peer/setup.sh`):
    python3 tools/make_kquant_fixture.py /tmp/kvik-peer tests/data/kquants_llamacpp.bin

File layout (little endian): magic "KVKQ", u32 n_floats, f32 input[n_floats]; then for each type in
(q4_K, q5_K, q6_K, q8_K): u32 ggml_type, u32 n_bytes, the bytes of quantize_row_<type>_ref(input),
f32 dequantize_row_<type>(those bytes)[n_floats]. Q8_K is only quantized (its dequantized floats follow too).
The input holds 8 blocks of 256: Gaussian, Gaussian ×1000, uniform, all-zero, constant, one spike, all
negative, and a heavy-tailed block.
"""
import ctypes, glob, math, random, struct, sys

peer, out = sys.argv[1], sys.argv[2]
lib_path = glob.glob(f"{peer}/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so")[0]
lib = ctypes.CDLL(lib_path)

rng = random.Random(20240607)
blocks = [
    [rng.gauss(0, 1) for _ in range(256)],
    [rng.gauss(0.3, 1) * 1000 for _ in range(256)],
    [rng.uniform(-1, 1) for _ in range(256)],
    [0.0] * 256,
    [0.75] * 256,
    [0.0] * 100 + [5.0] + [0.0] * 155,
    [-abs(rng.gauss(0, 0.02)) for _ in range(256)],
    [rng.gauss(0, 1) ** 3 for _ in range(256)],
]
x = [v for b in blocks for v in b]
n = len(x)
xin = (ctypes.c_float * n)(*x)

types = [("q4_K", 12, 144), ("q5_K", 13, 176), ("q6_K", 14, 210), ("q8_K", 15, 292)]
data = bytearray(b"KVKQ" + struct.pack("<I", n) + struct.pack(f"<{n}f", *xin))
for name, gid, bb in types:
    nbytes = n // 256 * bb
    q = (ctypes.c_uint8 * nbytes)()
    getattr(lib, f"quantize_row_{name}_ref")(xin, q, ctypes.c_int64(n))
    y = (ctypes.c_float * n)()
    getattr(lib, f"dequantize_row_{name}")(q, y, ctypes.c_int64(n))
    data += struct.pack("<II", gid, nbytes) + bytes(q) + struct.pack(f"<{n}f", *y)
open(out, "wb").write(data)
print(f"wrote {out}: {len(data)} bytes from {lib_path}")
