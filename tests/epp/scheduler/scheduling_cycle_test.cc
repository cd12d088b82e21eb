#include "epp/scheduler/scheduling_cycle.h"

#include <cmath>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "epp/plugins/common/params.h"
#include "epp/plugins/register.h"
#include "epp/scheduler/config_loader.h"
#include "epp/scheduler/metrics.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::FixedRng;
using testing::pod;

// Test plugins: fixed outputs, so the profile's own work (clamp, weight, sum, stop) is visible.
class FixedScorer final : public PluginBase<Scorer> {
 public:
  FixedScorer(std::string name, std::vector<double> out)
      : PluginBase("fixed-scorer", std::move(name)), out_(std::move(out)) {}
  std::vector<double> score(CycleContext&, std::span<const Endpoint>) const override {
    return out_;
  }

 private:
  std::vector<double> out_;
};

class DropAllFilter final : public PluginBase<Filter> {
 public:
  explicit DropAllFilter(std::string name) : PluginBase("drop-all", std::move(name)) {}
  std::vector<Endpoint> filter(CycleContext&, std::vector<Endpoint>) const override { return {}; }
};

class RecordingProducer final : public PluginBase<DataProducer> {
 public:
  explicit RecordingProducer(std::string name) : PluginBase("recording", std::move(name)) {}
  void produce(CycleContext&, std::vector<Endpoint>& eps) const override {
    for (auto& e : eps) {
      e.prefix = PrefixCacheMatchInfo{1, 2};
    }
  }
  void on_picked(CycleContext&, const Endpoint& e) const override { picked.push_back(e.name()); }
  mutable std::vector<std::string> picked;
};

class ThrowingProducer final : public PluginBase<DataProducer> {
 public:
  ThrowingProducer() : PluginBase("throwing", "throwing") {}
  void produce(CycleContext&, std::vector<Endpoint>&) const override {
    throw std::runtime_error("boom");
  }
};

PipelineConstPtr one_profile(std::vector<Stage<Filter>> filters, std::vector<ScorerStage> scorers,
                             std::shared_ptr<const Picker> picker,
                             std::vector<Stage<DataProducer>> producers = {}) {
  auto p = std::make_shared<Pipeline>();
  p->producers = std::move(producers);
  p->profiles.emplace_back("test", std::move(filters), std::move(scorers), Stage<Picker>{picker});
  return p;
}

std::shared_ptr<const Picker> max_picker(testing::TestServices& s) {
  PluginRegistry r;
  register_builtin_plugins(r);
  return std::dynamic_pointer_cast<const Picker>(
      (*r.find("max-score-picker"))("max", nullptr, s.handle()).plugin);
}

TEST(ProfileTest, ClampsWeightsAndSumsScores) {
  testing::TestServices s;
  auto a = std::make_shared<FixedScorer>("a", std::vector<double>{2.0, -1.0, NAN});
  auto b = std::make_shared<FixedScorer>("b", std::vector<double>{0.5, 0.25, 1.0});
  auto rec = std::make_shared<RecordingProducer>("rec");
  SchedulingCycle d(
      one_profile({}, {{a, 2.0, nullptr}, {b, 1.0, nullptr}}, max_picker(s), {{rec}}));
  FixedRng rng;
  auto r = d.schedule(testing::request(), {pod("x"), pod("y"), pod("z")}, rng);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.scores.size(), 3u);
  EXPECT_DOUBLE_EQ(r.scores[0].score, 2.5);   // 2 x clamp(2.0) + 0.5
  EXPECT_DOUBLE_EQ(r.scores[1].score, 0.25);  // 2 x clamp(-1) + 0.25
  EXPECT_DOUBLE_EQ(r.scores[2].score, 1.0);   // NaN counts as 0
  EXPECT_EQ(r.picked->name(), "x");
  EXPECT_EQ(r.fallback->name(), "z");  // next best, for the single retry
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.profile, "test");
  ASSERT_TRUE(r.picked->prefix);  // attributes travel with the pick
  EXPECT_EQ(rec->picked, (std::vector<std::string>{"x"}));
}

TEST(ProfileTest, WrongSizedScorerOutputIsIgnored) {
  testing::TestServices s;
  auto bad = std::make_shared<FixedScorer>("bad", std::vector<double>{1.0});
  auto good = std::make_shared<FixedScorer>("good", std::vector<double>{0.1, 0.9});
  SchedulingCycle d(one_profile({}, {{bad, 1, nullptr}, {good, 1, nullptr}}, max_picker(s)));
  FixedRng rng;
  auto r = d.schedule(testing::request(), {pod("x"), pod("y")}, rng);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.picked->name(), "y");
}

