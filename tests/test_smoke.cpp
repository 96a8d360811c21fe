#include <gtest/gtest.h>
#include "formats/gguf.h"
TEST(Smoke, OpensStories) {
  auto g = kvik::GgufFile::open(KVIK_SHARED_DIR "/models/stories260K.gguf");
  EXPECT_GT(g->tensors().size(), 0u);
}
