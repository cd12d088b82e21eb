// The Gateway API Inference Extension's (GIE v1.5.0) metric families on our EPP's /metrics:
// the real stack (modelsim pods, trainer, a predictor, the EPP with its router queue and a
// model-rewriting routing rule) serves a few real requests through the proxy, then
//  - every GIE family we export is there with GIE's type and label names, and moved;
//  - every EPP metric name GIE's stock dashboard queries, and every name GIE's latency guide
//    lists, is exported (the committed lists under tests/fixtures/upstream/gie-v1.5.0/).
// docs/coming-from-upstream.md is the table these checks follow.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(LLMD_SOURCE_DIR) / "tests/fixtures/upstream/gie-v1.5.0";

// ---------------------------------------------------------------------------------------------
// The exposition, parsed: families with their type, samples with their labels.

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // # TYPE name type
  std::vector<Sample> samples;

  // Samples of `name` whose labels include every pair of `with`.
  std::vector<const Sample*> find(const std::string& name,
                                  const std::map<std::string, std::string>& with = {}) const {
    std::vector<const Sample*> out;
    for (const auto& s : samples) {
      bool match = s.name == name;
      for (const auto& [k, v] : with) {
        auto it = s.labels.find(k);
        match = match && it != s.labels.end() && it->second == v;
      }
      if (match) {
        out.push_back(&s);
      }
    }
    return out;
  }
  double sum(const std::string& name, const std::map<std::string, std::string>& with = {}) const {
    double total = 0;
    for (const Sample* s : find(name, with)) {
      total += s->value;
    }
    return total;
  }
  // Whether a dashboard's or guide's name selects a series: a sample's name, or a histogram's
  // _bucket/_sum/_count of a histogram family.
  bool exports(const std::string& name) const {
    if (!find(name).empty()) {
      return true;
    }
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (name.ends_with(suffix)) {
        const std::string base = name.substr(0, name.size() - std::string_view(suffix).size());
        auto it = types.find(base);
        if (it != types.end() && it->second == "histogram" && !find(name).empty()) {
          return true;
        }
      }
    }
    auto it = types.find(name);  // a histogram named by its base (the guide does)
    return it != types.end() && it->second == "histogram" && !find(name + "_count").empty();
  }
};

// `k="v",k2="v2"` (values escape \" and \\).
std::map<std::string, std::string> parse_labels(std::string_view s) {
  std::map<std::string, std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const auto eq = s.find('=', i);
    if (eq == std::string_view::npos) {
      break;
    }
    std::string key(s.substr(i, eq - i));
    std::string value;
    std::size_t j = eq + 2;  // past ="
    for (; j < s.size() && s[j] != '"'; ++j) {
      if (s[j] == '\\' && j + 1 < s.size()) {
        ++j;
      }
      value += s[j];
    }
    out[key] = value;
    i = j + 2;  // past ",
  }
  return out;
}

Exposition parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# TYPE ")) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      e.types[name] = type;
      continue;
    }
    if (line.empty() || line[0] == '#') {
      continue;
    }
    Sample s;
    const auto brace = line.find('{');
    const auto space = line.rfind(' ');
    if (brace != std::string::npos && brace < space) {
      s.name = line.substr(0, brace);
      const auto close = line.rfind('}');
      s.labels = parse_labels(std::string_view(line).substr(brace + 1, close - brace - 1));
    } else {
      s.name = line.substr(0, line.find(' '));
    }
    s.value = std::stod(line.substr(space + 1));
    e.samples.push_back(std::move(s));
  }
  return e;
}

// A committed list: one name per line, '#' comments.
std::vector<std::string> read_list(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())) != 0) {
      line.pop_back();
    }
    if (!line.empty()) {
      out.push_back(line);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The stack, its traffic and the scrape, shared by the tests of this file.

constexpr const char* kAlias = "llama-alias";

// A routing rule that rewrites the client's model name (GIE's InferenceModelRewrite), and the
// router queue (GIE's flow control) holding whatever a pod with one request in flight cannot
// take.
constexpr const char* kConfig = R"(
loadBalancing:
  type: gateway-load-balancing-config
  rules:
  - id: alias-rule
    type: latency-based-routing
    when:
      models: [llama-alias]
    load_balance_targets:
    - target: pool
      override_params: {model: meta-llama/Llama-3.1-8B-Instruct}
routerQueue:
  policy: fcfs
  routerQueueThreshold: {inFlightRequests: 1}
  timeoutMs: 60000
)";