TEST(ProfileTest, StopsWhenFiltersLeaveNothing) {
  testing::TestServices s;
  auto drop = std::make_shared<DropAllFilter>("dropper");
  auto rec = std::make_shared<RecordingProducer>("rec");
  SchedulingCycle d(one_profile({{drop}}, {}, max_picker(s), {{rec}}));
  FixedRng rng;
  auto r = d.schedule(testing::request(), {pod("x")}, rng);
  EXPECT_EQ(r.outcome, ScheduleResult::Outcome::kNoCandidates);
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.reason.find("dropper"), std::string::npos);
  EXPECT_TRUE(rec->picked.empty());
}

TEST(DirectorTest, NoCandidatesIs503) {
  testing::TestServices s;
  SchedulingCycle d(one_profile({}, {}, max_picker(s)));
  FixedRng rng;
  auto r = d.schedule(testing::request(), {}, rng);
  EXPECT_EQ(r.outcome, ScheduleResult::Outcome::kNoCandidates);
  EXPECT_EQ(r.status, 503);
  EXPECT_FALSE(r.picked);
}

TEST(DirectorTest, FailedProducerDoesNotFailTheRequest) {
  testing::TestServices s;
  prometheus::Registry registry;
  SchedulerMetrics metrics(registry);
  SchedulingCycle d(one_profile({}, {}, max_picker(s), {{std::make_shared<ThrowingProducer>()}}),
                    &metrics);
  FixedRng rng;
  EXPECT_TRUE(d.schedule(testing::request(), {pod("x")}, rng).ok());
  EXPECT_EQ(metrics.producer_failures.Value(), 1);
  EXPECT_EQ(metrics.picked.Value(), 1);
  EXPECT_EQ(metrics.without_predictions.Value(), 1);
}

class DefaultPipelineTest : public ::testing::Test {
 protected:
  DefaultPipelineTest() {
    register_builtin_plugins(registry_);
    auto r = load_pipeline_file(std::string(LLMD_SOURCE_DIR) + "/epp/config/default-pipeline.yaml",
                                registry_, services_.handle(), &metrics_);
    EXPECT_TRUE(r.ok()) << r.error;
    director_ = std::make_unique<SchedulingCycle>(r.pipeline, &metrics_);
  }
  static Endpoint busy(std::string name, double kv) {
    Endpoint e = pod(std::move(name), kv, 1);
    e.dispatched = 2;
    return e;
  }
  PluginRegistry registry_;
  testing::TestServices services_;
  prometheus::Registry prom_;
  SchedulerMetrics metrics_{prom_};
  std::unique_ptr<SchedulingCycle> director_;
};

TEST_F(DefaultPipelineTest, PicksTheOnlyPodMeetingTheSlo) {
  services_.source.answers = {{300, 10}, {80, 10}, {250, 10}};
  SchedulingRequest req = testing::request(std::string(400, 'w'));
  req.slo_ttft_ms = 100;
  FixedRng rng({0.5, 0.5, 0.5}, 0.5);  // no exploration (0.5 > 0.01)
  auto r = director_->schedule(req, {busy("a", 0.5), busy("b", 0.5), busy("c", 0.5)}, rng);
  ASSERT_TRUE(r.ok()) << r.reason;
  EXPECT_EQ(r.picked->name(), "b");
  EXPECT_TRUE(r.predictions_used);
  ASSERT_TRUE(r.picked->latency);
  EXPECT_DOUBLE_EQ(r.picked->latency->ttft_headroom_ms, 20);
  // No tier filter in the default pipeline: every pod reaches the latency scorer, which
  // scores only the pod predicted to meet the SLO.
  ASSERT_EQ(r.scores.size(), 3u);
  for (const auto& s : r.scores) {
    EXPECT_EQ(s.score > 0, s.name() == "b") << s.name() << " scored " << s.score;
  }
  // The pick was recorded in the prefix index: the next request with this prompt sticks to b.
  auto stats = services_.index.stats();
  EXPECT_EQ(stats.pods, 1u);
  EXPECT_EQ(stats.blocks, 6u);  // 400 chars / 64-char blocks
  services_.source.answers = {{90, 10}, {95, 10}, {90, 10}};
  auto again = director_->schedule(req, {busy("a", 0.5), busy("b", 0.5), busy("c", 0.5)}, rng);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.picked->name(), "b");
  ASSERT_EQ(again.scores.size(), 1u);  // strict affinity gate
  EXPECT_DOUBLE_EQ(again.picked->prefix->score(), 1.0);
  EXPECT_EQ(metrics_.picked.Value(), 2);
  EXPECT_EQ(metrics_.with_predictions.Value(), 2);
}

