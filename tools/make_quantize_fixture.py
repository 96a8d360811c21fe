#!/usr/bin/env python3
"""What llama.cpp's quantizer writes for every mix `kvik quantize` offers: tests/fixtures/llama_quantize_hashes.json.

The reference is llama.cpp's own llama_model_quantize() (the function llama-quantize's main() calls), from the
libllama.so that node-llama-cpp 3.21.1 ships (the peer; no importance matrix, default parameters otherwise).
Regenerate (after `bash ../shared/peer/setup.sh` and building kvik):
    python3 tools/make_quantize_fixture.py /tmp/kvik-peer build/kvik tests/fixtures/llama_quantize_hashes.json

Models: stories260K (F32, dim 64: every K-quant falls back, ffn_down's 172 columns fall back to F16), and random
models written by `kvik synth` (F32 and F16/BF16 weights, dim 256 so the K-quant recipes apply; 8 layers so the
layer-dependent choices of attn_v and ffn_down differ from layer to layer; 4 query heads per KV head, the grouped
attention rule of iq4_nl). For each (model, mix, options) the fixture keeps the SHA-256 of the whole output file and,
for diagnosis, the first 16 hex digits of each tensor's data SHA-256, with the tensor's type.
"""
import hashlib, json, os, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_quantize import MIXES as ALL_MIXES, GGML_TYPES, llama_quantize  # noqa: E402

peer, kvik, out = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ["KVIK_PEER_DIR"] = peer
MIXES = [m for m in ALL_MIXES if m not in ("q4_k", "q5_k")]  # the aliases write the same files as the _m mixes
TYPE_NAMES = {v: k for k, v in GGML_TYPES.items()}
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 12: (256, 144),
          13: (256, 176), 14: (256, 210), 20: (32, 18), 30: (1, 2)}  # ggml type: (block elements, block bytes)


def gguf_tensors(path):
    """(name, ggml type, data bytes) of every tensor of a GGUF v3 file, in file order."""
    b = open(path, "rb").read()
    pos = 4 + 4
    n_t, n_kv = struct.unpack_from("<QQ", b, pos); pos += 16
    def rstr():
        nonlocal pos
        n, = struct.unpack_from("<Q", b, pos); pos += 8
        s = b[pos:pos + n]; pos += n
        return s.decode()
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def skip(t):
        nonlocal pos
        if t == 8: rstr()
        elif t == 9:
            et, n = struct.unpack_from("<IQ", b, pos); pos += 12
            for _ in range(n): skip(et)
        else: pos += sizes[t]
    align = 32
    for _ in range(n_kv):
        k = rstr(); t, = struct.unpack_from("<I", b, pos); pos += 4
        if k == "general.alignment": align = struct.unpack_from("<I", b, pos)[0]
        skip(t)
    infos = []
    for _ in range(n_t):
        name = rstr(); nd, = struct.unpack_from("<I", b, pos); pos += 4
        dims = struct.unpack_from(f"<{nd}Q", b, pos); pos += 8 * nd
        t, off = struct.unpack_from("<IQ", b, pos); pos += 12
        rows = 1
        for x in dims[1:]: rows *= x
        bs, bb = BLOCKS[t]
        infos.append((name, t, off, rows * dims[0] // bs * bb))
    data = (pos + align - 1) // align * align
    return [(name, t, b[data + off:data + off + n]) for name, t, off, n in infos]


def sha(b): return hashlib.sha256(b).hexdigest()


def entry(model_path, mix, **opts):
    with tempfile.TemporaryDirectory() as d:
        dst = os.path.join(d, "out.gguf")
        llama_quantize(model_path, dst, mix, threads=2, peer=peer, **opts)
        data = open(dst, "rb").read()
        # per-tensor hashes cover each tensor's data without the alignment padding (the file hash covers all)
        tensors = [{"name": name, "type": TYPE_NAMES.get(t, str(t)), "sha256_16": sha(raw)[:16]} for name, t, raw in gguf_tensors(dst)]
        return {"mix": mix, "options": {k: v for k, v in opts.items() if v}, "size": len(data), "sha256": sha(data),
                "tensors": tensors}


stories = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../shared/models/stories260K.gguf"))
tmp = tempfile.mkdtemp()
synth = [
    ("synth_f32", ["--type", "f32", "--seed", "7"]),
    ("synth_f16", ["--type", "f16", "--seed", "8"]),
    ("synth_bf16", ["--type", "bf16", "--seed", "9"]),
]
shape = ["--dim", "256", "--layers", "8", "--heads", "8", "--kv-heads", "2", "--ff", "768", "--vocab", "512",
         "--tokenizer-from", stories]
models = [{"name": "stories260K", "path": stories}]
for name, args in synth:
    path = os.path.join(tmp, name + ".gguf")
    subprocess.run([kvik, "synth", path] + shape + args, check=True, capture_output=True)
    models.append({"name": name, "path": path, "synth": shape[:-2] + args})

fixture = {"how": "llama_model_quantize() of llama.cpp (libllama.so of node-llama-cpp 3.21.1, the peer), default "
                  "parameters, no importance matrix; tools/make_quantize_fixture.py",
           "models": []}
for m in models:
    raw = open(m["path"], "rb").read()
    runs = [entry(m["path"], mix) for mix in MIXES]
    if m["name"] in ("stories260K", "synth_f32"):
        runs.append(entry(m["path"], "q4_k_m", leave_output=True))
        runs.append(entry(m["path"], "q4_0", output_type="q5_1", embd_type="iq4_nl"))
        runs.append(entry(m["path"], "q5_k_s", embd_type="q8_0"))
    fixture["models"].append({"name": m["name"], "input_sha256": sha(raw), "input_size": len(raw),
                              **({"synth": m["synth"]} if "synth" in m else {}), "runs": runs})
    print(m["name"], "done", file=sys.stderr)
json.dump(fixture, open(out, "w"), indent=0)
print(f"wrote {out}", file=sys.stderr)