class GieMetrics : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    StackOptions o;
    o.pods = 2;
    o.predictors = 1;
    o.extra_config = kConfig;
    stack_ = new Stack(o);
    if (!stack_->ready) {
      return;
    }
    const std::vector<http::Header> slo = {{"x-slo-ttft-ms", "5000"}, {"x-slo-tpot-ms", "1000"}};
    // Streams with SLOs until the predictor's answers are used (predicted latencies and
    // prediction durations), then plain ones, a stream whose TTFT SLO cannot hold, one for the
    // rewritten model, a burst that waits in the router queue and a body the EPP refuses.
    for (int i = 0; i < 100 && predicted_ < 3; ++i) {
      auto r = stack_->complete(words(12, "gie" + std::to_string(i)), 4, true, slo);
      ok_ += r.status == 200 ? 1 : 0;
      predicted_ =
          metric_sum(stack_->metrics(), "llmd_epp_scheduling_predictions_total{used=\"true\"}");
      if (predicted_ < 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    for (int i = 0; i < 3; ++i) {
      ok_ += stack_->complete(words(12, "plain" + std::to_string(i)), 4).status == 200 ? 1 : 0;
    }
    ok_ += stack_->complete(words(8, "late"), 4, true, {{"x-slo-ttft-ms", "0.001"}}).status == 200
               ? 1
               : 0;
    Json alias = {{"model", kAlias},
                  {"prompt", words(8, "alias")},
                  {"max_tokens", 3},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}}};
    ok_ += stack_->client->post("/v1/completions", alias.dump()).status == 200 ? 1 : 0;
    std::vector<std::thread> burst;
    std::atomic<int> burst_ok{0};
    for (int i = 0; i < 6; ++i) {
      burst.emplace_back([&, i] {
        http::HttpClient c("127.0.0.1", stack_->epp_port, std::chrono::seconds(60));
        Json body = {{"model", stack_->model},
                     {"prompt", words(30, "burst" + std::to_string(i))},
                     {"max_tokens", 16}};
        burst_ok += c.post("/v1/completions", body.dump()).status == 200 ? 1 : 0;
      });
    }
    for (auto& t : burst) {
      t.join();
    }
    ok_ += burst_ok;
    refused_ = stack_->client->post("/v1/completions", "{not json").status;
    // The metrics of an answered request are written when its exchange ends, which may come a
    // moment after the client read the last byte.
    for (int i = 0; i < 200; ++i) {
      scrape_ = stack_->metrics();
      if (metric_sum(scrape_, "inference_objective_running_requests{") == 0 &&
          metric_sum(scrape_, "llmd_epp_requests_total{") >= ok_ + 1) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    e_ = parse(scrape_);
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(stack_ != nullptr && stack_->ready) << (stack_ ? stack_->logs() : "");
  }
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << scrape_.substr(0, 60000);
    }
  }

  static Stack* stack_;
  static double predicted_;
  static int ok_;
  static int refused_;
  static std::string scrape_;
  static Exposition e_;
};

Stack* GieMetrics::stack_ = nullptr;
double GieMetrics::predicted_ = 0;
int GieMetrics::ok_ = 0;
int GieMetrics::refused_ = 0;
std::string GieMetrics::scrape_;
Exposition GieMetrics::e_;

// One GIE v1.5.0 family: name, type and label names (pkg/epp/metrics/metrics.go and
// collectors/inference_pool.go at df9f8909fe06fe2dfd4a6fc0bd0c01a0acabf849).
struct Family {
  std::string name;
  std::string type;
  std::set<std::string> labels;
};

const std::set<std::string> kModel = {"model_name", "target_model_name"};

