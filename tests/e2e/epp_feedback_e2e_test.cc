// Training feedback through the real executables (issue 12, item 1): mixed traffic through the
// EPP (non-streaming, streaming with `stream_options.include_usage`, streaming without it;
// completions and chat; varied prompt lengths; multi-turn conversations so prefixes are reused)
// must give the trainer
// - exactly one TTFT sample (sent at the first token) and one TPOT sample (sent at completion)
//   per completed stream, token count from the counted chunks when the stream has no usage;
// - no sample at all for non-streaming requests (their end-to-end time is not a TTFT);
// and, once a model trained on that feedback is served, a live TTFT error <= 30 %.
//
// Live error: the trainer keeps llmd_trainer_live_prediction_ape_percent{target="ttft"}, an EWMA
// (weight 0.02 per sample) of |predicted - actual| / actual over every sample that carries the
// EPP's `predicted_ttft_ms`, including those predicted by the cold-start constant model. So the
// test sends a first phase, waits for a TTFT fit and for both predictors to serve it, then sends a
// second phase and measures on it: both the gauge as exposed and the EWMA of the second phase
// alone (the gauge with the first phase's remaining weight 0.98^n taken out) must be <= 30 %.
// The trainer runs with the `mean` objective: the APE gauge compares a point estimate with the
// actual. Under the default `quantile` objective the served TTFT is a p90 - an upper bound that
// typical requests land well below (measured here: 91 % coverage, as calibrated, and an "APE" of
// 31-64 % that is the quantile margin, not an error); for such a model the trainer's live
// check is the coverage gauge llmd_trainer_live_prediction_coverage_percent.
//
// No timed assertions: waits are bounded polls; every failure prints the numbers.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

// What the client saw in one SSE response.
struct SseView {
  bool done = false;
  int content_chunks = 0;  // events whose first choice carried non-empty text / delta.content
  std::optional<int64_t> usage_completion_tokens;
  bool usage_seen = false;  // any event with a non-null "usage"
  std::string text;
  std::string error;
};

SseView scan_sse(const std::string& body) {
  SseView v;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (line.rfind("data:", 0) != 0) {
      continue;
    }
    std::string data = line.substr(5);
    data.erase(0, data.find_first_not_of(' '));
    if (data == "[DONE]") {
      v.done = true;
      continue;
    }
    Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      v.error = "unparsable SSE event: " + data.substr(0, 200);
      continue;
    }
    if (j.contains("usage") && !j["usage"].is_null()) {
      v.usage_seen = true;
      const Json& u = j["usage"];
      if (u.is_object() && u.contains("completion_tokens") &&
          u["completion_tokens"].is_number_integer()) {
        v.usage_completion_tokens = u["completion_tokens"].get<int64_t>();
      }
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) {
      continue;
    }
    const Json& c = j["choices"][0];
    std::string piece;
    if (c.contains("text") && c["text"].is_string()) {
      piece = c["text"].get<std::string>();
    } else if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
               c["delta"]["content"].is_string()) {
      piece = c["delta"]["content"].get<std::string>();
    }
    if (!piece.empty()) {
      ++v.content_chunks;
      v.text += piece;
    }
  }
  return v;
}

enum class Kind { kNonStreaming = 0, kStreamUsage = 1, kStreamNoUsage = 2 };

struct PhaseResult {
  int sent = 0;
  int failed = 0;  // non-200 or a malformed response
  int non_streaming_ok = 0;
  int chat = 0;
  int completions = 0;
  int multi_turn = 0;  // requests that continue a conversation (turn >= 2)
  // Streams that completed ([DONE] seen) with >= 2 content chunks: each must give exactly one
  // TTFT and one TPOT sample.
  int streams_usage_done = 0;
  int streams_no_usage_done = 0;
  int streams_one_token = 0;  // completed with exactly 1 token: TTFT sample, no TPOT sample
  int64_t streamed_tokens = 0;
  std::vector<std::string> problems;  // the first few, for the failure message

