// Tokenizer tests. Reference ids: tests/fixtures/tokenize_stories260k.json, made by
// tools/make_tokenizer_fixture.mjs from llama.cpp (node-llama-cpp); see tools/README.md.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvik {
namespace {

constexpr const char* kModel = KVIK_SOURCE_DIR "/models/stories260K.gguf";
constexpr const char* kFixture = KVIK_SOURCE_DIR "/tests/fixtures/tokenize_stories260k.json";

struct Case {
  std::string text;
  std::vector<int32_t> ids;  // llama.cpp's, without BOS
};

struct Fixture {
  int32_t bos = -1;
  std::vector<Case> cases;    // parse_special = false
  std::vector<Case> special;  // parse_special = true
};

const Fixture& fixture() {
  static const Fixture f = [] {
    std::ifstream in(kFixture);
    EXPECT_TRUE(in) << kFixture;
    const auto j = nlohmann::json::parse(in);
    Fixture out;
    out.bos = j.at("bos").get<int32_t>();
    for (const auto& c : j.at("cases")) out.cases.push_back({c.at("text"), c.at("ids")});
    for (const auto& c : j.at("special")) out.special.push_back({c.at("text"), c.at("ids")});
    return out;
  }();
  return f;
}

struct Loaded {
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> tokenizer;
};

const Tokenizer& stories() {
  static const Loaded loaded = [] {
    Loaded l;
    l.gguf = GgufFile::open(kModel);
    l.tokenizer = load_tokenizer_from_gguf(*l.gguf);
    return l;
  }();
  return *loaded.tokenizer;
}

std::vector<int32_t> with_bos(int32_t bos, const std::vector<int32_t>& ids) {
  std::vector<int32_t> out{bos};
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

// Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    int need;
    uint32_t cp;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      need = 1, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      need = 2, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      need = 3, cp = b & 0x07;
    } else {
      return false;
    }
    if (i + need >= s.size()) return false;
    for (int k = 1; k <= need; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[need] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += need + 1;
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  return out;
}

// --- against llama.cpp -------------------------------------------------------------------------------------

TEST(SpmTokenizer, FixtureHasEnoughCases) {
  EXPECT_GE(fixture().cases.size(), 250u);
  EXPECT_EQ(fixture().bos, stories().bos_id());
}

TEST(SpmTokenizer, EncodeMatchesLlamaCppTokenForToken) {
  const Tokenizer& tok = stories();
  int mismatches = 0;
  for (const Case& c : fixture().cases) {
    const auto ids = tok.encode(c.text, /*add_bos=*/true, /*parse_special=*/false);
    EXPECT_EQ(ids, with_bos(tok.bos_id(), c.ids)) << "text: \"" << printable(c.text) << "\"";
    mismatches += ids != with_bos(tok.bos_id(), c.ids);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(SpmTokenizer, ParseSpecialMatchesLlamaCpp) {
  const Tokenizer& tok = stories();
  ASSERT_FALSE(fixture().special.empty());
  for (const Case& c : fixture().special) {
    EXPECT_EQ(tok.encode(c.text, true, /*parse_special=*/true), with_bos(tok.bos_id(), c.ids))
        << "text: \"" << printable(c.text) << "\"";
  }
}

TEST(SpmTokenizer, SpecialTextIsLiteralWithoutParseSpecial) {
  const Tokenizer& tok = stories();
  const auto ids = tok.encode("<s>hi</s>", false, false);
  for (int32_t id : ids) EXPECT_FALSE(tok.is_special(id)) << id;
  EXPECT_EQ(tok.encode("<s>", false, true), std::vector<int32_t>{tok.bos_id()});
  EXPECT_EQ(tok.encode("</s>", false, true), std::vector<int32_t>{tok.eos_id()});
}

// --- decode ------------------------------------------------------------------------------------------------

TEST(SpmTokenizer, DecodeOfEncodeIsIdentity) {
  const Tokenizer& tok = stories();
  for (const Case& c : fixture().cases) {
    // A literal U+2581 is SentencePiece's space marker: it decodes to ' ' (see the next test).
    if (c.text.find("\xE2\x96\x81") != std::string::npos) continue;
    const auto ids = tok.encode(c.text, true, false);
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), c.text) << "text: \"" << printable(c.text) << "\"";
  }
}

TEST(SpmTokenizer, LiteralSpaceMarkerDecodesAsSpace) {
  // Same as llama.cpp (and SentencePiece): "a▁b" and "a b" encode alike.
  const Tokenizer& tok = stories();
  EXPECT_EQ(tok.encode("a\xE2\x96\x81"
                       "b",
                       true, false),
            tok.encode("a b", true, false));
  EXPECT_EQ(tok.decode(tok.encode("a\xE2\x96\x81"
                                  "b",
                                  true, false),
                       true),
            "a b");
}

TEST(SpmTokenizer, DecodeKeepsSpecialTextUnlessSkipped) {
  const Tokenizer& tok = stories();
  const std::vector<int32_t> ids = tok.encode("Hi", true, false);
  EXPECT_EQ(tok.decode(ids, true), "Hi");
  EXPECT_EQ(tok.decode(ids, false), "<s>Hi");
  // Without a leading BOS nothing is stripped: the space belongs to the text.
  EXPECT_EQ(tok.decode(std::span(ids).subspan(1), true), " Hi");
}

TEST(SpmTokenizer, InvalidUtf8GoesThroughByteFallback) {
  const Tokenizer& tok = stories();
  const std::vector<std::string> inputs = {"\xFF",
                                           "\xC3",
                                           "a\xC3(b",
                                           "\xE2\x82",
                                           "\x80\x80\x80",
                                           "\xF0\x9F\x98",
                                           "\xED\xA0\x80",
                                           "ok \xF8\x88\x80\x80\x80 ok",
                                           std::string("nul\0byte", 8)};
  for (const std::string& s : inputs) {
    const auto ids = tok.encode(s, true, false);
    for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < tok.vocab_size());
    EXPECT_EQ(tok.decode(ids, true), s) << printable(s);
  }
  // Byte tokens are <0xNN> with uppercase hex: "\xFF" is "▁" then <0xFF>.
  const auto ids = tok.encode("\xFF", false, false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(tok.token_text(ids[1]), "<0xFF>");
  EXPECT_EQ(tok.token_to_piece(ids[1]), "\xFF");
}

TEST(SpmTokenizer, RandomBytesRoundTripAndStreamValidUtf8) {
  const Tokenizer& tok = stories();
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int iter = 0; iter < 300; ++iter) {
    std::string s(next() % 40, '\0');
    for (char& c : s) c = static_cast<char>(next() % 4 == 0 ? "a \xC3\xE2\xF0\x80\xBF\xFF"[next() % 8] : next());
    if (s.find("\xE2\x96\x81") != std::string::npos) continue;
    const auto ids = tok.encode(s, true, iter % 2 == 0);
    if (iter % 2 == 1) {
      // A truncated lead byte right before a space swallows part of the escaped "▁" into its symbol, so
      // that "▁" leaves through byte fallback and decodes as its three bytes (llama.cpp does the same).
      std::string decoded = tok.decode(ids, true);
      for (size_t p; (p = decoded.find("\xE2\x96\x81")) != std::string::npos;) decoded.replace(p, 3, " ");
      EXPECT_EQ(decoded, s) << printable(s);
    }
    StreamingDetokenizer detok(tok);
    for (int32_t id : ids) EXPECT_TRUE(is_valid_utf8(detok.push(id)));
    EXPECT_TRUE(is_valid_utf8(detok.flush()));
  }
}

