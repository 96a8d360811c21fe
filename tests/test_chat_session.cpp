// `kvik chat` through the engine (server/chat_session.h): each turn renders the whole conversation, and the
// prefix cache serves the earlier turns, so turn 2 computes only what is new; the replies are those of the old
// path (the whole conversation prefilled again each turn, greedy), and the same with prefix caching off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "engine/engine_core.h"
#include "engine/single_sequence.h"
#include "model/llama.h"
#include "server/chat_session.h"
#include "synth_models.h"

namespace kvik {
namespace {

constexpr int32_t kBlock = 16;
const char* const kTemplate =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

EngineConfig config(bool prefix_caching) {
  EngineConfig c;
  c.max_model_len = 512;
  c.block_size = kBlock;
  c.num_kv_blocks = 128;
  c.enable_prefix_caching = prefix_caching;
  c.log_stats = false;
  return c;
}

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

// The old `kvik chat`: the whole conversation prefilled in a fresh sequence, argmax until EOS or max_tokens.
std::vector<int32_t> reprefill_greedy(LlamaModel& m, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                      int max_tokens) {
  SingleSequence s(m, 512);
  std::vector<float> logits = s.append(prompt);
  std::vector<int32_t> out;
  for (int n = 0; n < max_tokens; ++n) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tok.is_eog(next)) break;
    out.push_back(next);
    logits = s.append(std::span<const int32_t>(&next, 1));
  }
  return out;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

std::vector<server::ChatTurn> converse(LlamaModel& m, const Tokenizer& tok, bool prefix_caching) {
  EngineCore engine(m, config(prefix_caching), {tok.eos_id()});
  server::ChatSession s(engine, tok, "You tell short stories.", greedy(24));
  std::vector<server::ChatTurn> turns;
  for (const char* line : {"Tell me about a cat.", "And then the dog came.", "What happened next?"})
    turns.push_back(s.send(line));
  EXPECT_EQ(s.messages().size(), 7u);  // system + 3 × (user, assistant)
  return turns;
}

TEST(ChatSession, EachTurnPrefillsOnlyWhatIsNewAndRepliesAsTheOldPath) {
  auto model = LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  auto tok = test_models::stories_tokenizer(kTemplate);
  const std::vector<server::ChatTurn> turns = converse(*model, *tok, true);
  EXPECT_EQ(turns[0].cached_tokens, 0);
  for (size_t t = 0; t < turns.size(); ++t) {
    const server::ChatTurn& turn = turns[t];
    EXPECT_FALSE(turn.reply_ids.empty()) << t;
    EXPECT_EQ(turn.reply_ids, reprefill_greedy(*model, *tok, turn.prompt_ids, 24)) << "turn " << t;
    if (t == 0) continue;
    // The previous turn's prompt and reply, as the engine computed them, against this turn's prompt.
    const server::ChatTurn& prev = turns[t - 1];
    std::vector<int32_t> before = prev.prompt_ids;
    before.insert(before.end(), prev.reply_ids.begin(), prev.reply_ids.end());
    const size_t common = common_prefix(turn.prompt_ids, before);
    EXPECT_GE(common, prev.prompt_ids.size()) << "turn " << t << ": the rendering of the earlier turns changed";
    // Served from the cache: every full block of what the two share. Computed: at most what is new plus one
    // partial block.
    const auto len = static_cast<int64_t>(turn.prompt_ids.size());
    std::printf(
        "turn %zu: %lld prompt tokens, %zu shared with the previous turn's prompt + reply, %lld from the "
        "prefix cache, %lld computed\n",
        t, static_cast<long long>(len), common, static_cast<long long>(turn.cached_tokens),
        static_cast<long long>(len - turn.cached_tokens));
    EXPECT_LE(turn.cached_tokens, static_cast<int64_t>(common)) << t;
    EXPECT_LE(len - turn.cached_tokens, len - static_cast<int64_t>(common) + kBlock) << "turn " << t;
    EXPECT_GE(turn.cached_tokens, static_cast<int64_t>(prev.prompt_ids.size()) / kBlock * kBlock) << t;
  }
  // Prefix caching off: every turn computes its whole prompt, and the replies are the same.
  const std::vector<server::ChatTurn> uncached = converse(*model, *tok, false);
  for (size_t t = 0; t < turns.size(); ++t) {
    EXPECT_EQ(uncached[t].cached_tokens, 0);
    EXPECT_EQ(uncached[t].prompt_ids, turns[t].prompt_ids);
    EXPECT_EQ(uncached[t].reply_ids, turns[t].reply_ids) << "turn " << t;
  }
}

TEST(ChatSession, FallbackFormatWithoutATemplateAndStreamedText) {
  auto model = LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  auto tok = test_models::stories_tokenizer("");
  EngineCore engine(*model, config(true), {tok->eos_id()});
  server::ChatSession s(engine, *tok, "", greedy(8));
  std::string streamed;
  const server::ChatTurn turn = s.send("Once upon a time", [&](std::string_view piece) { streamed += piece; });
  EXPECT_EQ(streamed, turn.reply);
  EXPECT_EQ(turn.prompt_ids, tok->encode("user: Once upon a time\nassistant:", tok->add_bos(), false));
  EXPECT_EQ(turn.reply_ids, reprefill_greedy(*model, *tok, turn.prompt_ids, 8));
}

TEST(ChatSession, AConversationPastTheContextIsRefusedAndLeftAsItWas) {
  auto model = LlamaModel::load(KVIK_SOURCE_DIR "/models/stories260K.gguf");
  auto tok = test_models::stories_tokenizer(kTemplate);
  EngineCore engine(*model, config(true), {tok->eos_id()});
  server::ChatSession s(engine, *tok, "", greedy(8));
  s.send("Hello");
  const size_t before = s.messages().size();
  EXPECT_THROW(s.send(std::string(2000, 'a')), Error);
  EXPECT_EQ(s.messages().size(), before);
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_FALSE(s.send("Hello again").reply_ids.empty());  // the session goes on
}

}  // namespace
}  // namespace kvik
