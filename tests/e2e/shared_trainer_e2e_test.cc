// One trainer for several EPPs (issue 32 item 4, deploy/components/shared-trainer), with the real
// executables on loopback: two EPPs, each with its own predictor, route the same modelsim pool
// and feed ONE trainer, reached by a host name as in the manifests (http://localhost:<port>
// here, http://trainer:8000 there).
// 1. Exactly once across EPPs: each EPP's batches carry its own random sender id
//    (`<sender>:<seq>`, both sequences start at 1), so the trainer must ingest every sample of
//    both - none lost, none taken for a duplicate of the other EPP's batch with the same
//    sequence number: trainer ingested = EPP A acknowledged + EPP B acknowledged, each EPP
//    produced = acknowledged (2 samples per completed stream), 0 duplicate batches.
// 2. One model for all: once the trainer has trained on both EPPs' samples, both predictors
//    serve the same TTFT and TPOT model (version and lineage) and answer the same row alike.
// 3. Warm failover: EPP B and its predictor stop; a new EPP with a new, empty predictor starts
//    against the same trainer. Its predictor's first model is the trained one (same version and
//    lineage, same answer to a probe row) and the EPP schedules its requests with predictions
//    from it. Control: the same replacement with a trainer of its own (the sidecar layout)
//    serves a new lineage and predicts the cold-start constant (10 ms) for every pod.
// 4. A trainer outage under traffic loses nothing: the trainer stops (SIGTERM, as in a rollout)
//    for longer than the EPP's 4 resends of a 5xx-answered batch while streams go on, then
//    comes back on the same address and volume; every sample reaches it once.
// Waits are bounded polls; the measured start-up times are printed (RecordProperty).
#include <gtest/gtest.h>

#include <atomic>
#include <regex>
#include <sstream>
#include <thread>

#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct EppFeedback {
  double produced = 0, acknowledged = 0, dropped = 0, queued = 0, retried = 0;
  static EppFeedback of(Stack& s) {
    const std::string m = s.metrics();
    return {metric_value(m, "llmd_epp_feedback_samples_produced_total"),
            metric_value(m, "llmd_epp_feedback_samples_acknowledged_total"),
            metric_value(m, "llmd_epp_feedback_samples_dropped_total"),
            metric_value(m, "llmd_epp_feedback_queue_depth"),
            metric_value(m, "llmd_epp_feedback_samples_retried_total")};
  }
  bool settled() const { return queued == 0 && produced == acknowledged + dropped; }
  std::string text() const {
    std::ostringstream s;
    s << "produced " << produced << ", acknowledged " << acknowledged << ", dropped " << dropped
      << ", queued " << queued << ", retried " << retried;
    return s.str();
  }
};

// What a predictor serves: /status model_versions and model_generations of ttft and tpot.
struct Served {
  int64_t ttft = -1, tpot = -1;
  std::string ttft_gen, tpot_gen;
  bool operator==(const Served&) const = default;
  std::string text() const {
    return "ttft v" + std::to_string(ttft) + " (" + ttft_gen + "), tpot v" + std::to_string(tpot) +
           " (" + tpot_gen + ")";
  }
};

Served served_by(uint16_t predictor_port) {
  http::HttpClient c("127.0.0.1", predictor_port, std::chrono::seconds(5));
  Json s = Json::parse(c.get("/status").body, nullptr, false);
  Served out;
  if (s.is_discarded() || !s.contains("model_versions") || !s.contains("model_generations")) {
    return out;
  }
  const Json& v = s["model_versions"];
  const Json& g = s["model_generations"];
  out.ttft = v.value("ttft", int64_t{-1});
  out.tpot = v.value("tpot", int64_t{-1});
  out.ttft_gen = g.value("ttft", "");
  out.tpot_gen = g.value("tpot", "");
  return out;
}

Served published_by(TrainerProcess& t) {
  Json ttft = t.get_json("/model/ttft/info");
  Json tpot = t.get_json("/model/tpot/info");
  return {ttft.value("version", int64_t{-1}), tpot.value("version", int64_t{-1}),
          ttft.value("generation", ""), tpot.value("generation", "")};
}

// One /predict row, answered by a predictor (or the trainer): its ttft_ms and tpot_ms.
std::pair<double, double> predict(uint16_t port) {
  http::HttpClient c("127.0.0.1", port, std::chrono::seconds(5));
  auto r = c.post("/predict", feature_row(0.3, 700, 1, 5, 0.25, 1).dump());
  Json j = Json::parse(r.body, nullptr, false);
  if (r.status != 200 || j.is_discarded()) return {-1, -1};
  return {j.value("ttft_ms", -1.0), j.value("tpot_ms", -1.0)};
}