std::vector<Family> gie_families() {
  auto with = [](std::set<std::string> s, std::initializer_list<std::string> more) {
    s.insert(more);
    return s;
  };
  const std::set<std::string> flow = {"fairness_id", "priority", "inference_pool", "model_name",
                                      "target_model_name"};
  return {
      {"inference_objective_request_total", "counter", with(kModel, {"priority"})},
      {"inference_objective_request_error_total", "counter", with(kModel, {"error_code"})},
      {"inference_objective_inference_request_metric", "gauge", with(kModel, {"type"})},
      {"inference_objective_request_ttft_seconds", "histogram", kModel},
      {"inference_objective_request_predicted_ttft_seconds", "histogram", kModel},
      {"inference_objective_request_ttft_prediction_duration_seconds", "histogram", kModel},
      {"inference_objective_request_tpot_seconds", "histogram", kModel},
      {"inference_objective_request_predicted_tpot_seconds", "histogram", kModel},
      {"inference_objective_request_tpot_prediction_duration_seconds", "histogram", kModel},
      {"inference_objective_request_slo_violation_total", "counter", with(kModel, {"type"})},
      {"inference_objective_request_duration_seconds", "histogram", kModel},
      {"inference_objective_request_sizes", "histogram", kModel},
      {"inference_objective_response_sizes", "histogram", kModel},
      {"inference_objective_input_tokens", "histogram", kModel},
      {"inference_objective_output_tokens", "histogram", kModel},
      {"inference_objective_prompt_cached_tokens", "histogram", kModel},
      {"inference_objective_running_requests", "gauge", {"model_name"}},
      {"inference_objective_normalized_time_per_output_token_seconds", "histogram", kModel},
      {"inference_pool_average_kv_cache_utilization", "gauge", {"name"}},
      {"inference_pool_average_queue_size", "gauge", {"name"}},
      {"inference_pool_average_running_requests", "gauge", {"name"}},
      {"inference_pool_ready_pods", "gauge", {"name"}},
      {"inference_pool_per_pod_queue_size", "gauge", {"name", "model_server_pod"}},
      {"inference_extension_scheduler_e2e_duration_seconds", "histogram", {}},
      {"inference_extension_scheduler_attempts_total",
       "counter",
       {"status", "target_model_name", "pod_name", "namespace", "port"}},
      {"inference_extension_plugin_duration_seconds",
       "histogram",
       {"extension_point", "plugin_type", "plugin_name"}},
      {"inference_extension_prefix_indexer_size", "gauge", {}},
      {"inference_extension_prefix_indexer_hit_ratio", "histogram", {}},
      {"inference_extension_prefix_indexer_hit_bytes", "histogram", {}},
      {"inference_extension_info", "gauge", {"commit", "build_ref"}},
      {"inference_extension_flow_control_request_queue_duration_seconds", "histogram",
       with(flow, {"outcome"})},
      {"inference_extension_flow_control_dispatch_cycle_duration_seconds", "histogram", {}},
      {"inference_extension_flow_control_request_enqueue_duration_seconds",
       "histogram",
       {"fairness_id", "priority", "outcome"}},
      {"inference_extension_flow_control_queue_size", "gauge", flow},
      {"inference_extension_flow_control_queue_bytes", "gauge", flow},
      {"inference_extension_flow_control_pool_saturation", "gauge", {"inference_pool"}},
      {"inference_extension_model_rewrite_decisions_total",
       "counter",
       {"model_rewrite_name", "model_name", "target_model"}},
  };
}

TEST_F(GieMetrics, EveryFamilyHasGiesTypeAndLabelNames) {
  EXPECT_GE(predicted_, 3) << "the predictor's answers were never used";
  for (const auto& f : gie_families()) {
    SCOPED_TRACE(f.name);
    auto type = e_.types.find(f.name);
    ASSERT_NE(type, e_.types.end()) << "not exported";
    EXPECT_EQ(type->second, f.type);
    const std::string sample = f.type == "histogram" ? f.name + "_count" : f.name;
    const auto samples = e_.find(sample);
    ASSERT_FALSE(samples.empty()) << "no series";
    for (const Sample* s : samples) {
      std::set<std::string> names;
      for (const auto& [k, v] : s->labels) {
        names.insert(k);
      }
      EXPECT_EQ(names, f.labels);
    }
  }
}

