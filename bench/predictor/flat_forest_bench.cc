// FlatForest vs XGBoost's own predictor on the serving shape: a 200-tree, depth-6 model on the
// ttft feature set, batches of 100 rows.
#include <benchmark/benchmark.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/features/schema.h"
#include "common/model/booster.h"
#include "common/model/flat_forest.h"
#include "common/model/latency_model.h"

namespace {

using llmd::features::FeatureInput;
using llmd::features::FeatureSet;
using llmd::features::PodType;
namespace model = llmd::model;

constexpr FeatureSet kSet = FeatureSet::kTtft;
constexpr std::size_t kBatch = 100;

FeatureInput draw(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  FeatureInput in;
  in.kv_cache_percentage = u(rng);
  in.input_token_length = static_cast<int64_t>(u(rng) * 4000);
  in.num_request_waiting = u(rng) < 0.5 ? 0 : static_cast<int64_t>(u(rng) * 20);
  in.num_request_running = static_cast<int64_t>(u(rng) * 30);
  in.num_tokens_generated = static_cast<int64_t>(u(rng) * 500);
  in.prefix_cache_score = u(rng);
  const PodType pods[] = {PodType::kNone, PodType::kPrefill, PodType::kDecode, PodType::kUnknown};
  in.pod_type = pods[rng() % 4];
  in.prefill_tokens_in_flight = static_cast<int64_t>(u(rng) * 8000);
  in.decode_tokens_in_flight = static_cast<int64_t>(u(rng) * 8000);
  return in;
}

std::vector<float> rows_of(const std::vector<FeatureInput>& inputs) {
  const std::size_t cols = llmd::features::columns(kSet).size();
  std::vector<float> x(inputs.size() * cols);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    llmd::features::fill_row(inputs[i], kSet, &x[i * cols]);
  }
  return x;
}

struct Fixture {
  std::string bytes;
  std::vector<float> batch;  // kBatch rows
  std::size_t cols = 0;
};

// Trained once per process: the production hyper-parameters (200 trees, depth 6).
const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture out;
    out.cols = llmd::features::columns(kSet).size();
    std::mt19937_64 rng(7);
    std::vector<FeatureInput> train;
    std::vector<float> y;
    std::uniform_real_distribution<double> noise(0.0, 10.0);
    for (int i = 0; i < 20000; ++i) {
      train.push_back(draw(rng));
      const FeatureInput& in = train.back();
      y.push_back(static_cast<float>(
          20.0 + 0.05 * static_cast<double>(in.input_token_length) * (1.0 - in.prefix_cache_score) +
          15.0 * static_cast<double>(in.num_request_waiting) +
          (in.pod_type == PodType::kPrefill ? 30.0 : 0.0) + noise(rng)));
    }
    std::vector<float> x = rows_of(train);
    model::TrainParams p;
    model::Booster b = model::Booster::train(p, model::column_info(kSet),
                                             {x.data(), train.size(), out.cols}, y, 60.0);
    out.bytes = b.save();
    std::vector<FeatureInput> batch;
    for (std::size_t i = 0; i < kBatch; ++i) {
      batch.push_back(draw(rng));
    }
    out.batch = rows_of(batch);
    return out;
  }();
  return f;
}

void BM_FlatForestPredict100(benchmark::State& state) {
  const Fixture& f = fixture();
  const model::FlatForest forest = model::FlatForest::from_model_bytes(f.bytes);
  std::vector<float> out(kBatch);
  for (auto _ : state) {
    forest.predict_margins(f.batch.data(), kBatch, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_FlatForestPredict100);

void BM_FlatForestPredictOneRow(benchmark::State& state) {
  const Fixture& f = fixture();
  const model::FlatForest forest = model::FlatForest::from_model_bytes(f.bytes);
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(forest.predict_margin(f.batch.data() + (i % kBatch) * f.cols));
    ++i;
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_FlatForestPredictOneRow);

// XGBoost as the server would call it: a loaded booster (one thread), DMatrix per call.
void BM_XgboostPredict100(benchmark::State& state) {
  const Fixture& f = fixture();
  const model::Booster booster = model::Booster::load(f.bytes);
  const model::ColumnInfo columns = model::column_info(kSet);
  for (auto _ : state) {
    std::vector<float> out = booster.predict(columns, {f.batch.data(), kBatch, f.cols});
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_XgboostPredict100);

// Model load cost: parsing the UBJSON and laying out the forest.
void BM_FlatForestCompile(benchmark::State& state) {
  const Fixture& f = fixture();
  for (auto _ : state) {
    model::FlatForest forest = model::FlatForest::from_model_bytes(f.bytes);
    benchmark::DoNotOptimize(&forest);
  }
}
BENCHMARK(BM_FlatForestCompile)->Unit(benchmark::kMillisecond);

// A benchmark of a wrong answer is worthless: check bit equality before timing anything.
void check_exact() {
  const Fixture& f = fixture();
  const model::FlatForest forest = model::FlatForest::from_model_bytes(f.bytes);
  const std::vector<float> want = model::Booster::load(f.bytes).predict(
      model::column_info(kSet), {f.batch.data(), kBatch, f.cols});
  std::vector<float> got(kBatch);
  forest.predict_margins(f.batch.data(), kBatch, got.data());
  for (std::size_t i = 0; i < kBatch; ++i) {
    if (std::bit_cast<uint32_t>(want[i]) != std::bit_cast<uint32_t>(got[i])) {
      std::fprintf(stderr, "row %zu: xgboost %.9g, flat forest %.9g\n", i, want[i], got[i]);
      std::exit(1);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    return 1;
  }
  check_exact();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
