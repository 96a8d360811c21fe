// Mutation driver for fuzz_gguf.cpp (see driver_common.h), so the GGUF fuzz target is also a plain ctest:
//   fuzz_gguf_driver [--iterations N] [--seed S] FILE...
// Feeds every file as is, then N deterministic mutations of the files and of a small writer-made GGUF: bit flips,
// random bytes, u32/u64 overwrites with boundary values at the positions of counts, lengths, types, dimensions
// and offsets, truncations, insertions and deletions. Big inputs are cut to a prefix of their first 64 KiB (the
// header lives there) so 20000 runs take seconds.
#include "core/error.h"
#include "driver_common.h"
#include "formats/gguf.h"

namespace {

using namespace kvik::fuzz;

constexpr size_t kHeaderWindow = 64 * 1024;

// Where the structural fields of a valid input lie, found by parsing it: mutations there reach the checks.
std::vector<size_t> find_fields(const std::vector<uint8_t>& b) {
  std::vector<size_t> f = {0, 4, 8, 16};
  try {
    auto g = kvik::GgufFile::parse(b, "seed");
    for (const auto& [key, v] : g->metadata()) {
      const size_t at = static_cast<size_t>(v.raw.data() - b.data());
      f.push_back(at - 8 - key.size());  // key length
      f.push_back(at);                   // value type
      f.push_back(at + 4);               // string length / array element type / scalar
      if (v.type == kvik::GgufType::ARRAY) {
        f.push_back(at + 8);   // array count
        f.push_back(at + 16);  // first element (or first string's length)
      }
    }
    // Tensor infos follow the metadata: find each name (u64 length + bytes) after the last value.
    size_t pos = g->metadata().empty() ? 24
                                       : static_cast<size_t>(g->metadata().back().second.raw.data() - b.data()) +
                                             g->metadata().back().second.raw.size();
    for (const auto& t : g->tensors()) {
      if (pos + 8 + t.name.size() > b.size()) break;
      f.push_back(pos);  // name length
      pos += 8 + t.name.size();
      f.push_back(pos);  // n_dims
      pos += 4;
      for (size_t d = 0; d < t.shape.size(); ++d, pos += 8) f.push_back(pos);
      f.push_back(pos);      // type
      f.push_back(pos + 4);  // offset
      pos += 12;
    }
  } catch (const kvik::Error&) {
  }
  return f;
}

std::vector<uint8_t> writer_seed() {
  kvik::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_bool("flag", true);
  w.set_array_string("tokenizer.ggml.tokens", {"<unk>", "<s>", "a"});
  w.set_array_f32("tokenizer.ggml.scores", {0.0f, 0.0f, -1.0f});
  w.set_array_i32("tokenizer.ggml.token_type", {2, 3, 1});
  w.set_alignment(64);
  std::vector<uint8_t> a(4 * 4, 1), q8(34 * 2, 2), q4(18, 3), h(2 * 6, 4);
  w.add_tensor("a", kvik::DType::F32, {4}, a);
  w.add_tensor("blk.0.q8", kvik::DType::Q8_0, {32, 2}, q8);
  w.add_tensor("blk.0.q4", kvik::DType::Q4_0, {32, 1, 1, 1}, q4);
  w.add_tensor("h", kvik::DType::F16, {2, 3}, h);
  return w.to_bytes();
}

std::vector<uint8_t> mutate(const Seed& s, Rng& r) {
  const std::vector<uint8_t>& src = s.bytes;
  // Big inputs: mostly a prefix of the header window; now and then the whole file.
  size_t len = src.size();
  if (len > kHeaderWindow && !r.chance(64)) len = r.chance(2) ? kHeaderWindow : r.below(kHeaderWindow + 1);
  std::vector<uint8_t> b(src.begin(), src.begin() + len);
  const size_t window = std::min(b.size(), kHeaderWindow);
  const int n_mut = 1 + static_cast<int>(r.below(4));
  for (int m = 0; m < n_mut; ++m) {
    const size_t field = s.fields.empty() ? 0 : s.fields[r.below(s.fields.size())];
    switch (r.below(9)) {
      case 0:  // flip a bit
        if (window) b[r.below(window)] ^= static_cast<uint8_t>(1u << r.below(8));
        break;
      case 1:  // random byte
        if (window) b[r.below(window)] = static_cast<uint8_t>(r.next());
        break;
      case 2:  // u64 field overwrite
        overwrite<uint64_t>(b, field, interesting(r));
        break;
      case 3:  // u32 field overwrite
        overwrite<uint32_t>(b, field, static_cast<uint32_t>(interesting(r)));
        break;
      case 4:  // small change to a field (off by a little)
        if (field < b.size()) b[field] = static_cast<uint8_t>(b[field] + 1 + r.below(3) - 2 * r.chance(2));
        break;
      case 5:  // u64 anywhere in the header window
        if (window >= 8) overwrite<uint64_t>(b, r.below(window - 7), interesting(r));
        break;
      case 6:  // truncate
        b.resize(r.below(b.size() + 1));
        break;
      case 7: {  // insert random bytes
        const size_t at = r.below(window + 1), n = 1 + r.below(16);
        std::vector<uint8_t> ins(n);
        for (auto& x : ins) x = static_cast<uint8_t>(r.next());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(std::min(at, b.size())), ins.begin(), ins.end());
        break;
      }
      case 8: {  // delete a range
        if (b.empty()) break;
        const size_t at = r.below(window ? window : b.size()), n = 1 + r.below(16);
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + n)));
        break;
      }
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  return run_driver(
      argc, argv,
      {.name = "fuzz_gguf_driver",
       .load = nullptr,
       .builtin = {{"<writer>", writer_seed(), {}}},
       .prepare = [](Seed& s) { s.fields = find_fields(s.bytes); },
       .mutate = [](const std::vector<Seed>& seeds, size_t which, Rng& r) { return mutate(seeds[which], r); }});
}