  int completed_streams() const {
    return streams_usage_done + streams_no_usage_done + streams_one_token;
  }
  int tpot_streams() const { return streams_usage_done + streams_no_usage_done; }
  void merge(const PhaseResult& o) {
    sent += o.sent;
    failed += o.failed;
    non_streaming_ok += o.non_streaming_ok;
    chat += o.chat;
    completions += o.completions;
    multi_turn += o.multi_turn;
    streams_usage_done += o.streams_usage_done;
    streams_no_usage_done += o.streams_no_usage_done;
    streams_one_token += o.streams_one_token;
    streamed_tokens += o.streamed_tokens;
    for (const auto& p : o.problems) {
      if (problems.size() < 10) {
        problems.push_back(p);
      }
    }
  }
  std::string summary() const {
    std::ostringstream s;
    s << "sent " << sent << ", failed " << failed << ", non-streaming ok " << non_streaming_ok
      << ", streams done (usage) " << streams_usage_done << ", streams done (no usage) "
      << streams_no_usage_done << ", one-token streams " << streams_one_token << ", chat " << chat
      << ", completions " << completions << ", multi-turn " << multi_turn << ", streamed tokens "
      << streamed_tokens;
    for (const auto& p : problems) {
      s << "\n  problem: " << p;
    }
    return s.str();
  }
};

// A conversation: a (shared) system prompt and the turns so far; chat or completions.
struct Conversation {
  bool chat = false;
  std::string system;
  std::vector<std::pair<std::string, std::string>> turns;  // (user, assistant)
  int turns_left = 0;
};

class FeedbackStack : public ::testing::Test {
 protected:
  void SetUp() override {
    // 4 pods, 2 predictors; the trainer retrains every 0.5 s from 20 samples (the fixture's
    // settings) with the mean objective (see the file comment). The pods run at a tenth of real
    // speed: TTFTs of ~50-300 ms of wall time instead of 5-30, so that scheduling hiccups of a
    // loaded 2-core machine (a few to tens of ms, on the TTFT the EPP measures and on the
    // samples the model learns from) stay small next to the latency being predicted. At half
    // speed (TTFTs of 10-60 ms) the live error reached 42 % on a loaded machine (two busy loops
    // and another e2e test beside it); at a tenth it was 20-23 % under such load.
    StackOptions o;
    o.modelsim_args = {"--time-scale", "0.1"};
    o.trainer_args = {"--objective-type", "mean"};
    stack_ = std::make_unique<Stack>(o);
    ASSERT_TRUE(stack_->ready) << stack_->logs();
    // System prompts shared across conversations: prefix reuse across users as well.
    for (int n : {40, 180, 450, 900}) {
      systems_.push_back(words(n, "sys" + std::to_string(n) + "x"));
    }
  }
  void TearDown() override {
    if (HasFailure() && stack_) {
      std::string logs = stack_->logs() + "\n--- trainer ---\n" + stack_->trainer->process->log();
      std::cerr << logs.substr(logs.size() > 30000 ? logs.size() - 30000 : 0);
    }
  }

  Conversation new_conversation(std::mt19937& rng, bool chat) {
    Conversation c;
    c.chat = chat;
    c.system = systems_[rng() % systems_.size()];
    c.turns_left = 2 + static_cast<int>(rng() % 4);  // 2-5 turns
    return c;
  }