TEST_F(GieMetrics, RequestFamiliesCountTheRequestsServed) {
  const std::string& m = stack_->model;
  // Each answered request was dispatched once (no pod failed), and counted then.
  EXPECT_EQ(e_.sum("inference_objective_request_total"), ok_);
  EXPECT_EQ(e_.sum("inference_objective_request_total", {{"priority", "0"}}), ok_);
  EXPECT_EQ(e_.sum("inference_objective_request_sizes_count"), ok_);
  EXPECT_GT(e_.sum("inference_objective_request_sizes_sum"), 100.0 * ok_);
  EXPECT_EQ(e_.sum("inference_objective_response_sizes_count"), ok_);
  EXPECT_EQ(e_.sum("inference_objective_input_tokens_count"), ok_);
  EXPECT_EQ(e_.sum("inference_objective_output_tokens_count"), ok_);
  EXPECT_EQ(e_.sum("inference_objective_normalized_time_per_output_token_seconds_count"), ok_);
  EXPECT_GT(e_.sum("inference_objective_output_tokens_sum"), 2.0 * ok_);
  EXPECT_EQ(e_.sum("inference_objective_request_duration_seconds_count"), ok_);
  // The refused body: GIE's code for a 400, under the "other" model (no model was read).
  EXPECT_EQ(refused_, 400);
  EXPECT_EQ(e_.sum("inference_objective_request_error_total", {{"error_code", "BadRequest"}}), 1);
  EXPECT_EQ(e_.sum("inference_objective_request_error_total"), 1);
  // Nothing runs any more; the served model had its own series.
  EXPECT_EQ(e_.find("inference_objective_running_requests", {{"model_name", m}}).size(), 1u);
  EXPECT_EQ(e_.sum("inference_objective_running_requests"), 0);
  // The rewritten request: its rule, the client's name and the model the pod served.
  EXPECT_EQ(e_.sum("inference_extension_model_rewrite_decisions_total",
                   {{"model_rewrite_name", "alias-rule"}, {"target_model", m}}),
            1);
  EXPECT_EQ(e_.sum("inference_objective_request_total", {{"target_model_name", m}}), ok_);
}

TEST_F(GieMetrics, LatencyFamiliesMovedWithPredictions) {
  const std::map<std::string, std::string> model = {{"model_name", stack_->model},
                                                    {"target_model_name", stack_->model}};
  EXPECT_GT(e_.sum("inference_objective_request_ttft_seconds_count", model), 0);
  EXPECT_GT(e_.sum("inference_objective_request_tpot_seconds_count", model), 0);
  EXPECT_GE(e_.sum("inference_objective_request_predicted_ttft_seconds_count", model), 3);
  EXPECT_GE(e_.sum("inference_objective_request_ttft_prediction_duration_seconds_count", model), 3);
  EXPECT_GE(e_.sum("inference_objective_request_tpot_prediction_duration_seconds_count", model), 3);
  EXPECT_GT(e_.sum("inference_objective_request_ttft_prediction_duration_seconds_sum", model), 0);
  // The consolidated gauge mirrors the *_gauge series.
  for (const char* type : {"ttft", "predicted_ttft", "ttft_prediction_duration", "tpot",
                           "predicted_tpot", "tpot_prediction_duration"}) {
    auto typed = model;
    typed["type"] = type;
    EXPECT_GT(e_.sum("inference_objective_inference_request_metric", typed), 0) << type;
  }
  EXPECT_EQ(e_.sum("inference_objective_inference_request_metric",
                   {{"model_name", stack_->model}, {"type", "ttft"}}),
            e_.sum("inference_objective_request_ttft_seconds_gauge", model));
  // The stream whose TTFT SLO could not hold.
  EXPECT_GE(e_.sum("inference_objective_request_slo_violation_total", {{"type", "ttft"}}), 1);
  EXPECT_EQ(e_.sum("inference_objective_request_slo_violation_total", {{"type", "ttft"}}),
            e_.sum("inference_objective_request_ttft_slo_violation_total"));
}