TEST_F(DefaultPipelineTest, FallsBackToCompositeWithoutPredictions) {
  services_.source.fail = true;
  FixedRng rng({}, 0.5);
  Endpoint full = pod("full", 0.95, 0), empty = pod("empty", 0.05, 0);
  full.dispatched = empty.dispatched = 2;
  auto r = director_->schedule(testing::request(), {full, empty}, rng);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.predictions_used);
  ASSERT_EQ(r.scores.size(), 2u);
  // composite, the default pipeline's weights (KV 2, queue 2, prefix 3 of 7):
  // (2 x (1 - kv) + 2 x relQueue + 3 x prefix 0) / 7; the queue is max(waiting, in flight) = 2
  // on both, so relQueue = (2 - 2) / 2 = 0 -> full 0.01, empty 0.27
  EXPECT_NEAR(r.scores[0].score, 0.01, 1e-9);
  EXPECT_NEAR(r.scores[1].score, 0.27, 1e-9);
  // The EPP's own in-flight count outranks a stale empty scrape.
  Endpoint idle = pod("idle", 0.5, 0), loaded = pod("loaded", 0.5, 0);
  loaded.dispatched = 6;
  auto s = director_->schedule(testing::request(), {loaded, idle}, rng);
  ASSERT_EQ(s.scores.size(), 2u);
  EXPECT_LT(s.scores[0].score, s.scores[1].score);
}

TEST_F(DefaultPipelineTest, DeniesHopelessSheddableRequestWith429) {
  services_.source.answers = {{500, 10}, {600, 10}};
  SchedulingRequest req = testing::request();
  req.priority = -1;
  req.slo_ttft_ms = 100;
  FixedRng rng;
  auto r = director_->schedule(req, {busy("a", 0.5), busy("b", 0.5)}, rng);
  EXPECT_EQ(r.outcome, ScheduleResult::Outcome::kDenied);
  EXPECT_EQ(r.status, 429);
  EXPECT_FALSE(r.reason.empty());
  EXPECT_EQ(metrics_.denied.Value(), 1);
  EXPECT_EQ(services_.index.stats().pods, 0u);  // nothing recorded for a denied request
}

TEST_F(DefaultPipelineTest, ReloadSwapsGenerationForLaterRequests) {
  auto rr = load_pipeline_file(std::string(LLMD_SOURCE_DIR) + "/epp/config/round-robin.yaml",
                               registry_, services_.handle());
  ASSERT_TRUE(rr.ok()) << rr.error;
  auto old = director_->pipeline();
  director_->set_pipeline(rr.pipeline);
  FixedRng rng;
  std::vector<std::string> got;
  for (int i = 0; i < 4; ++i) {
    got.push_back(
        director_->schedule(testing::request(), {pod("a"), pod("b")}, rng).picked->name());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "a", "b"}));
  EXPECT_NE(old, director_->pipeline());
}

// The EPP's requests carry the generation they took on arrival: a reload in between does not
// change the pipeline that schedules them.
TEST_F(DefaultPipelineTest, RequestsScheduleWithTheGenerationTheyTook) {
  auto rr = load_pipeline_file(std::string(LLMD_SOURCE_DIR) + "/epp/config/round-robin.yaml",
                               registry_, services_.handle());
  ASSERT_TRUE(rr.ok()) << rr.error;
  const PipelineConstPtr taken = rr.pipeline;      // the request arrived under round-robin
  director_->set_pipeline(director_->pipeline());  // ...then a reload (another generation)
  FixedRng rng;
  std::vector<std::string> got;
  for (int i = 0; i < 4; ++i) {
    got.push_back(
        director_->schedule(taken, testing::request(), {pod("a"), pod("b")}, rng).picked->name());
  }
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "a", "b"}));
  EXPECT_NE(taken, director_->pipeline());
}

