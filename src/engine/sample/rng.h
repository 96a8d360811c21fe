// A per-request random stream: splitmix64-seeded xoshiro256**; the same seed gives the same draws, so a
// seeded request samples the same text alone or in any batch.
#pragma once

#include <cstdint>

namespace kvik {

class RequestRng {
 public:
  explicit RequestRng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1)

 private:
  uint64_t s_[4];
};

}  // namespace kvik