  // Sends one request of `kind` continuing `conv` and checks the response as a client would.
  void send(http::HttpClient& client, Conversation& conv, Kind kind, std::mt19937& rng,
            const std::string& tag, PhaseResult& out) {
    // 2-6: every stream still gives a TPOT sample, and at a tenth of real speed (see SetUp) a
    // request takes ~0.1-0.4 s of wall time.
    const int max_tokens = 2 + static_cast<int>(rng() % 5);
    // Half short questions (5-64 words), half long ones (50-649): the uncached prefill, hence
    // the TTFT, varies with the request, so a model has to learn it (a constant cannot pass).
    const int user_words =
        rng() % 2 == 0 ? 5 + static_cast<int>(rng() % 60) : 50 + static_cast<int>(rng() % 600);
    const std::string user = words(user_words, tag + "n" + std::to_string(conv.turns.size()) + "u");
    const bool stream = kind != Kind::kNonStreaming;
    Json body = {{"model", stack_->model}, {"max_tokens", max_tokens}, {"stream", stream}};
    if (kind == Kind::kStreamUsage) {
      body["stream_options"] = {{"include_usage", true}};
    }
    if (conv.chat) {
      Json messages = Json::array({{{"role", "system"}, {"content", conv.system}}});
      for (const auto& [u, a] : conv.turns) {
        messages.push_back({{"role", "user"}, {"content", u}});
        messages.push_back({{"role", "assistant"}, {"content", a}});
      }
      messages.push_back({{"role", "user"}, {"content", user}});
      body["messages"] = std::move(messages);
    } else {
      std::string prompt = conv.system;
      for (const auto& [u, a] : conv.turns) {
        prompt += u + a + " ";
      }
      body["prompt"] = prompt + user;
    }
    ++out.sent;
    ++(conv.chat ? out.chat : out.completions);
    out.multi_turn += conv.turns.empty() ? 0 : 1;
    const std::string path = conv.chat ? "/v1/chat/completions" : "/v1/completions";
    auto r = client.request("POST", path, body.dump(), "application/json");
    auto problem = [&](const std::string& what) {
      ++out.failed;
      if (out.problems.size() < 10) {
        out.problems.push_back(path + " kind " + std::to_string(static_cast<int>(kind)) + ": " +
                               what);
      }
    };
    if (r.status != 200) {
      problem("HTTP " + std::to_string(r.status) + " " + r.body.substr(0, 300));
      return;
    }
    std::string answer;
    if (!stream) {
      Json j = Json::parse(r.body, nullptr, false);
      if (j.is_discarded() || !j.contains("usage") ||
          j["usage"].value("completion_tokens", -1) != max_tokens || !j.contains("choices") ||
          j["choices"].empty()) {
        problem("bad non-streaming body: " + r.body.substr(0, 300));
        return;
      }
      const Json& c = j["choices"][0];
      answer = conv.chat ? c["message"].value("content", "") : c.value("text", "");
      ++out.non_streaming_ok;
    } else {
      SseView v = scan_sse(r.body);
      if (!v.error.empty() || !v.done) {
        problem("stream not completed ([DONE] " + std::to_string(v.done) + ") " + v.error);
        return;
      }
      // vLLM streams one token per content chunk, and usage only with include_usage.
      if (kind == Kind::kStreamUsage &&
          (!v.usage_completion_tokens || *v.usage_completion_tokens != v.content_chunks ||
           v.content_chunks != max_tokens)) {
        problem("include_usage stream: usage " +
                (v.usage_completion_tokens ? std::to_string(*v.usage_completion_tokens) : "none") +
                ", content chunks " + std::to_string(v.content_chunks) + ", max_tokens " +
                std::to_string(max_tokens));
        return;
      }
      if (kind == Kind::kStreamNoUsage && (v.usage_seen || v.content_chunks != max_tokens)) {
        problem("stream without include_usage: usage seen " + std::to_string(v.usage_seen) +
                ", content chunks " + std::to_string(v.content_chunks) + ", max_tokens " +
                std::to_string(max_tokens));
        return;
      }
      out.streamed_tokens += v.content_chunks;
      if (v.content_chunks >= 2) {
        ++(kind == Kind::kStreamUsage ? out.streams_usage_done : out.streams_no_usage_done);
      } else if (v.content_chunks == 1) {
        ++out.streams_one_token;
      }
      answer = v.text;
    }
    conv.turns.emplace_back(user, answer);
  }

