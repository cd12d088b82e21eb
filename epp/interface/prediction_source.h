#pragma once
// Where predicted-latency-producer gets its numbers: the coalescing predictor client in
// production, a fake in tests, the in-process model in the virtual-time simulator.
#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "common/features/schema.h"

namespace llmd::epp {

struct Prediction {
  double ttft_ms = 0;  // the model's output: its alpha-quantile under the quantile objective
  double tpot_ms = 0;
  // The central estimate (the quantile model's median; the mean model's value); < 0 when the
  // source gives none (a predictor without the field): consumers then use ttft_ms / tpot_ms.
  double ttft_expected_ms = -1;
  double tpot_expected_ms = -1;
};

using PredictionResult = std::optional<std::vector<Prediction>>;
using PredictionCallback = std::function<void(PredictionResult)>;

class PredictionSource {
 public:
  virtual ~PredictionSource() = default;
  // One prediction per row, in order, or nullopt when none arrived before `deadline`
  // (predictors down, overloaded, cold). Blocks the calling thread at most until the
  // deadline. Thread-safe.
  virtual PredictionResult predict(const std::vector<features::FeatureInput>& rows,
                                   std::chrono::steady_clock::time_point deadline) = 0;
  // The same without blocking the caller: `done` runs exactly once, on a thread of the
  // source's choosing (possibly inline, before predict_async returns), by the deadline.
  // The default answers inline through predict(): right for in-process sources, which never
  // wait (the simulator's model, test fakes); the predictor client overrides it.
  virtual void predict_async(std::vector<features::FeatureInput> rows,
                             std::chrono::steady_clock::time_point deadline,
                             PredictionCallback done) {
    done(predict(rows, deadline));
  }
};

}  // namespace llmd::epp