TEST(SpmTokenizer, VocabAndSpecialIdsFromGguf) {
  const Tokenizer& tok = stories();
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(tok.is_eog(2));
  EXPECT_FALSE(tok.is_eog(1));
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(300));
  EXPECT_EQ(tok.token_text(1), "<s>");
  EXPECT_THROW(tok.token_text(512), Error);
  EXPECT_THROW(tok.token_to_piece(-1), Error);
  EXPECT_EQ(tok.encode("", true, false), std::vector<int32_t>{1});
  EXPECT_TRUE(tok.encode("", false, false).empty());
}

// --- streaming ---------------------------------------------------------------------------------------------

std::string stream_all(const Tokenizer& tok, std::span<const int32_t> prompt, std::span<const int32_t> generated,
                       const std::string& label) {
  StreamingDetokenizer detok(tok, prompt);
  std::string out;
  for (int32_t id : generated) {
    const std::string chunk = detok.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk)) << label;
    out += chunk;
  }
  const std::string tail = detok.flush();
  EXPECT_TRUE(is_valid_utf8(tail)) << label;
  return out + tail;
}

TEST(StreamingDetokenizer, PushingIdsOneByOneReproducesDecode) {
  const Tokenizer& tok = stories();
  for (const Case& c : fixture().cases) {
    const auto ids = tok.encode(c.text, true, false);
    const std::string label = "text: \"" + printable(c.text) + "\"";
    EXPECT_EQ(stream_all(tok, {}, ids, label), tok.decode(ids, true)) << label;
    // The same ids generated after a BOS-only prompt: the first token still loses the prefix space.
    const std::vector<int32_t> prompt{ids.front()};
    EXPECT_EQ(stream_all(tok, prompt, std::span(ids).subspan(1), label), tok.decode(ids, true)) << label;
  }
}

