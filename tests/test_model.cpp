#include <gtest/gtest.h>

#include "engine/sample/sampler.h"
#include "engine/single_sequence.h"
#include "model/llama.h"

using namespace kvik;

TEST(Model, StoriesGreedyMatchesLlamaCpp) {
  auto m = LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  SingleSequence s(*m, 256);
  std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  auto logits = s.append(prompt);
  std::vector<int32_t> expected = {432, 383, 286, 261, 376, 298, 315, 421};
  for (size_t i = 0; i < expected.size(); ++i) {
    int32_t tok = argmax(logits);
    auto p = softmax_probs(logits);
    printf("step %zu tok %d p %.6f\n", i, tok, p[tok]);
    EXPECT_EQ(tok, expected[i]);
    int32_t one[1] = {tok};
    logits = s.append(one);
  }
}