// A source that answers later, like the predictor client: the cycle waits without a thread.
class DeferredPredictionSource final : public PredictionSource {
 public:
  PredictionResult predict(const std::vector<features::FeatureInput>&,
                           std::chrono::steady_clock::time_point) override {
    ADD_FAILURE() << "the asynchronous path must not block";
    return std::nullopt;
  }
  void predict_async(std::vector<features::FeatureInput> rows,
                     std::chrono::steady_clock::time_point, PredictionCallback done) override {
    rows_ = rows.size();
    pending = std::move(done);
  }
  std::size_t rows_ = 0;
  PredictionCallback pending;
};

TEST(DirectorAsyncTest, CycleResumesThroughResumeWhenPredictionsArrive) {
  PluginRegistry registry;
  register_builtin_plugins(registry);
  PrefixIndex index;
  DeferredPredictionSource source;
  Handle handle{index, &source, [](std::string_view) { return std::nullopt; },
                [] { return testing::kNow; }};
  auto loaded = load_pipeline_file(
      std::string(LLMD_SOURCE_DIR) + "/epp/config/default-pipeline.yaml", registry, handle);
  ASSERT_TRUE(loaded.ok()) << loaded.error;
  SchedulingCycle d(loaded.pipeline);
  FixedRng rng({0.5, 0.5, 0.5}, 0.5);
  SchedulingRequest req = testing::request(std::string(200, 'z'));
  req.slo_ttft_ms = 100;
  std::optional<ScheduleResult> result;
  std::vector<std::function<void()>> resumed;
  Endpoint a = pod("a", 0.5, 1), b = pod("b", 0.5, 1), c = pod("c", 0.5, 1);
  d.schedule_async(
      loaded.pipeline, req, {a, b, c}, rng,
      [&](std::function<void()> f) { resumed.push_back(std::move(f)); },
      [&](ScheduleResult r) { result = std::move(r); });
  // Asked for all three pods, and nothing decided yet.
  ASSERT_TRUE(source.pending);
  EXPECT_EQ(source.rows_, 3u);
  EXPECT_FALSE(result);
  source.pending(std::vector<Prediction>{{300, 10}, {80, 10}, {250, 10}});
  // The answer does not run the rest of the cycle on the predictor's thread: it is handed to
  // `resume` (the EPP posts it onto the request's strand).
  EXPECT_FALSE(result);
  ASSERT_EQ(resumed.size(), 1u);
  resumed[0]();
  ASSERT_TRUE(result);
  ASSERT_TRUE(result->ok()) << result->reason;
  EXPECT_EQ(result->picked->name(), "b");  // the only pod predicted under the 100 ms SLO
  EXPECT_TRUE(result->predictions_used);
}

TEST(DirectorAsyncTest, ProducersAnsweringInlineFinishBeforeScheduleAsyncReturns) {
  testing::TestServices s;
  SchedulingCycle d(
      one_profile({}, {}, max_picker(s), {{std::make_shared<RecordingProducer>("rec")}}));
  FixedRng rng;
  std::optional<ScheduleResult> result;
  bool resumed = false;
  d.schedule_async(
      d.pipeline(), testing::request(), {pod("x")}, rng,
      [&](std::function<void()> f) {
        resumed = true;
        f();
      },
      [&](ScheduleResult r) { result = std::move(r); });
  ASSERT_TRUE(result);
  EXPECT_TRUE(result->ok());
  EXPECT_FALSE(resumed);  // inline answers continue on the caller's stack
}

TEST_F(DefaultPipelineTest, LoadPrefixHeuristicPrefersCachedIdlePod) {
  auto lp = load_pipeline_file(std::string(LLMD_SOURCE_DIR) + "/epp/config/load-prefix.yaml",
                               registry_, services_.handle());
  ASSERT_TRUE(lp.ok()) << lp.error;
  SchedulingCycle d(lp.pipeline);
  FixedRng rng;
  SchedulingRequest req = testing::request(std::string(256, 'q'));
  auto first = d.schedule(req, {pod("a", 0.5, 3), pod("b", 0.2, 0)}, rng);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first.picked->name(), "b");  // emptier and shorter queue
  // b now holds the prompt: 0 (queue) + 0.8 (kv) + 1 (prefix) beats a's 1 + 0.7 + 0.
  auto second = d.schedule(req, {pod("a", 0.3, 0), pod("b", 0.2, 1)}, rng);
  EXPECT_EQ(second.picked->name(), "b");
}

}  // namespace
}  // namespace llmd::epp