// `n` streamed completions through the EPP of `s` from `threads` clients; returns how many ended
// with 200 and [DONE].
int stream_through(Stack& s, int n, int threads, const std::string& tag) {
  std::atomic<int> next{0}, done{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&, t] {
      http::HttpClient c("127.0.0.1", s.epp_port, std::chrono::seconds(30));
      for (int i = next++; i < n; i = next++) {
        Json body = {{"model", s.model},
                     {"prompt", words(20 + (i * 37 + t * 11) % 400, tag + std::to_string(i % 7))},
                     {"max_tokens", 3 + i % 8},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
        auto r = c.request("POST", "/v1/completions", body.dump(), "application/json");
        if (r.status == 200 && r.body.find("data: [DONE]") != std::string::npos) ++done;
      }
    });
  }
  for (auto& c : clients) c.join();
  return done;
}

// The per-pod predicted TTFTs of x-llmd-decision ("pod-0:ttft=12.3,..."), empty when the
// request was scheduled without predictions.
std::vector<double> predicted_ttfts(const std::string& header) {
  std::vector<double> out;
  if (header.find("predictions=yes") == std::string::npos) return out;
  static const std::regex kTtft(R"(pod-[0-9]+:ttft=([0-9.]+))");
  for (auto it = std::sregex_iterator(header.begin(), header.end(), kTtft);
       it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod((*it)[1]));
  }
  return out;
}

// Starts a replacement EPP (+ one empty predictor) on the pool, then sends requests with the
// debug header until one is scheduled with predictions (bounded). Reports how long the pod took
// to be ready, what its predictor served first, and the first predicted TTFTs.
struct Replacement {
  std::unique_ptr<Stack> stack;
  double ready_ms = -1;  // start -> EPP and predictor ready
  Served first_served;   // the predictor's models when the stack was ready
  std::pair<double, double> first_answer{-1, -1};  // and its answer to predict()'s row
  int requests_before_predictions = -1;
  double first_prediction_ms = -1;  // start -> first request scheduled with predictions
  std::vector<double> first_ttfts;
};

