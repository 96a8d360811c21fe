// Mutation driver for fuzz_safetensors.cpp (see driver_common.h), so the safetensors fuzz target is also a plain
// ctest:  fuzz_safetensors_driver [--iterations N] [--seed S] [FILE...]
// Seeds: files given on the command line and small files made with write_safetensors (F32/F16/BF16, a scalar, an
// empty tensor, __metadata__). A mutation mostly edits the JSON header and writes its new length into the u64
// size field, so it reaches the checks behind the JSON parser: numbers replaced by boundary values (2^64 - 1,
// 2^63, -1, 1e400, 2^61), dtype and key strings swapped, JSON pieces inserted, a value replaced by deep
// nesting, the data section cut or grown; now and then the size field itself is wrong, or any byte changes.
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <tuple>

#include "core/error.h"
#include "driver_common.h"
#include "formats/safetensors.h"

namespace {

using namespace kvik::fuzz;

std::vector<uint8_t> written(const std::vector<kvik::SafetensorsWriteTensor>& tensors) {
  const auto path = std::filesystem::temp_directory_path() / ("kvik_fuzz_seed_" + std::to_string(::getpid()));
  kvik::write_safetensors(path.string(), tensors);
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> b{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  std::filesystem::remove(path);
  return b;
}

std::vector<Seed> writer_seeds() {
  using T = kvik::SafetensorsWriteTensor;
  std::vector<Seed> s;
  s.push_back({"<writer: f32 f16 bf16>",
               written({T{"model.embed_tokens.weight", kvik::DType::F32, {4, 2}, std::vector<uint8_t>(32, 1)},
                        T{"model.layers.0.mlp.up_proj.weight", kvik::DType::F16, {2, 3}, std::vector<uint8_t>(12, 2)},
                        T{"lm_head.weight", kvik::DType::BF16, {1, 1, 2}, std::vector<uint8_t>(4, 3)}}),
               {}});
  s.push_back({"<writer: scalar, empty>",
               written({T{"scale", kvik::DType::F32, {}, std::vector<uint8_t>(4, 7)},
                        T{"empty", kvik::DType::F16, {0, 5}, {}}}),
               {}});
  s.push_back({"<writer: none>", written({}), {}});
  return s;
}

// The JSON header and the data of a valid seed.
bool split(const std::vector<uint8_t>& b, std::string& header, std::vector<uint8_t>& data) {
  if (b.size() < 8) return false;
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  if (n > b.size() - 8) return false;
  header.assign(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  data.assign(b.begin() + 8 + static_cast<std::ptrdiff_t>(n), b.end());
  return true;
}

// [begin, end) of a random number (digits, maybe a leading '-') or string literal (inside the quotes) in h.
bool find_token(const std::string& h, bool number, Rng& r, size_t& begin, size_t& end) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < h.size();) {
    if (number && (std::isdigit(static_cast<unsigned char>(h[i])) || h[i] == '-')) {
      size_t j = i + 1;
      while (j < h.size() && (std::isdigit(static_cast<unsigned char>(h[j])) || h[j] == '.' || h[j] == 'e')) ++j;
      spans.emplace_back(i, j);
      i = j;
    } else if (!number && h[i] == '"') {
      size_t j = i + 1;
      while (j < h.size() && h[j] != '"') j += h[j] == '\\' ? 2 : 1;
      spans.emplace_back(i + 1, std::min(j, h.size()));
      i = j + 1;
    } else {
      ++i;
    }
  }
  if (spans.empty()) return false;
  std::tie(begin, end) = spans[r.below(spans.size())];
  return true;
}

std::string nested(Rng& r) {
  const size_t depth = r.chance(64) ? 100000 + r.below(100000) : 1 + r.below(300);  // deep enough to blow a recursion
  const bool obj = r.chance(3);
  std::string s;
  for (size_t k = 0; k < depth; ++k) s += obj ? "{\"a\":" : "[";
  s += "1";
  for (size_t k = 0; k < depth; ++k) s += obj ? '}' : ']';
  return s;
}

std::vector<uint8_t> mutate(const std::vector<Seed>& seeds, size_t which, Rng& r) {
  static constexpr const char* kNumbers[] = {"0",
                                             "1",
                                             "2",
                                             "-1",
                                             "-0",
                                             "1.5",
                                             "1e400",
                                             "-1e400",
                                             "4294967295",
                                             "4294967296",
                                             "9223372036854775807",
                                             "9223372036854775808",
                                             "18446744073709551615",
                                             "18446744073709551616",
                                             "2305843009213693951",
                                             "2305843009213693952",
                                             "99999999999999999999999999",
                                             "0.0",
                                             "3e2",
                                             "null",
                                             "true",
                                             "\"1\"",
                                             "[]",
                                             "{}"};
  static constexpr const char* kStrings[] = {
      "F32", "F16",   "BF16",  "F64",          "I8",           "U8",      "BOOL",    "F8_E4M3",  "f32",
      "",    "dtype", "shape", "data_offsets", "__metadata__", "\\u0000", "\\ud800", "\xff\xfe", "a\\\"b"};
  static constexpr const char* kPieces[] = {"[",
                                            "]",
                                            "{",
                                            "}",
                                            ",",
                                            ":",
                                            "\"",
                                            "null",
                                            "true",
                                            "-",
                                            "0",
                                            "[0,0]",
                                            "\"x\":",
                                            "\"x\":{}",
                                            "\"shape\":[1,2],",
                                            "\"data_offsets\":[0,8],",
                                            "\"dtype\":\"F32\",",
                                            "\"__metadata__\":{\"format\":\"pt\"},",
                                            "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},",
                                            "\"shape\":[],",
                                            "\"shape\":[0],",
                                            "\"shape\":[1,1,1,1,1,1,1,1,1],",
                                            "\\u00e5",
                                            "\xc3\xa5",
                                            "\xe2\x82"};
  std::vector<uint8_t> b = seeds[which].bytes;
  std::string h;
  std::vector<uint8_t> d, d2;
  if (r.chance(8) || !split(b, h, d)) {  // structure-blind
    const int n = 1 + static_cast<int>(r.below(4));
    for (int k = 0; k < n; ++k) {
      if (r.chance(4))
        overwrite<uint64_t>(b, 0, interesting(r));
      else
        blind_mutation(b, b.size(), r);
    }
    return b;
  }
  const int n = 1 + static_cast<int>(r.below(3));
  for (int k = 0; k < n; ++k) {
    size_t at = 0, end = 0;
    switch (r.below(7)) {
      case 0:
        if (find_token(h, true, r, at, end)) h.replace(at, end - at, kNumbers[r.below(std::size(kNumbers))]);
        break;
      case 1:
        if (find_token(h, false, r, at, end)) h.replace(at, end - at, kStrings[r.below(std::size(kStrings))]);
        break;
      case 2: h.insert(r.below(h.size() + 1), kPieces[r.below(std::size(kPieces))]); break;
      case 3:
        if (find_token(h, true, r, at, end)) h.replace(at, end - at, nested(r));
        break;
      case 4: {
        std::vector<uint8_t> hb = bytes_of(h);
        blind_mutation(hb, hb.size(), r);
        h.assign(hb.begin(), hb.end());
        break;
      }
      case 5:  // data section: cut or grow
        if (r.chance(2))
          d.resize(r.below(d.size() + 1));
        else
          d.resize(d.size() + 1 + r.below(64), 0x5a);
        break;
      case 6:  // a tensor entry from another seed
        if (std::string h2; split(seeds[r.below(seeds.size())].bytes, h2, d2) && find_token(h2, false, r, at, end))
          h.insert(r.below(h.size() + 1), h2.substr(at > 0 ? at - 1 : 0, 80));
        break;
    }
  }
  uint64_t size = h.size();
  if (r.chance(8)) size = r.chance(2) ? interesting(r) : size + r.below(5) - 2;
  std::vector<uint8_t> out(8);
  std::memcpy(out.data(), &size, 8);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), d.begin(), d.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return run_driver(argc, argv,
                    {.name = "fuzz_safetensors_driver",
                     .load = nullptr,
                     .builtin = writer_seeds(),
                     .prepare = nullptr,
                     .mutate = mutate});
}
