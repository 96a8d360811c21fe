// What the standalone mutation drivers share (gguf_driver.cpp, safetensors_driver.cpp, jinja_driver.cpp): each
// runs its target's LLVMFuzzerTestOneInput without libFuzzer, so the fuzz targets are also plain ctests under g++.
// A driver feeds every seed as is, then N deterministic mutations of the seeds; a crash shows up as a signal or a
// sanitizer report, and the driver exits 0 once every input has run.
//   <driver> [--iterations N] [--seed S] FILE...
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kvik::fuzz {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
  bool chance(int one_in) { return below(static_cast<size_t>(one_in)) == 0; }

 private:
  uint64_t s_;
};

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
  std::vector<size_t> fields;  // offsets worth aiming at (counts, lengths, numbers), found by the driver
};

inline std::vector<uint8_t> bytes_of(std::string_view s) { return {s.begin(), s.end()}; }

// Boundary values for counts, lengths, sizes and offsets.
inline uint64_t interesting(Rng& r) {
  static constexpr uint64_t kValues[] = {0,
                                         1,
                                         2,
                                         3,
                                         4,
                                         5,
                                         7,
                                         8,
                                         13,
                                         31,
                                         32,
                                         33,
                                         255,
                                         256,
                                         0x7fff,
                                         0xffff,
                                         0x7fffffff,
                                         0x80000000ull,
                                         0xffffffffull,
                                         1ull << 32,
                                         1ull << 40,
                                         1ull << 61,
                                         1ull << 62,
                                         0x7fffffffffffffffull,
                                         0x8000000000000000ull,
                                         ~0ull - 7,
                                         ~0ull};
  if (r.chance(4)) return r.next();
  return kValues[r.below(std::size(kValues))];
}

template <typename T>
void overwrite(std::vector<uint8_t>& b, size_t at, T v) {
  if (at + sizeof(T) <= b.size()) std::memcpy(b.data() + at, &v, sizeof(T));
}

// One structure-blind mutation inside b[0, window): bit flip, random byte, truncation, insertion, deletion,
// or a copy of a range of b over another place (repeats what is there: nesting, lists).
inline void blind_mutation(std::vector<uint8_t>& b, size_t window, Rng& r) {
  window = std::min(window, b.size());
  switch (r.below(6)) {
    case 0:
      if (window) b[r.below(window)] ^= static_cast<uint8_t>(1u << r.below(8));
      break;
    case 1:
      if (window) b[r.below(window)] = static_cast<uint8_t>(r.next());
      break;
    case 2: b.resize(r.below(b.size() + 1)); break;
    case 3: {
      const size_t at = r.below(window + 1), n = 1 + r.below(16);
      std::vector<uint8_t> ins(n);
      for (auto& x : ins) x = static_cast<uint8_t>(r.next());
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(std::min(at, b.size())), ins.begin(), ins.end());
      break;
    }
    case 4: {
      if (b.empty()) break;
      const size_t at = r.below(window ? window : b.size()), n = 1 + r.below(16);
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
              b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + n)));
      break;
    }
    case 5: {
      if (window < 2) break;
      const size_t from = r.below(window), n = 1 + r.below(std::min<size_t>(64, window - from));
      const std::vector<uint8_t> piece(b.begin() + static_cast<std::ptrdiff_t>(from),
                                       b.begin() + static_cast<std::ptrdiff_t>(from + n));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(r.below(window + 1)), piece.begin(), piece.end());
      break;
    }
  }
}

inline void run_one(const std::vector<uint8_t>& b) {
  // Copy into an exactly sized heap block so AddressSanitizer sees any read past the end.
  auto* p = static_cast<uint8_t*>(std::malloc(b.size() ? b.size() : 1));
  if (!b.empty()) std::memcpy(p, b.data(), b.size());
  LLVMFuzzerTestOneInput(p, b.size());
  std::free(p);
}

struct Driver {
  const char* name;
  // Turns a file named on the command line into a seed's bytes (default: the file as is).
  std::function<std::vector<uint8_t>(const std::string& path, std::vector<uint8_t> file)> load;
  std::vector<Seed> builtin;           // seeds the driver makes itself
  std::function<void(Seed&)> prepare;  // fills Seed::fields (optional)
  // One mutated input from seeds[which] (the others are there for splicing).
  std::function<std::vector<uint8_t>(const std::vector<Seed>& seeds, size_t which, Rng& r)> mutate;
};

inline int run_driver(int argc, char** argv, Driver d) {
  long iterations = 1000;
  uint64_t seed = 0x6b76696bull;  // "kvik"
  std::vector<Seed> seeds;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      iterations = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a.starts_with("--")) {
      std::fprintf(stderr, "usage: %s [--iterations N] [--seed S] FILE...\n", argv[0]);
      return 2;
    } else {
      std::ifstream f(argv[i], std::ios::binary);
      if (!f) {
        std::fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[i]);
        return 2;
      }
      std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
      if (d.load) bytes = d.load(argv[i], std::move(bytes));
      seeds.push_back({argv[i], std::move(bytes), {}});
    }
  }
  for (auto& s : d.builtin) seeds.push_back(std::move(s));
  if (seeds.empty()) {
    std::fprintf(stderr, "%s: no seeds\n", argv[0]);
    return 2;
  }

  const auto t0 = std::chrono::steady_clock::now();
  for (auto& s : seeds) {
    if (d.prepare) d.prepare(s);
    run_one(s.bytes);
  }
  Rng r(seed);
  for (long it = 0; it < iterations; ++it) run_one(d.mutate(seeds, static_cast<size_t>(it) % seeds.size(), r));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: %zu inputs, %ld mutations, no crash (%.1f s)\n", d.name, seeds.size(), iterations, secs);
  return 0;
}

}  // namespace kvik::fuzz