Replacement start_replacement(StackOptions o) {
  Replacement r;
  o.epp_args = {"--allow-debug-header", "true"};
  const auto start = Clock::now();
  r.stack = std::make_unique<Stack>(std::move(o));
  r.ready_ms = ms_since(start);
  if (!r.stack->ready) return r;
  r.first_served = served_by(r.stack->predictor_ports[0]);
  r.first_answer = predict(r.stack->predictor_ports[0]);
  for (int i = 0; i < 100; ++i) {
    auto resp = r.stack->complete(words(12, "failover" + std::to_string(i)), 4, true,
                                  {{"x-llmd-debug", "1"}});
    auto ttfts = predicted_ttfts(std::string(resp.header("x-llmd-decision")));
    if (resp.status == 200 && !ttfts.empty()) {
      r.requests_before_predictions = i;
      r.first_prediction_ms = ms_since(start);
      r.first_ttfts = ttfts;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return r;
}

std::string join(const std::vector<double>& v) {
  std::ostringstream s;
  for (double x : v) s << x << " ";
  return s.str();
}

TEST(SharedTrainer, TwoEppsFeedOneTrainerAndAReplacementEppPredictsWithTheTrainedModelAtOnce) {
  TempDir dir;
  TrainerProcess trainer(dir.file("trainer"),
                         {"--retraining-interval", "0.5", "--min-samples-for-retrain", "20"});
  ASSERT_TRUE(trainer.ready) << trainer.process->log();
  const std::string url = "http://localhost:" + std::to_string(trainer.port);
  auto trainer_log = [&] { return "\n--- trainer ---\n" + trainer.process->log(); };

  StackOptions oa;
  oa.pods = 2;
  oa.predictors = 1;
  oa.trainer_url = url;
  auto a = std::make_unique<Stack>(oa);
  ASSERT_TRUE(a->ready) << a->logs() << trainer_log();
  StackOptions ob = oa;
  ob.pool_base_port = a->pod_port(0);  // the same pool: two replicas of one router
  auto b = std::make_unique<Stack>(ob);
  ASSERT_TRUE(b->ready) << b->logs() << trainer_log();
  ASSERT_EQ(a->trainer, nullptr);  // neither stack runs a trainer of its own

  // 1. Traffic through both EPPs at once; every stream has >= 3 tokens: a TTFT and a TPOT sample.
  constexpr int kPerEpp = 60;
  int done_a = 0, done_b = 0;
  {
    std::thread ta([&] { done_a = stream_through(*a, kPerEpp, 2, "a"); });
    std::thread tb([&] { done_b = stream_through(*b, kPerEpp, 2, "b"); });
    ta.join();
    tb.join();
  }
  ASSERT_EQ(done_a, kPerEpp) << a->logs();
  ASSERT_EQ(done_b, kPerEpp) << b->logs();
  EppFeedback fa, fb;
  double ingested = 0;
  for (int i = 0; i < 300; ++i) {  // <= 30 s
    fa = EppFeedback::of(*a);
    fb = EppFeedback::of(*b);
    ingested = metric_value(trainer.get("/metrics").body, "llmd_trainer_samples_ingested_total");
    if (fa.settled() && fb.settled() && fa.produced == 2 * done_a && fb.produced == 2 * done_b &&
        ingested >= fa.acknowledged + fb.acknowledged) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string tm = trainer.get("/metrics").body;
  const double duplicates =
      metric_value(tm, "llmd_trainer_ingest_batches_total", {"result=\"duplicate\""});
  const double batches = metric_value(tm, "llmd_trainer_ingest_batches_total", {"result=\"ok\""});
  Json status = trainer.get_json("/data/status");
  const int64_t stored = status["training_data"]["total_samples"].get<int64_t>() +
                         status["test_data"]["total_samples"].get<int64_t>();
  std::ostringstream counts;
  counts << "EPP A: " << fa.text() << "\nEPP B: " << fb.text() << "\ntrainer: ingested " << ingested
         << ", stored " << stored << ", batches ok " << batches << ", duplicate " << duplicates;
  std::cout << counts.str() << std::endl;
  EXPECT_EQ(fa.produced, 2 * kPerEpp) << counts.str();
  EXPECT_EQ(fb.produced, 2 * kPerEpp) << counts.str();
  EXPECT_EQ(fa.acknowledged, fa.produced) << "EPP A lost samples; " << counts.str();
  EXPECT_EQ(fb.acknowledged, fb.produced) << "EPP B lost samples; " << counts.str();
  EXPECT_EQ(ingested, fa.acknowledged + fb.acknowledged)
      << "the trainer must hold every sample of both EPPs; " << counts.str();
  EXPECT_EQ(stored, fa.acknowledged + fb.acknowledged) << counts.str();
  EXPECT_EQ(duplicates, 0) << "a batch of one EPP was taken for the other's; " << counts.str();
  EXPECT_GE(batches, 2) << counts.str();

  // 2. The model trained on both: no sample arrives any more, so the TTFT model is final once
  // neither its version nor the fit count moved for 3 s (6 retraining intervals).
  Served final_model;
  {
    Served last;
    double last_fits = -1;
    auto stable_since = Clock::now();
    for (int i = 0; i < 600; ++i) {  // <= 60 s
      const double fits = metric_value(trainer.get("/metrics").body, "llmd_trainer_fits_total",
                                       {"target=\"ttft\"", "result=\"ok\""});
      const Served now = published_by(trainer);
      if (!(now == last) || fits != last_fits) {
        last = now;
        last_fits = fits;
        stable_since = Clock::now();
      } else if (fits >= 1 && ms_since(stable_since) >= 3000) {
        final_model = now;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_GT(final_model.ttft, 1) << "no trained TTFT model: " << final_model.text()
                                 << trainer_log();
  ASSERT_FALSE(final_model.ttft_gen.empty());
  for (Stack* s : {a.get(), b.get()}) {
    Served got;
    for (int i = 0; i < 100 && !(got == final_model); ++i) {  // <= 10 s
      got = served_by(s->predictor_ports[0]);
      if (!(got == final_model)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(got, final_model) << "predictor " << s->predictor_ports[0] << " serves " << got.text()
                                << ", the trainer publishes " << final_model.text();
  }
  const auto pa = predict(a->predictor_ports[0]);
  const auto pb = predict(b->predictor_ports[0]);
  EXPECT_GT(pa.first, 0);
  EXPECT_EQ(pa, pb) << "the two EPPs' predictors answer one row differently";
  EXPECT_NE(pa.first, 10.0) << "the cold-start constant, not a trained model";

  // 3. EPP B's pod goes away (EPP and predictor); a new one starts against the same trainer.
  b.reset();
  StackOptions oc = oa;
  oc.pool_base_port = a->pod_port(0);
  Replacement shared = start_replacement(oc);
  ASSERT_TRUE(shared.stack->ready) << shared.stack->logs() << trainer_log();
  // Control: the same replacement with a trainer of its own, as with per-pod sidecars.
  StackOptions od = oc;
  od.trainer_url.clear();
  od.trainer_args = {"--min-samples-for-retrain", "100000"};  // stays at its cold start
  Replacement sidecar = start_replacement(od);
  ASSERT_TRUE(sidecar.stack->ready) << sidecar.stack->logs();

  std::ostringstream report;
  report << "shared trainer: replacement ready in " << shared.ready_ms << " ms serving "
         << shared.first_served.text() << "; first predicted request after "
         << shared.requests_before_predictions << " unpredicted, at " << shared.first_prediction_ms
         << " ms, TTFTs " << join(shared.first_ttfts) << "(trained model's answer to the probe "
         << "row: " << pa.first << " ms)\nown trainer (sidecar layout): ready in "
         << sidecar.ready_ms << " ms serving " << sidecar.first_served.text()
         << "; first predicted request after " << sidecar.requests_before_predictions
         << " unpredicted, TTFTs " << join(sidecar.first_ttfts);
  std::cout << report.str() << std::endl;
  RecordProperty("shared_replacement_ready_ms", std::to_string(shared.ready_ms));
  RecordProperty("shared_first_prediction_ms", std::to_string(shared.first_prediction_ms));
  RecordProperty("sidecar_replacement_ready_ms", std::to_string(sidecar.ready_ms));

  // The replacement's predictor had nothing on disk: its first model is the trained one.
  EXPECT_EQ(shared.first_served, final_model) << report.str();
  EXPECT_EQ(shared.first_answer, pa) << report.str();
  // Its EPP schedules with predictions (from that predictor, the only one it has). The per-pod
  // values in the header are rounded to 0.1 ms, so they are reported, not compared with 10.
  ASSERT_FALSE(shared.first_ttfts.empty())
      << "no request was scheduled with predictions; " << report.str() << shared.stack->logs();
  // The control: a new lineage at its cold-start defaults.
  EXPECT_NE(sidecar.first_served.ttft_gen, final_model.ttft_gen) << report.str();
  ASSERT_FALSE(sidecar.first_ttfts.empty()) << report.str() << sidecar.stack->logs();
  for (double t : sidecar.first_ttfts) {
    EXPECT_EQ(t, 10.0) << report.str();
  }
  // And the replacement feeds the same trainer.
  const double before =
      metric_value(trainer.get("/metrics").body, "llmd_trainer_samples_ingested_total");
  for (int i = 0; i < 100; ++i) {  // <= 10 s
    if (metric_value(trainer.get("/metrics").body, "llmd_trainer_samples_ingested_total") >
        before) {
      break;
    }
    if (i == 0) stream_through(*shared.stack, 4, 1, "c");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(metric_value(trainer.get("/metrics").body, "llmd_trainer_samples_ingested_total"),
            before)
      << "the replacement EPP's samples do not reach the shared trainer";
}

TEST(SharedTrainer, ATrainerOutageUnderTrafficLosesNoSample) {
  TempDir dir;
  const std::vector<std::string> args = {"--retraining-interval", "0.5"};
  auto trainer = std::make_unique<TrainerProcess>(dir.file("trainer"), args);
  ASSERT_TRUE(trainer->ready) << trainer->process->log();
  const uint16_t port = trainer->port;
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  o.trainer_url = "http://localhost:" + std::to_string(port);
  Stack s(o);
  ASSERT_TRUE(s.ready) << s.logs();

  ASSERT_EQ(stream_through(s, 10, 2, "before"), 10) << s.logs();
  auto settled = [&](int produced) {
    EppFeedback f;
    for (int i = 0; i < 300; ++i) {  // <= 30 s
      f = EppFeedback::of(s);
      if (f.produced == produced && f.settled()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return f;
  };
  EppFeedback f = settled(20);
  ASSERT_EQ(f.acknowledged, 20) << f.text();

  // Down for ~6 feedback intervals (1 s each): the batch of the outage's first streams is sent
  // and refused six times or more; streams go on meanwhile (the predictor keeps its model).
  ASSERT_EQ(trainer->process->terminate(), 0) << trainer->process->log();
  const auto down = Clock::now();
  int during = stream_through(s, 10, 2, "during");
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  during += stream_through(s, 10, 2, "during-late");
  while (ms_since(down) < 6500) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(during, 20) << s.logs();
  f = EppFeedback::of(s);
  EXPECT_GE(f.retried, 2) << "the EPP did not resend while the trainer was down; " << f.text();
  EXPECT_EQ(f.dropped, 0) << f.text();

  trainer = std::make_unique<TrainerProcess>(dir.file("trainer"), args, port);
  ASSERT_TRUE(trainer->ready) << trainer->process->log();
  f = settled(60);
  std::cout << "after the outage: " << f.text() << std::endl;
  EXPECT_EQ(f.produced, 60) << f.text();
  EXPECT_EQ(f.acknowledged, 60) << "samples lost in the outage; " << f.text() << s.logs();
  EXPECT_EQ(f.dropped, 0) << f.text();
  // The trainer holds each once: 20 from before (its snapshot) + 40 delivered after.
  Json status = trainer->get_json("/data/status");
  const int64_t stored = status["training_data"]["total_samples"].get<int64_t>() +
                         status["test_data"]["total_samples"].get<int64_t>();
  EXPECT_EQ(stored, 60) << trainer->process->log();
}

}  // namespace
}  // namespace llmd::testing