TEST(StreamingDetokenizer, HoldsPartialCharacterUntilComplete) {
  const Tokenizer& tok = stories();
  const auto ids = tok.encode("😀", false, false);  // "▁" + four byte tokens
  ASSERT_EQ(ids.size(), 5u);
  StreamingDetokenizer detok(tok, std::vector<int32_t>{5, 6});  // any prompt: no BOS rule
  EXPECT_EQ(detok.push(ids[0]), " ");
  EXPECT_EQ(detok.push(ids[1]), "");
  EXPECT_EQ(detok.push(ids[2]), "");
  EXPECT_EQ(detok.push(ids[3]), "");
  EXPECT_EQ(detok.push(ids[4]), "😀");
  EXPECT_EQ(detok.flush(), "");
}

TEST(StreamingDetokenizer, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer& tok = stories();
  auto byte = [&](int b) { return tok.encode(std::string(1, static_cast<char>(b)), false, false).back(); };
  StreamingDetokenizer detok(tok);
  EXPECT_EQ(detok.push(byte(0xFF)), "\uFFFD");
  EXPECT_EQ(detok.push(byte(0xE2)), "");
  EXPECT_EQ(detok.push(byte('A')), "\uFFFDA");  // E2 then a non-continuation byte
  EXPECT_EQ(detok.push(byte(0xF0)), "");
  EXPECT_EQ(detok.push(byte(0x9F)), "");
  EXPECT_EQ(detok.flush(), "\uFFFD");  // stream ended inside a character
}

TEST(StreamingDetokenizer, SkipsControlTokens) {
  const Tokenizer& tok = stories();
  StreamingDetokenizer detok(tok, std::vector<int32_t>{tok.bos_id()});
  std::string out;
  for (int32_t id : tok.encode("Hi", false, false)) out += detok.push(id);
  out += detok.push(tok.eos_id());
  EXPECT_EQ(out + detok.flush(), "Hi");
}

// --- synthetic vocabularies --------------------------------------------------------------------------------

struct VocabSpec {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

GgufWriter writer_for(const VocabSpec& v) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_array_string("tokenizer.ggml.tokens", v.tokens);
  w.set_array_f32("tokenizer.ggml.scores", v.scores);
  w.set_array_i32("tokenizer.ggml.token_type", v.types);
  return w;
}

// <unk> <s> </s> <0x00>..<0xFF>, then `extra` normal tokens with the given scores.
VocabSpec small_vocab(const std::vector<std::pair<std::string, float>>& extra) {
  VocabSpec v{{"<unk>", "<s>", "</s>"}, {0, 0, 0}, {2, 3, 3}};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.scores.push_back(0);
    v.types.push_back(6);
  }
  for (const auto& [text, score] : extra) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.types.push_back(1);
  }
  return v;
}

std::unique_ptr<Tokenizer> load(const GgufWriter& w, std::unique_ptr<GgufFile>& keep) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  keep = GgufFile::parse(bytes, "synthetic.gguf");
  return load_tokenizer_from_gguf(*keep);
}

