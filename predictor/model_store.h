#pragma once
// The predictor's models: compiled flat forests plus their output transforms, published as one
// immutable snapshot (shared_ptr<const ServingModels>). Request threads take the current snapshot
// once per request, so a swap never changes the model under a request in flight.
//
// Threading: install()/remove() come from the sync thread (and start-up); current() from any
// thread. `mu_` guards only the pointer swap.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/features/schema.h"
#include "common/model/flat_forest.h"
#include "common/model/latency_model.h"
#include "common/util/time.h"

namespace llmd::predictor {

// One booster compiled for the hot path.
struct CompiledModel {
  model::FlatForest forest;
  model::OutputTransform transform;
  features::FeatureSet set;
  std::optional<model::LinearBase> linear;  // added to the forest's margin
  double predict(const features::FeatureInput& in, double* expected = nullptr) const;
  // Milliseconds for rows[index[k]] into out[index[k]], k < count: one matrix, one blocked
  // forest walk (rows walk each tree together, which hides the memory latency of the walk).
  // `expected` (optional) receives the central estimate (OutputTransform::to_point_ms).
  void predict_rows(const features::FeatureInput* rows, const uint32_t* index, std::size_t count,
                    double* out, double* expected = nullptr) const;
};

// A target's base model and optional ensemble (rows with waiting = 0 -> noqueue).
struct CompiledTarget {
  std::shared_ptr<const CompiledModel> base;
  std::shared_ptr<const CompiledModel> noqueue;
  std::shared_ptr<const CompiledModel> queued;
  double predict(const features::FeatureInput& in, double* expected = nullptr) const;
  void predict_batch(const features::FeatureInput* rows, std::size_t n, double* out,
                     double* expected = nullptr) const;
};

// Model file names the predictor syncs, in sync order.
inline constexpr std::array<const char*, 4> kSyncedModels = {"ttft", "tpot", "ttft_gated",
                                                             "tpot_gated"};

struct ServingModels {
  CompiledTarget ttft;
  CompiledTarget tpot;
  std::map<std::string, int64_t> versions;  // per installed file
  // The trainer's model generation per installed file (absent when unknown: a local copy, or
  // a trainer that publishes none).
  std::map<std::string, std::string> generations;
  std::optional<util::SystemTime> last_load;
  bool ready() const { return ttft.base != nullptr && tpot.base != nullptr; }
  bool ensemble_active() const { return ttft.noqueue != nullptr || tpot.noqueue != nullptr; }
};

// Compiles serialized model bytes (TargetModel or gated container) for `name`.
// Throws model::ModelError when the bytes do not load.
struct CompiledFile {
  std::shared_ptr<const CompiledModel> base;     // ttft / tpot
  std::shared_ptr<const CompiledModel> noqueue;  // *_gated
  std::shared_ptr<const CompiledModel> queued;   // *_gated
  int64_t version = 0;
  std::string generation;  // set by the caller when the trainer named one
};
CompiledFile compile_model_file(const std::string& name, std::string_view bytes);

class ModelStore {
 public:
  std::shared_ptr<const ServingModels> current() const;
  void install(const std::string& name, const CompiledFile& file);
  void remove(const std::string& name);

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ServingModels> current_ = std::make_shared<ServingModels>();
};

}  // namespace llmd::predictor
