// Random-weight models the tests share, written once per test process with kvik's own GGUF writer.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "model/synth.h"

namespace kvik::test_models {

// A small GQA Llama (d 128, 2 layers, 8 query / 2 KV heads, d_ff 256, vocab 512, context 1024) in the test's temp
// directory under `name`, with weights from `seed`.
inline std::string write_synth_gqa(const std::string& name, uint64_t seed) {
  SynthOptions o;
  o.out_path = ::testing::TempDir() + name;
  o.dim = 128;
  o.layers = 2;
  o.heads = 8;
  o.kv_heads = 2;
  o.ff = 256;
  o.vocab = 512;
  o.context = 1024;
  o.seed = seed;
  synth_llama_gguf(o);
  return o.out_path;
}

}  // namespace kvik::test_models
