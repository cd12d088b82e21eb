#pragma once
// Injectable randomness: plugins draw from the cycle's Rng so tests can fix it.
#include <cstdint>
#include <random>

namespace llmd::epp {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  virtual ~Rng() = default;
  // Uniform in [0, 1).
  virtual double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(engine_); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace llmd::epp
