// The drivers' input generator (kernels_main.cpp, ggml/main.cpp, sdpa/main.cpp):
// splitmix64, so every case's inputs are a pure function of its seed.
#pragma once
#include <cstdint>

namespace msim {

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // [0, 1) with 53 bits.
  double uni() { return double(next() >> 11) * 0x1.0p-53; }
  // [-1, 1) with 24 bits.
  float uniform() { return float(next() >> 40) / float(1ull << 24) * 2.f - 1.f; }
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }
};

} // namespace msim