TEST_F(GieMetrics, PoolSchedulerAndFlowControlFamiliesMoved) {
  const std::map<std::string, std::string> pool = {{"name", "default"}};
  EXPECT_EQ(e_.sum("inference_pool_ready_pods", pool), 2);
  EXPECT_EQ(e_.find("inference_pool_per_pod_queue_size", pool).size(), 2u);
  EXPECT_EQ(e_.find("inference_pool_per_pod_queue_size", {{"model_server_pod", "pod-1"}}).size(),
            1u);
  EXPECT_EQ(e_.find("inference_pool_average_kv_cache_utilization", pool).size(), 1u);
  // Every dispatch was one scheduling attempt that picked a pod.
  EXPECT_EQ(e_.sum("inference_extension_scheduler_attempts_total", {{"status", "success"}}), ok_);
  EXPECT_EQ(e_.sum("inference_extension_scheduler_e2e_duration_seconds_count"), ok_);
  for (const Sample* s : e_.find("inference_extension_scheduler_attempts_total")) {
    EXPECT_TRUE(s->labels.at("pod_name") == "pod-0" || s->labels.at("pod_name") == "pod-1");
    EXPECT_EQ(s->labels.at("target_model_name"), stack_->model);
    EXPECT_FALSE(s->labels.at("port").empty());
  }
  EXPECT_EQ(
      e_.sum("inference_extension_plugin_duration_seconds_count", {{"extension_point", "Picker"}}),
      ok_);
  EXPECT_GT(e_.sum("inference_extension_plugin_duration_seconds_count",
                   {{"extension_point", "PrepareData"}}),
            0);
  EXPECT_GT(e_.sum("inference_extension_prefix_indexer_size"), 0);
  // The picked pod's match of every dispatch; the ratio of those with a full prompt block.
  EXPECT_EQ(e_.sum("inference_extension_prefix_indexer_hit_bytes_count"), ok_);
  EXPECT_GT(e_.sum("inference_extension_prefix_indexer_hit_ratio_count"), 0);
  EXPECT_EQ(e_.find("inference_extension_info").size(), 1u);
  EXPECT_EQ(e_.sum("inference_extension_info"), 1);
  EXPECT_FALSE(e_.find("inference_extension_info")[0]->labels.at("commit").empty());
  // Every request went through the router queue; the burst waited in it.
  EXPECT_EQ(e_.sum("inference_extension_flow_control_request_queue_duration_seconds_count",
                   {{"outcome", "Dispatched"}, {"fairness_id", "default-flow"}}),
            ok_);
  EXPECT_GT(e_.sum("inference_extension_flow_control_request_enqueue_duration_seconds_count",
                   {{"outcome", "NotYetFinalized"}}),
            0)
      << "the burst never waited";
  EXPECT_GT(e_.sum("inference_extension_flow_control_dispatch_cycle_duration_seconds_count"), 0);
  EXPECT_EQ(e_.sum("inference_extension_flow_control_queue_size"), 0);
  EXPECT_EQ(e_.sum("inference_extension_flow_control_queue_bytes"), 0);
  EXPECT_EQ(
      e_.find("inference_extension_flow_control_pool_saturation", {{"inference_pool", "default"}})
          .size(),
      1u);
}

TEST_F(GieMetrics, EveryNameTheStockDashboardQueriesIsExported) {
  const auto names = read_list(kFixtures / "dashboard-epp-metrics.txt");
  EXPECT_EQ(names.size(), 18u);
  for (const auto& n : names) {
    EXPECT_TRUE(e_.exports(n)) << n;
  }
}

TEST_F(GieMetrics, EveryNameTheLatencyGuidesListIsExported) {
  const auto names = read_list(kFixtures / "latency-guide-metrics.txt");
  EXPECT_EQ(names.size(), 18u);
  for (const auto& n : names) {
    EXPECT_TRUE(e_.exports(n)) << n;
  }
}

}  // namespace
}  // namespace llmd::testing
