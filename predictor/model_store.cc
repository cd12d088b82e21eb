#include "predictor/model_store.h"

#include <vector>

namespace llmd::predictor {
namespace {

std::shared_ptr<const CompiledModel> compile_one(std::string_view bytes, int64_t& version) {
  auto target = model::TargetModel::load(bytes);  // validates and reads the attributes
  version = target->version();
  auto forest = model::FlatForest::from_model_bytes(bytes);
  if (forest.num_features() != features::columns(target->feature_set()).size()) {
    throw model::ModelError("model expects " + std::to_string(forest.num_features()) +
                            " features, schema has " +
                            std::to_string(features::columns(target->feature_set()).size()));
  }
  return std::make_shared<const CompiledModel>(CompiledModel{
      std::move(forest), target->transform(), target->feature_set(), target->linear_base()});
}

bool is_gated(const std::string& name) {
  return name.ends_with("_gated");
}

}  // namespace

double CompiledModel::predict(const features::FeatureInput& in, double* expected) const {
  float row[features::kMaxColumns];
  features::fill_row(in, set, row);
  float margin = forest.predict_margin(row);
  if (linear) {
    margin += linear->margin(row);
  }
  if (expected != nullptr) {
    *expected = transform.to_point_ms(margin);
  }
  return transform.to_ms(margin);
}

void CompiledModel::predict_rows(const features::FeatureInput* rows, const uint32_t* index,
                                 std::size_t count, double* out, double* expected) const {
  thread_local std::vector<float> matrix;
  thread_local std::vector<float> margins;
  const std::size_t cols = features::columns(set).size();
  matrix.resize(count * cols);
  margins.resize(count);
  for (std::size_t k = 0; k < count; ++k) {
    features::fill_row(rows[index[k]], set, &matrix[k * cols]);
  }
  forest.predict_margins(matrix.data(), count, margins.data());
  if (linear) {
    for (std::size_t k = 0; k < count; ++k) {
      margins[k] += linear->margin(&matrix[k * cols]);
    }
  }
  for (std::size_t k = 0; k < count; ++k) {
    out[index[k]] = transform.to_ms(margins[k]);
  }
  if (expected != nullptr) {
    for (std::size_t k = 0; k < count; ++k) {
      expected[index[k]] = transform.to_point_ms(margins[k]);
    }
  }
}

void CompiledTarget::predict_batch(const features::FeatureInput* rows, std::size_t n, double* out,
                                   double* expected) const {
  thread_local std::vector<uint32_t> first;
  thread_local std::vector<uint32_t> second;
  first.clear();
  second.clear();
  const bool gated = noqueue && queued;
  for (uint32_t i = 0; i < n; ++i) {
    (gated && features::is_queued(rows[i]) ? second : first).push_back(i);
  }
  if (gated) {
    noqueue->predict_rows(rows, first.data(), first.size(), out, expected);
    queued->predict_rows(rows, second.data(), second.size(), out, expected);
  } else {
    base->predict_rows(rows, first.data(), first.size(), out, expected);
  }
}

double CompiledTarget::predict(const features::FeatureInput& in, double* expected) const {
  if (noqueue && queued) {
    return (features::is_queued(in) ? queued : noqueue)->predict(in, expected);
  }
  return base->predict(in, expected);
}

CompiledFile compile_model_file(const std::string& name, std::string_view bytes) {
  CompiledFile out;
  if (is_gated(name)) {
    auto [nq, q] = model::GatedModel::split(bytes);
    int64_t v2 = 0;
    out.noqueue = compile_one(nq, out.version);
    out.queued = compile_one(q, v2);
  } else {
    out.base = compile_one(bytes, out.version);
  }
  return out;
}

std::shared_ptr<const ServingModels> ModelStore::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

void ModelStore::install(const std::string& name, const CompiledFile& file) {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<ServingModels>(*current_);
  CompiledTarget& t = name.starts_with("ttft") ? next->ttft : next->tpot;
  if (is_gated(name)) {
    t.noqueue = file.noqueue;
    t.queued = file.queued;
  } else {
    t.base = file.base;
  }
  next->versions[name] = file.version;
  if (file.generation.empty()) {
    next->generations.erase(name);
  } else {
    next->generations[name] = file.generation;
  }
  next->last_load = std::chrono::system_clock::now();
  current_ = std::move(next);
}

void ModelStore::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  auto next = std::make_shared<ServingModels>(*current_);
  CompiledTarget& t = name.starts_with("ttft") ? next->ttft : next->tpot;
  if (is_gated(name)) {
    t.noqueue = nullptr;
    t.queued = nullptr;
  } else {
    t.base = nullptr;
  }
  next->versions.erase(name);
  next->generations.erase(name);
  current_ = std::move(next);
}

}  // namespace llmd::predictor