  // `total` requests over `threads` client threads; request i is of kind i % 3 and goes to
  // chat or completions by conversation (each thread alternates between two conversations).
  PhaseResult run_phase(int total, int threads, const std::string& phase) {
    std::atomic<int> next{0};
    std::mutex mu;
    PhaseResult all;
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937 rng(static_cast<uint32_t>(1000 * t + static_cast<int>(phase[0]) * 7919 + 17));
        http::HttpClient client("127.0.0.1", stack_->epp_port, std::chrono::seconds(30));
        PhaseResult mine;
        Conversation convs[2] = {new_conversation(rng, t % 2 == 0),
                                 new_conversation(rng, t % 2 != 0)};
        int conv_id = 0;
        for (int i = next++; i < total; i = next++) {
          Conversation& c = convs[i % 2];
          const std::string tag = phase + "t" + std::to_string(t) + "s" + std::to_string(i % 2) +
                                  "c" + std::to_string(conv_id);
          send(client, c, static_cast<Kind>(i % 3), rng, tag, mine);
          if (--c.turns_left <= 0) {
            const bool chat = c.chat;
            c = new_conversation(rng, chat);
            ++conv_id;
          }
        }
        std::lock_guard lock(mu);
        all.merge(mine);
      });
    }
    for (auto& w : workers) {
      w.join();
    }
    return all;
  }

  struct TrainerCounts {
    double ingested_ttft = 0, ingested_tpot = 0;  // llmd_trainer_samples_ingested_total
    int64_t stored_ttft = 0, stored_tpot = 0;     // /data/status training + test
    double live_ttft = -1, live_tpot = -1;        // llmd_trainer_live_prediction_ape_percent
    double fits_ttft = 0;
    bool retrained = false;
    std::string text() const {
      std::ostringstream s;
      s << "trainer: ingested TTFT " << ingested_ttft << " TPOT " << ingested_tpot
        << "; stored (training+test) TTFT " << stored_ttft << " TPOT " << stored_tpot
        << "; live APE TTFT " << live_ttft << " % TPOT " << live_tpot << " %; TTFT fits "
        << fits_ttft;
      return s.str();
    }
  };

  TrainerCounts trainer_counts() {
    TrainerCounts c;
    std::string m = stack_->trainer->get("/metrics").body;
    c.ingested_ttft = metric_value(m, "llmd_trainer_samples_ingested_total", {"target=\"ttft\""});
    c.ingested_tpot = metric_value(m, "llmd_trainer_samples_ingested_total", {"target=\"tpot\""});
    c.live_ttft = metric_value(m, "llmd_trainer_live_prediction_ape_percent", {"target=\"ttft\""});
    c.live_tpot = metric_value(m, "llmd_trainer_live_prediction_ape_percent", {"target=\"tpot\""});
    c.fits_ttft = metric_value(m, "llmd_trainer_fits_total", {"target=\"ttft\"", "result=\"ok\""});
    Json s = stack_->trainer->get_json("/data/status");
    c.stored_ttft = s["training_data"]["ttft_samples"].get<int64_t>() +
                    s["test_data"]["ttft_samples"].get<int64_t>();
    c.stored_tpot = s["training_data"]["tpot_samples"].get<int64_t>() +
                    s["test_data"]["tpot_samples"].get<int64_t>();
    c.retrained = !s["last_retrain"].is_null();
    return c;
  }

  // Polls until the trainer has ingested at least the expected samples (the bound only guards
  // against a hang; the exact counts are then asserted with every number), then waits out two
  // more feedback flushes (1 s each) so that any extra sample would have arrived.
  TrainerCounts wait_for_feedback(int expected_ttft, int expected_tpot) {
    TrainerCounts c;
    for (int i = 0; i < 600; ++i) {  // hang guard: 60 s (a pass takes 1-2 s)
      c = trainer_counts();
      if (c.ingested_ttft >= expected_ttft && c.ingested_tpot >= expected_tpot) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    return trainer_counts();
  }

  void expect_exact_feedback(const TrainerCounts& c, const PhaseResult& sent,
                             const std::string& when) {
    const int ttft = sent.completed_streams();
    const int tpot = sent.tpot_streams();
    const std::string numbers = when + ": completed streams " + std::to_string(ttft) +
                                " (>= 2 tokens: " + std::to_string(tpot) + "), non-streaming " +
                                std::to_string(sent.non_streaming_ok) + "; " + c.text();
    EXPECT_EQ(c.ingested_ttft, ttft)
        << "one TTFT sample per completed stream, none for non-streaming requests; " << numbers;
    EXPECT_EQ(c.ingested_tpot, tpot) << "one TPOT sample per completed stream; " << numbers;
    EXPECT_EQ(c.stored_ttft, ttft) << "/data/status TTFT samples; " << numbers;
    EXPECT_EQ(c.stored_tpot, tpot) << "/data/status TPOT samples; " << numbers;
  }

  std::unique_ptr<Stack> stack_;
  std::vector<std::string> systems_;
};