// Asserts that loading throws kvik::Error whose message contains `needle`.
void expect_load_error(const GgufWriter& w, const std::string& needle) {
  std::unique_ptr<GgufFile> keep;
  try {
    load(w, keep);
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SpmTokenizer, MergesHighestScoreFirstThenLeftmost) {
  // "▁aaa": "aa" (score -1) beats "▁a" (-2); the two "aa" pairs tie and the left one wins.
  const VocabSpec v = small_vocab({{"▁", -5}, {"a", -5}, {"aa", -1}, {"▁a", -2}});
  std::unique_ptr<GgufFile> keep;
  const auto tok = load(writer_for(v), keep);
  const int32_t sp = 259, a = 260, aa = 261, sp_a = 262;
  EXPECT_EQ(tok->encode("aaa", false, false), (std::vector<int32_t>{sp, aa, a}));
  EXPECT_EQ(tok->encode("a", false, false), (std::vector<int32_t>{sp_a}));
  EXPECT_EQ(tok->encode("b", false, false), (std::vector<int32_t>{sp, 3 + 'b'}));  // byte fallback
}

TEST(SpmTokenizer, UserDefinedTokensAreMatchedEvenWithoutParseSpecial) {
  VocabSpec v = small_vocab({{"▁", -5}, {"a", -5}});
  v.tokens.push_back("<tool>");
  v.scores.push_back(0);
  v.types.push_back(4);
  std::unique_ptr<GgufFile> keep;
  const auto tok = load(writer_for(v), keep);
  const int32_t sp = 259, a = 260, tool = 261;
  // The fragment after a special token gets the space prefix again (llama.cpp's is_prev_special).
  EXPECT_EQ(tok->encode("a<tool>a", false, false), (std::vector<int32_t>{sp, a, tool, sp, a}));
}

TEST(SpmTokenizer, AddSpacePrefixFalseAddsNoMarker) {
  const VocabSpec v = small_vocab({{"▁", -5}, {"a", -5}});
  GgufWriter w = writer_for(v);
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  std::unique_ptr<GgufFile> keep;
  const auto tok = load(w, keep);
  EXPECT_EQ(tok->encode("a a", true, false), (std::vector<int32_t>{1, 260, 259, 260}));
  EXPECT_EQ(tok->decode(tok->encode(" a", true, false), true), " a");
}

TEST(SpmTokenizerLoad, MismatchedScoresLengthNamesTheKey) {
  VocabSpec v = small_vocab({{"a", -1}});
  v.scores.pop_back();
  expect_load_error(writer_for(v), "tokenizer.ggml.scores");
}

TEST(SpmTokenizerLoad, MismatchedTokenTypeLengthNamesTheKey) {
  VocabSpec v = small_vocab({{"a", -1}});
  v.types.push_back(1);
  expect_load_error(writer_for(v), "tokenizer.ggml.token_type");
}

TEST(SpmTokenizerLoad, UnknownTokenTypeNamesTheKey) {
  VocabSpec v = small_vocab({{"a", -1}});
  v.types.back() = 42;
  expect_load_error(writer_for(v), "tokenizer.ggml.token_type");
}

TEST(SpmTokenizerLoad, BosIdPastTheVocabNamesTheKey) {
  GgufWriter w = writer_for(small_vocab({{"a", -1}}));
  w.set_u32("tokenizer.ggml.bos_token_id", 100000);
  expect_load_error(w, "tokenizer.ggml.bos_token_id");
}

TEST(SpmTokenizerLoad, EosIdPastTheVocabNamesTheKey) {
  GgufWriter w = writer_for(small_vocab({{"a", -1}}));
  w.set_u32("tokenizer.ggml.eos_token_id", 260);
  expect_load_error(w, "tokenizer.ggml.eos_token_id");
}

TEST(SpmTokenizerLoad, EmptyVocabNamesTheKey) { expect_load_error(writer_for(VocabSpec{}), "tokenizer.ggml.tokens"); }

TEST(SpmTokenizerLoad, MissingTokensNamesTheKey) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  expect_load_error(w, "tokenizer.ggml.tokens");
}

TEST(TokenizerFactory, UnsupportedModelNamesTheKey) {
  GgufWriter w = writer_for(small_vocab({}));
  w.set_string("tokenizer.ggml.model", "bert");
  expect_load_error(w, "tokenizer.ggml.model 'bert' is not supported yet");
}

}  // namespace
}  // namespace kvik
