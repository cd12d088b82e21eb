#pragma once
// Where predicted-latency-producer gets its numbers: the coalescing predictor client in
// production, a fake in tests, the in-process model in the virtual-time simulator.
#include <chrono>
#include <optional>
#include <vector>

#include "common/features/schema.h"

namespace llmd::epp {

struct Prediction {
  double ttft_ms = 0;
  double tpot_ms = 0;
};

class PredictionSource {
 public:
  virtual ~PredictionSource() = default;
  // One prediction per row, in order, or nullopt when none arrived before `deadline`
  // (predictors down, overloaded, cold). Blocks the calling scheduling thread at most until
  // the deadline. Thread-safe.
  virtual std::optional<std::vector<Prediction>> predict(
      const std::vector<features::FeatureInput>& rows,
      std::chrono::steady_clock::time_point deadline) = 0;
};

}  // namespace llmd::epp