TEST_F(FeedbackStack, MixedTrafficGivesOneSamplePerStreamAndAccurateLiveTtft) {
  const auto started = std::chrono::steady_clock::now();
  constexpr int kThreads = 4;

  // Phase 1: cold start (the constant default model), feedback trains the first real model.
  PhaseResult p1 = run_phase(120, kThreads, "a");
  ASSERT_EQ(p1.failed, 0) << p1.summary();
  ASSERT_GT(p1.tpot_streams(), 60) << p1.summary();
  EXPECT_EQ(p1.streams_usage_done, 40) << p1.summary();
  EXPECT_EQ(p1.streams_no_usage_done, 40) << p1.summary();
  TrainerCounts c1 = wait_for_feedback(p1.completed_streams(), p1.tpot_streams());
  expect_exact_feedback(c1, p1, "after phase 1");

  // At least one TTFT fit on this feedback, served by both predictors.
  int64_t ttft_version = -1;
  for (int i = 0; i < 600 && ttft_version < 0; ++i) {  // hang guard: 60 s
    TrainerCounts c = trainer_counts();
    if (c.fits_ttft >= 1 && c.retrained) {
      ttft_version = stack_->trainer->get_json("/model/ttft/info")["version"].get<int64_t>();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_GE(ttft_version, 0) << "hang guard (60 s): no TTFT model was trained; "
                             << trainer_counts().text();
  for (uint16_t port : stack_->predictor_ports) {
    http::HttpClient p("127.0.0.1", port);
    int64_t served = -1;
    for (int i = 0; i < 600 && served < ttft_version; ++i) {  // hang guard: 60 s
      Json s = Json::parse(p.get("/status").body, nullptr, false);
      if (!s.is_discarded() && s.contains("model_versions") &&
          s["model_versions"].contains("ttft")) {
        served = s["model_versions"]["ttft"].get<int64_t>();
      }
      if (served < ttft_version) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    ASSERT_GE(served, ttft_version) << "hang guard (60 s): predictor on port " << port
                                    << " does not serve the trained TTFT model";
  }
  const TrainerCounts before = trainer_counts();

  // Phase 2: the same mix, predicted by trained models (retrained every 0.5 s as it goes).
  PhaseResult p2 = run_phase(240, kThreads, "b");
  ASSERT_EQ(p2.failed, 0) << p2.summary();
  EXPECT_EQ(p2.streams_usage_done, 80) << p2.summary();
  EXPECT_EQ(p2.streams_no_usage_done, 80) << p2.summary();
  PhaseResult both = p1;
  both.merge(p2);
  TrainerCounts c2 = wait_for_feedback(both.completed_streams(), both.tpot_streams());
  expect_exact_feedback(c2, both, "after phase 2");

  // Live TTFT error on phase 2. gauge = w * before + (1 - w) * phase2, w = 0.98^n.
  const double n = c2.ingested_ttft - before.ingested_ttft;
  const double w = std::pow(0.98, n);
  const double phase2_live = (c2.live_ttft - w * before.live_ttft) / (1 - w);
  const double phase2_live_tpot =
      (c2.live_tpot - std::pow(0.98, c2.ingested_tpot - before.ingested_tpot) * before.live_tpot) /
      (1 - std::pow(0.98, c2.ingested_tpot - before.ingested_tpot));
  const std::string em = stack_->metrics();
  const std::string tm = stack_->trainer->get("/metrics").body;
  const Json info = stack_->trainer->get_json("/model/download/info");
  const double predicted_obs =
      metric_value(em, "inference_objective_request_predicted_ttft_seconds_count");
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::ostringstream report;
  report << "phase 1: " << p1.summary() << "\nphase 2: " << p2.summary()
         << "\nafter phase 1: " << c1.text() << "\nbefore phase 2 (TTFT model v" << ttft_version
         << "): " << before.text() << "\nafter phase 2: " << c2.text() << "\nlive TTFT APE: gauge "
         << c2.live_ttft << " %, phase 2 alone " << phase2_live << " % over " << n
         << " samples (gauge before phase 2 " << before.live_ttft << " %); live TPOT APE: gauge "
         << c2.live_tpot << " %, phase 2 alone " << phase2_live_tpot << " %"
         << "\ntrainer objective " << info.value("objective_type", "?") << " (quantile "
         << info.value("quantile", 0.0) << "); TTFT hold-out MAPE "
         << metric_value(tm, "llmd_trainer_holdout_mape_percent", {"target=\"ttft\""})
         << " %, coverage "
         << metric_value(tm, "llmd_trainer_holdout_coverage_percent", {"target=\"ttft\""}) << " %"
         << "\nEPP: requests with a TTFT prediction " << predicted_obs << ", TTFT observations "
         << metric_value(em, "inference_objective_request_ttft_seconds_count") << "\nrun time "
         << elapsed << " s";
  std::cout << report.str() << std::endl;
  RecordProperty("live_ttft_ape_percent", std::to_string(c2.live_ttft));
  RecordProperty("phase2_live_ttft_ape_percent", std::to_string(phase2_live));

  EXPECT_GT(n, 100) << report.str();
  EXPECT_GE(predicted_obs, both.completed_streams())
      << "every stream should carry a TTFT prediction; " << report.str();
  EXPECT_LE(c2.live_ttft, 30.0) << "live TTFT error (gauge); " << report.str();
  EXPECT_LE(phase2_live, 30.0) << "live TTFT error on phase 2; " << report.str();
  EXPECT_EQ(stack_->epp->log().find("training feedback flush failed"), std::string::npos)
      << "the EPP dropped feedback";
}

// Issue 30: a trainer that stalls (SIGSTOP) under streaming traffic through the EPP. Feedback
// posts time out (the EPP's send timeout is 5 s) and are retried with the same batch_id; when
// the trainer resumes it reads the timed-out posts and the retries, and must ingest each batch
// once. Samples ingested <= 1.01 x samples the EPP produced (it was +56 % before batch ids),
// and once traffic stops and the queue drains, the EPP's counters add up:
// produced = acknowledged + dropped + queued (queued = 0).
// The trainer stays stopped at least LLMD_E2E_SIGSTOP_SECONDS (default 7; the manual
// run uses 20) and until the EPP has retried a batch, so the duplicate path is exercised
// whatever the timing. No timed assertions: every wait is a bounded poll.
// Measured (2 cores): 7 s stop 1,718 produced / 1,718 ingested, 1 duplicate batch; 20 s stop
// 4,452 / 4,452, 3 duplicates; with the trainer ignoring batch_id this test fails at 1.12x.
struct TrainerStopped {  // RAII: nothing is left stopped, whatever the test does
  explicit TrainerStopped(pid_t pid) : pid(pid) { ::kill(pid, SIGSTOP); }
  ~TrainerStopped() { resume(); }
  void resume() {
    if (pid > 0) {
      ::kill(pid, SIGCONT);
      pid = -1;
    }
  }
  pid_t pid;
};

struct EppFeedbackCounts {
  double produced = 0, sent = 0, acknowledged = 0, retried = 0, dropped = 0, queued = 0;
  static EppFeedbackCounts read(const std::string& m) {
    EppFeedbackCounts c;
    c.produced = metric_value(m, "llmd_epp_feedback_samples_produced_total");
    c.sent = metric_value(m, "llmd_epp_feedback_samples_sent_total");
    c.acknowledged = metric_value(m, "llmd_epp_feedback_samples_acknowledged_total");
    c.retried = metric_value(m, "llmd_epp_feedback_samples_retried_total");
    c.dropped = metric_value(m, "llmd_epp_feedback_samples_dropped_total");
    c.queued = metric_value(m, "llmd_epp_feedback_queue_depth");
    return c;
  }
  std::string text() const {
    std::ostringstream s;
    s << "EPP: produced " << produced << ", sent " << sent << ", acknowledged " << acknowledged
      << ", retried " << retried << ", dropped " << dropped << ", queued " << queued;
    return s.str();
  }
};

TEST(FeedbackExactlyOnce, StalledTrainerIngestsEachBatchOnceAndEppCountersAddUp) {
  const char* env = std::getenv("LLMD_E2E_SIGSTOP_SECONDS");
  const int stop_seconds = env != nullptr ? std::max(1, std::atoi(env)) : 7;
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  o.trainer_args = {"--retraining-interval", "3600"};  // ingest only: the test is about counts
  Stack stack(o);
  ASSERT_TRUE(stack.ready) << stack.logs();

  // Streaming traffic from 4 client threads until `stop_traffic`.
  std::atomic<bool> stop_traffic{false};
  std::atomic<int> completed{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      http::HttpClient c("127.0.0.1", stack.epp_port, std::chrono::seconds(30));
      for (int i = 0; !stop_traffic; ++i) {
        Json body = {{"model", stack.model},
                     {"prompt", words(20 + (i * 37 + t * 11) % 300, "s" + std::to_string(t))},
                     {"max_tokens", 4 + i % 6},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
        auto r = c.request("POST", "/v1/completions", body.dump(), "application/json");
        (r.status == 200 && scan_sse(r.body).done ? completed : failed) += 1;
      }
    });
  }
  auto join_clients = [&] {
    stop_traffic = true;
    for (auto& c : clients) {
      if (c.joinable()) {
        c.join();
      }
    }
  };
  struct Joiner {  // the client threads end before the stack, whatever happens
    std::function<void()> f;
    ~Joiner() { f(); }
  } joiner{join_clients};

  auto epp = [&] { return EppFeedbackCounts::read(stack.metrics()); };
  auto ingested = [&] {
    const std::string m = stack.trainer->get("/metrics").body;
    return metric_value(m, "llmd_trainer_samples_ingested_total");
  };
  // Traffic flows and reaches the trainer before the stall.
  for (int i = 0; i < 300 && epp().acknowledged < 20; ++i) {  // <= 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(epp().acknowledged, 20) << epp().text() << "\n" << stack.logs();

  const auto stopped_at = std::chrono::steady_clock::now();
  double stopped_for = 0;
  {
    TrainerStopped stopped(stack.trainer->process->pid());
    std::this_thread::sleep_for(std::chrono::seconds(stop_seconds));
    for (int i = 0; i < 600 && epp().retried == 0; ++i) {  // <= 60 s more
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    stopped_for =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
    ASSERT_GT(epp().retried, 0) << "no feedback batch was retried while the trainer was stopped; "
                                << epp().text();
  }  // SIGCONT
  // A little more traffic on the resumed trainer, then none.
  const double acked_at_resume = epp().acknowledged;
  for (int i = 0; i < 300 && epp().acknowledged <= acked_at_resume; ++i) {  // <= 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  join_clients();

  // The queue drains: every sample is acknowledged or dropped.
  EppFeedbackCounts c;
  for (int i = 0; i < 600; ++i) {  // <= 60 s
    c = epp();
    if (c.queued == 0 && c.produced == c.acknowledged + c.dropped) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The trainer has finished with whatever reached it (acknowledged samples are ingested).
  double in = ingested();
  for (int i = 0; i < 300 && in < c.acknowledged; ++i) {  // <= 30 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    in = ingested();
  }
  const std::string tm = stack.trainer->get("/metrics").body;
  const double duplicates =
      metric_value(tm, "llmd_trainer_ingest_batches_total", {"result=\"duplicate\""});
  std::ostringstream report;
  report << "trainer stopped " << stopped_for << " s (at least " << stop_seconds
         << " s and until a retry); streams completed " << completed << ", failed " << failed
         << "\n"
         << c.text() << "\ntrainer: ingested " << in << " samples, duplicate batches " << duplicates
         << "; ingested / produced = " << (c.produced > 0 ? in / c.produced : 0);
  std::cout << report.str() << std::endl;
  RecordProperty("ingested_over_produced", std::to_string(c.produced > 0 ? in / c.produced : 0));

  EXPECT_GT(c.produced, 0) << report.str();
  EXPECT_EQ(c.queued, 0) << "the feedback queue drains; " << report.str();
  EXPECT_EQ(c.produced, c.acknowledged + c.dropped + c.queued)
      << "produced = acknowledged + dropped + queued; " << report.str();
  EXPECT_LE(in, 1.01 * c.produced) << "samples ingested <= 1.01 x produced; " << report.str();
  EXPECT_GE(in, c.acknowledged) << "every acknowledged sample was ingested; " << report.str();
}

}  // namespace
}  // namespace llmd::testing
