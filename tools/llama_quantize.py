#!/usr/bin/env python3
"""llama.cpp's quantizer without building llama.cpp: calls llama_model_quantize() (the function llama-quantize's
main() calls) in the libllama.so that node-llama-cpp ships (the peer, /tmp/kvik-peer by default).

    python3 tools/llama_quantize.py IN.gguf OUT.gguf MIX [--threads N] [--leave-output-tensor]
        [--output-tensor-type T] [--token-embedding-type T]

Prints the seconds llama_model_quantize took on stdout (llama.cpp's own log goes to stderr).
"""
import argparse, ctypes, os, sys, time

MIXES = {"q8_0": 7, "q4_0": 2, "q4_1": 3, "q5_0": 8, "q5_1": 9, "iq4_nl": 25, "q4_k_s": 14, "q4_k_m": 15, "q4_k": 15,
         "q5_k_s": 16, "q5_k_m": 17, "q5_k": 17, "q6_k": 18, "f16": 1, "bf16": 32}
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "q4_k": 12, "q5_k": 13,
              "q6_k": 14, "iq4_nl": 20, "bf16": 30}

_lib = None


def _load(peer):
    global _lib
    if _lib is None:
        libdir = f"{peer}/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
        ctypes.CDLL(f"{libdir}/libggml-base.so", mode=ctypes.RTLD_GLOBAL)
        _lib = ctypes.CDLL(f"{libdir}/libllama.v0.4.0.so", mode=ctypes.RTLD_GLOBAL)
        # llama_model_quantize_params is returned by value; at 64 bytes it comes back through a hidden pointer
        _lib.llama_model_quantize_default_params.restype = ctypes.c_void_p
        _lib.llama_model_quantize_default_params.argtypes = [ctypes.c_void_p]
        _lib.llama_model_quantize.restype = ctypes.c_uint32
        _lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
    return _lib


def llama_quantize(src, dst, mix, threads=0, leave_output=False, output_type=None, embd_type=None,
                   peer=os.environ.get("KVIK_PEER_DIR", "/tmp/kvik-peer")):
    """Runs llama_model_quantize; returns its wall time in seconds."""
    lib = _load(peer)
    # llama.h: i32 nthread, i32 ftype, i32 output_tensor_type, i32 token_embedding_type, bool allow_requantize,
    # bool quantize_output_tensor, bool only_copy, bool pure, bool keep_split, bool dry_run, pointers, size_t
    p = ctypes.create_string_buffer(512)
    lib.llama_model_quantize_default_params(p)
    ctypes.c_int32.from_buffer(p, 0).value = threads
    ctypes.c_int32.from_buffer(p, 4).value = MIXES[mix]
    if output_type: ctypes.c_int32.from_buffer(p, 8).value = GGML_TYPES[output_type]
    if embd_type: ctypes.c_int32.from_buffer(p, 12).value = GGML_TYPES[embd_type]
    if leave_output: ctypes.c_bool.from_buffer(p, 17).value = False
    t0 = time.perf_counter()
    if lib.llama_model_quantize(src.encode(), dst.encode(), p) != 0:
        raise SystemExit(f"llama_model_quantize failed: {src} -> {dst} ({mix})")
    return time.perf_counter() - t0


if __name__ == "__main__":
    a = argparse.ArgumentParser()
    a.add_argument("input"); a.add_argument("output"); a.add_argument("mix", choices=sorted(MIXES))
    a.add_argument("--threads", type=int, default=0)
    a.add_argument("--leave-output-tensor", action="store_true")
    a.add_argument("--output-tensor-type"); a.add_argument("--token-embedding-type")
    o = a.parse_args()
    print(f"{llama_quantize(o.input, o.output, o.mix, o.threads, o.leave_output_tensor, o.output_tensor_type, o.token_embedding_type):.6f}")
