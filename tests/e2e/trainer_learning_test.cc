// The trainer learns: known noisy laws in, calibrated models out; and what it learned survives
// a restart and travels in the export bundle. Real binaries over loopback.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "common/features/feature_json.h"
#include "common/testing/synthetic_law.h"
#include "common/util/files.h"
#include "tests/e2e/trainer_fixture.h"

namespace llmd::testing {
namespace {

Json training_body(const SyntheticLaw& law, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Json entries = Json::array();
  for (int i = 0; i < n; ++i) {
    auto f = law.draw_features(rng);
    Json e = features::feature_input_to_json(f);
    e["actual_ttft_ms"] = law.draw_ttft(f, rng);
    e["actual_tpot_ms"] = law.draw_tpot(f, rng);
    entries.push_back(e);
  }
  return Json{{"entries", entries}};
}

// Waits until a retrain that started after `after_version` has been published.
bool wait_for_version(TrainerProcess& t, int64_t above, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = t.get("/model/tpot/info");
    if (r.status == 200 && Json::parse(r.body)["version"].get<int64_t>() > above) {
      auto q = t.get("/model/ttft/info");
      if (q.status == 200 && Json::parse(q.body)["version"].get<int64_t>() > above) {
        return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

struct Quality {
  double ttft_coverage = 0, tpot_coverage = 0, ttft_mape = 0, tpot_mape = 0;
  // Coverage in each third of the true mean latency: a model can reach 0.9 overall by
  // over-covering slow requests and under-covering fast ones, which misranks idle pods.
  std::vector<double> ttft_thirds, tpot_thirds;
};

// (true mean, covered) pairs -> coverage per third of the true mean.
std::vector<double> coverage_by_third(std::vector<std::pair<double, bool>> rows) {
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<double> out;
  for (std::size_t third = 0; third < 3; ++third) {
    std::size_t lo = third * rows.size() / 3, hi = (third + 1) * rows.size() / 3, cov = 0;
    for (std::size_t k = lo; k < hi; ++k) {
      cov += rows[k].second ? 1 : 0;
    }
    out.push_back(static_cast<double>(cov) / static_cast<double>(hi - lo));
  }
  return out;
}

Quality measure(TrainerProcess& t, const SyntheticLaw& law, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Quality q;
  std::vector<std::pair<double, bool>> ttft_rows, tpot_rows;
  for (int i = 0; i < n; ++i) {
    auto f = law.draw_features(rng);
    double ttft = law.draw_ttft(f, rng);
    double tpot = law.draw_tpot(f, rng);
    Json p = Json::parse(t.post("/predict", features::feature_input_to_json(f)).body);
    double pt = p["ttft_ms"].get<double>(), pp = p["tpot_ms"].get<double>();
    q.ttft_coverage += ttft <= pt ? 1 : 0;
    q.tpot_coverage += tpot <= pp ? 1 : 0;
    ttft_rows.emplace_back(law.ttft_mean(f), ttft <= pt);
    tpot_rows.emplace_back(law.tpot_mean(f), tpot <= pp);
    q.ttft_mape += std::fabs(pt - ttft) / ttft;
    q.tpot_mape += std::fabs(pp - tpot) / tpot;
  }
  q.ttft_coverage /= n;
  q.tpot_coverage /= n;
  q.ttft_mape = 100 * q.ttft_mape / n;
  q.tpot_mape = 100 * q.tpot_mape / n;
  q.ttft_thirds = coverage_by_third(std::move(ttft_rows));
  q.tpot_thirds = coverage_by_third(std::move(tpot_rows));
  return q;
}

double predict_ttft(TrainerProcess& t, const Json& row) {
  return Json::parse(t.post("/predict", row).body)["ttft_ms"].get<double>();
}

class TrainerLearning : public ::testing::TestWithParam<bool> {};

TEST_P(TrainerLearning, QuantileCoverageMeanMapeAndInputMonotonicity) {
  SyntheticLaw law;
  law.sigma = 0.08;
  law.inflight_signal = GetParam();
  TempDir qdir, mdir;
  TrainerProcess quantile(qdir.path(), {"--retraining-interval", "0.5"});
  TrainerProcess mean(mdir.path(), {"--retraining-interval", "0.5", "--objective-type", "mean"});
  ASSERT_TRUE(quantile.ready && mean.ready) << quantile.process->log() << mean.process->log();
  Json body = training_body(law, 3000, 1);
  ASSERT_EQ(quantile.post("/add_training_data_bulk", body).status, 202);
  ASSERT_EQ(mean.post("/add_training_data_bulk", body).status, 202);
  ASSERT_TRUE(wait_for_version(quantile, 1, std::chrono::seconds(60))) << quantile.process->log();
  ASSERT_TRUE(wait_for_version(mean, 1, std::chrono::seconds(60))) << mean.process->log();

  Quality q = measure(quantile, law, 1500, 99);
  std::printf("quantile: ttft coverage %.3f tpot coverage %.3f\n", q.ttft_coverage,
              q.tpot_coverage);
  EXPECT_GE(q.ttft_coverage, 0.85);
  EXPECT_LE(q.ttft_coverage, 0.95);
  EXPECT_GE(q.tpot_coverage, 0.85);
  EXPECT_LE(q.tpot_coverage, 0.95);
  for (int third = 0; third < 3; ++third) {
    std::printf("third %d: ttft %.3f tpot %.3f\n", third, q.ttft_thirds[third],
                q.tpot_thirds[third]);
    EXPECT_GE(q.ttft_thirds[third], 0.85) << "TTFT coverage, third " << third;
    EXPECT_LE(q.ttft_thirds[third], 0.95) << "TTFT coverage, third " << third;
    EXPECT_GE(q.tpot_thirds[third], 0.85) << "TPOT coverage, third " << third;
    EXPECT_LE(q.tpot_thirds[third], 0.95) << "TPOT coverage, third " << third;
  }
  Quality m = measure(mean, law, 1500, 99);
  std::printf("mean: ttft MAPE %.2f%% tpot MAPE %.2f%%\n", m.ttft_mape, m.tpot_mape);
  EXPECT_LT(m.ttft_mape, 10.0);
  EXPECT_LT(m.tpot_mape, 10.0);

  for (TrainerProcess* t : {&quantile, &mean}) {
    double previous = 0;
    for (int64_t len : {100, 1000, 2000, 3500}) {
      double v = predict_ttft(*t, feature_row(0.3, len, 0, 8, 0.0));
      EXPECT_GT(v, previous) << "TTFT must grow with input length";
      previous = v;
    }
  }
  if (law.inflight_signal) {
    Json idle = feature_row(0.3, 1000, 0, 8, 0.0);
    Json busy = idle;
    busy["prefill_tokens_in_flight"] = 7000;
    EXPECT_GT(predict_ttft(quantile, busy), predict_ttft(quantile, idle) + 50.0);
    Json dbusy = idle;
    dbusy["decode_tokens_in_flight"] = 3500;
    auto tpot = [&](const Json& row) {
      return Json::parse(quantile.post("/predict", row).body)["tpot_ms"].get<double>();
    };
    EXPECT_GT(tpot(dbusy), tpot(idle) + 5.0);
  }
  // After a fit the hold-out metrics are exported.
  Json status = quantile.get_json("/data/status");
  EXPECT_EQ(status["ensemble"]["ensemble_active"], true);
  EXPECT_GE(status["metrics"]["ttft_scores_count"].get<int>(), 1);
  EXPECT_NE(quantile.get("/metrics").body.find("ttft_coverage_percent{idx=\"0\"}"),
            std::string::npos);
  EXPECT_NE(mean.get("/metrics").body.find("ttft_mae{idx=\"0\"}"), std::string::npos);
  EXPECT_EQ(quantile.get("/model/ttft_gated/info").status, 200);
}

INSTANTIATE_TEST_SUITE_P(InflightSignal, TrainerLearning, ::testing::Values(false, true));

TEST(TrainerPersistence, RestartKeepsSamplesAndModels) {
  TempDir dir;
  SyntheticLaw law;
  Json before_status, before_info, prediction;
  Json row = feature_row(0.4, 1500, 2, 10, 0.1);
  {
    TrainerProcess t(dir.path(), {"--retraining-interval", "0.5"});
    ASSERT_TRUE(t.ready) << t.process->log();
    ASSERT_EQ(t.post("/add_training_data_bulk", training_body(law, 600, 3)).status, 202);
    ASSERT_TRUE(wait_for_version(t, 1, std::chrono::seconds(60))) << t.process->log();
    before_status = t.get_json("/data/status");
    before_info = t.get_json("/model/ttft/info");
    prediction = Json::parse(t.post("/predict", row).body);
    EXPECT_EQ(t.process->terminate(), 0) << t.process->log();
  }
  TrainerProcess again(dir.path(), {"--retraining-interval", "3600"});
  ASSERT_TRUE(again.ready) << again.process->log();
  Json after = again.get_json("/data/status");
  EXPECT_EQ(after["training_data"], before_status["training_data"]);
  EXPECT_EQ(after["test_data"], before_status["test_data"]);
  EXPECT_EQ(after["bucket_distribution"], before_status["bucket_distribution"]);
  EXPECT_EQ(again.get_json("/model/ttft/info")["version"], before_info["version"]);
  Json p = Json::parse(again.post("/predict", row).body);
  EXPECT_DOUBLE_EQ(p["ttft_ms"].get<double>(), prediction["ttft_ms"].get<double>());
  EXPECT_DOUBLE_EQ(p["tpot_ms"].get<double>(), prediction["tpot_ms"].get<double>());
}

TEST(TrainerPersistence, CorruptOrTruncatedSnapshotIsNotFatal) {
  TempDir dir;
  {
    TrainerProcess t(dir.path());
    ASSERT_TRUE(t.ready);
    ASSERT_EQ(t.post("/add_training_data_bulk", training_body(SyntheticLaw{}, 50, 4)).status, 202);
    ASSERT_EQ(t.process->terminate(), 0);
  }
  auto bytes = util::read_file(dir.file("training_samples.bin"));
  ASSERT_TRUE(bytes.has_value());
  util::write_file_atomic(dir.file("training_samples.bin"), bytes->substr(0, bytes->size() / 2));
  {
    TrainerProcess t(dir.path());
    ASSERT_TRUE(t.ready) << t.process->log();
    EXPECT_EQ(t.get_json("/data/status")["training_data"]["total_samples"], 0);
    EXPECT_NE(t.process->log().find("samples lost"), std::string::npos) << t.process->log();
  }
  std::string garbage = *bytes;
  garbage[garbage.size() / 2] ^= 0x5a;
  util::write_file_atomic(dir.file("training_samples.bin"), garbage);
  util::write_file_atomic(dir.file("ttft.ubj"), "not a model");
  TrainerProcess t(dir.path());
  ASSERT_TRUE(t.ready) << t.process->log();
  EXPECT_NE(t.process->log().find("damaged region"), std::string::npos) << t.process->log();
  EXPECT_NE(t.process->log().find("ignoring ttft model"), std::string::npos) << t.process->log();
  EXPECT_EQ(Json::parse(t.post("/predict", feature_row(0.1, 10, 0, 0, 0)).body)["ttft_ms"], 10.0);
}

TEST(TrainerExport, SeedBundleStartsANewTrainer) {
  TempDir dir, seeded;
  SyntheticLaw law;
  TrainerProcess t(dir.path(), {"--retraining-interval", "0.5"});
  ASSERT_TRUE(t.ready);
  ASSERT_EQ(t.post("/add_training_data_bulk", training_body(law, 800, 5)).status, 202);
  ASSERT_TRUE(wait_for_version(t, 1, std::chrono::seconds(60))) << t.process->log();
  // A trained model (categorical prefill_score_bucket splits, linear base) still dumps its
  // trees for native-tree clients, and /metrics lists the line's coefficients.
  for (const char* target : {"ttft", "tpot"}) {
    auto trees = t.get(std::string("/model/") + target + "/xgb/json");
    ASSERT_EQ(trees.status, 200) << target << ": " << trees.body.substr(0, 300);
    EXPECT_EQ(Json::parse(trees.body).size(), 200u) << target;
  }
  const std::string metrics = t.get("/metrics").body;
  EXPECT_NE(metrics.find("ttft_coef{feature=\"num_request_waiting\"}"), std::string::npos);
  // Every feature has its coef and importance lines, 0 included (the reference's clients look
  // prefix_cache_score up by name whichever lines the model type has).
  EXPECT_NE(metrics.find("ttft_coef{feature=\"prefix_cache_score\"}"), std::string::npos);
  EXPECT_NE(metrics.find("ttft_importance{feature=\"prefix_cache_score\"}"), std::string::npos);
  auto r = t.get("/model/export");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "application/gzip");
  util::write_file_atomic(seeded.file("bundle.tar.gz"), r.body);
  // Every member has a non-zero mtime (tar prints 1970 otherwise).
  std::string list_cmd =
      "tar tvzf " + seeded.file("bundle.tar.gz") + " > " + seeded.file("list.txt");
  ASSERT_EQ(std::system(list_cmd.c_str()), 0);
  std::string listing = *util::read_file(seeded.file("list.txt"));
  EXPECT_EQ(listing.find("1970-"), std::string::npos) << listing;
  for (const char* member : {"ttft.ubj", "tpot.ubj", "metadata.json"}) {
    EXPECT_NE(listing.find(member), std::string::npos) << member;
  }
  std::string unpack = "tar xzf " + seeded.file("bundle.tar.gz") + " -C " + seeded.path();
  ASSERT_EQ(std::system(unpack.c_str()), 0);
  Json meta = Json::parse(*util::read_file(seeded.file("metadata.json")));
  EXPECT_EQ(meta["model_type"], "xgboost");
  EXPECT_DOUBLE_EQ(meta["quantile_alpha"].get<double>(), 0.9);
  EXPECT_GT(meta["ttft_samples"].get<int>(), 0);

  TrainerProcess fresh(seeded.path());
  ASSERT_TRUE(fresh.ready) << fresh.process->log();
  EXPECT_EQ(fresh.get_json("/model/ttft/info")["version"],
            t.get_json("/model/ttft/info")["version"]);
  Json row = feature_row(0.7, 2500, 0, 12, 0.3);
  EXPECT_DOUBLE_EQ(predict_ttft(fresh, row), predict_ttft(t, row));
}

}  // namespace
}  // namespace llmd::testing
