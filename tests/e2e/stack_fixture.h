#pragma once
// The whole local stack on loopback: modelsim pods, trainer, predictors and the EPP, real
// binaries on free ports, always stopped. Used by the EPP end-to-end tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/trainer_fixture.h"

namespace llmd::testing {

struct StackOptions {
  int pods = 4;
  int predictors = 2;
  std::vector<std::string> modelsim_args;
  std::vector<std::string> epp_args;
  std::string pipeline = "default-pipeline.yaml";  // in epp/config/, or an absolute path
  std::vector<std::string> pod_labels;  // per pod, an inline YAML map such as "{pool: a}"
  std::string extra_config;             // appended to the EPP config (policies)
  // The config file's start-up settings, "section.key" -> YAML value (startup_settings.h).
  // A pod that sends no header within 2 s has failed: tests wait on it, not on 30 s.
  std::map<std::string, std::string> startup = {{"proxy.upstreamFirstByteTimeoutMs", "2000"}};
  std::vector<std::string> trainer_args;  // appended to the trainer's command line
  int epp_max_open_files = 0;             // > 0: the EPP's RLIMIT_NOFILE
  // Set: the EPP and the predictors use this (shared) trainer and the stack starts none
  // (deploy/components/shared-trainer); `trainer` stays null.
  std::string trainer_url;
  // > 0: route to the `pods` modelsim pods another Stack runs from this base port (its
  // pod_port(0)) and start no modelsim; `modelsim` stays null.
  int pool_base_port = 0;
  // Set: the EPP asks these predictors (a comma list) instead of the stack's own.
  std::string prediction_server_url;
  // The EPP predicts in process (models synced from the trainer every 0.5 s) and asks no
  // predictor; the stack still starts `predictors` of them (for comparison).
  bool in_process_predictions = false;
};

class Stack {
 public:
  explicit Stack(StackOptions o = {}) : options_(std::move(o)) {
    if (options_.pool_base_port > 0) {
      base_port_ = options_.pool_base_port;
    }
    for (int attempt = 0; attempt < 3 && options_.pool_base_port <= 0; ++attempt) {
      base_port_ = free_port_block(options_.pods);
      std::vector<std::string> ms = {"--pods",      std::to_string(options_.pods),
                                     "--base-port", std::to_string(base_port_),
                                     "--host",      "127.0.0.1"};
      ms.insert(ms.end(), options_.modelsim_args.begin(), options_.modelsim_args.end());
      modelsim = std::make_unique<Process>(binary("bench/modelsim/modelsim"), ms);
      if (modelsim->wait_http_ok(static_cast<uint16_t>(base_port_), "/health",
                                 std::chrono::seconds(10))) {
        break;  // else another test took a port in between: try another block
      }
    }
    if (options_.trainer_url.empty()) {
      trainer = std::make_unique<TrainerProcess>(dir_.path() + "/trainer", [&] {
        std::vector<std::string> a = {"--retraining-interval", "0.5", "--min-samples-for-retrain",
                                      "20"};
        a.insert(a.end(), options_.trainer_args.begin(), options_.trainer_args.end());
        return a;
      }());
      trainer_url = "http://127.0.0.1:" + std::to_string(trainer->port);
    } else {
      trainer_url = options_.trainer_url;
    }
    for (int i = 0; i < options_.predictors; ++i) {
      uint16_t port = free_port();
      std::string d = dir_.path() + "/p" + std::to_string(i);
      predictors.push_back(std::make_unique<Process>(
          binary("predictor/predictor"),
          std::vector<std::string>{"--host", "127.0.0.1", "--port", std::to_string(port),
                                   "--training-server-url", trainer_url, "--model-sync-interval",
                                   "0.5", "--workers", "1", "--local-ttft-model-path",
                                   d + "/ttft.ubj", "--local-tpot-model-path", d + "/tpot.ubj",
                                   "--local-ttft-gated-model-path", d + "/ttft_gated.bin",
                                   "--local-tpot-gated-model-path", d + "/tpot_gated.bin"}));
      predictor_ports.push_back(port);
    }
    std::string pool = dir_.file("pool.yaml");
    write_pool(options_.pipeline);
    epp_port = free_port();
    health_port = free_port();
    metrics_port = free_port();
    std::string urls = options_.prediction_server_url;
    if (urls.empty()) {
      for (auto p : predictor_ports) {
        urls += (urls.empty() ? "" : ",") + std::string("http://127.0.0.1:") + std::to_string(p);
      }
    }
    if (options_.in_process_predictions) {
      urls.clear();
    }
    std::vector<std::string> args = {"--config",
                                     pool,
                                     "--host",
                                     "127.0.0.1",
                                     "--port",
                                     std::to_string(epp_port),
                                     "--health-port",
                                     std::to_string(health_port),
                                     "--metrics-port",
                                     std::to_string(metrics_port),
                                     "--prediction-server-url",
                                     urls,
                                     "--training-server-url",
                                     trainer_url,
                                     "--log-level",
                                     "debug"};
    if (options_.in_process_predictions) {
      args.insert(args.end(), {"--in-process-predictions", "true", "--model-sync-interval", "0.5"});
    }
    args.insert(args.end(), options_.epp_args.begin(), options_.epp_args.end());
    epp = std::make_unique<Process>(binary("epp/epp"), args, std::vector<std::string>{},
                                    options_.epp_max_open_files);
    ready = (trainer == nullptr || trainer->ready) && epp->wait_http_ok(health_port, "/readyz");
    for (auto p : predictor_ports) {
      ready = ready && predictors[0]->wait_http_ok(p, "/readyz");
    }
    client = std::make_unique<http::HttpClient>("127.0.0.1", epp_port, std::chrono::seconds(30));
    model = "meta-llama/Llama-3.1-8B-Instruct";
  }

  // (Re)writes the EPP's config file; the EPP picks the change up within a second.
  void write_pool(const std::string& pipeline) {
    std::string tmp = dir_.file("pool.yaml.tmp");
    std::ofstream f(tmp);
    f << "pool:\n  pods:\n";
    for (int i = 0; i < options_.pods; ++i) {
      f << "  - {name: pod-" << i << ", address: 127.0.0.1:" << base_port_ + i;
      if (static_cast<std::size_t>(i) < options_.pod_labels.size() &&
          !options_.pod_labels[static_cast<std::size_t>(i)].empty()) {
        f << ", labels: " << options_.pod_labels[static_cast<std::size_t>(i)];
      }
      f << "}\n";
    }
    f << startup_sections();
    f << "scrapeIntervalMs: 50\nstalenessMs: 1000\npipeline: "
      << (pipeline.starts_with("/") ? "" : std::string(LLMD_SOURCE_DIR) + "/epp/config/")
      << pipeline << "\n"
      << with_ports(options_.extra_config);
    f.close();
    std::rename(tmp.c_str(), dir_.file("pool.yaml").c_str());
  }

  // options_.startup as YAML sections: "proxy: {a: 1, b: 2}" lines.
  std::string startup_sections() const {
    std::map<std::string, std::string> sections;
    for (const auto& [path, value] : options_.startup) {
      const auto dot = path.find('.');
      std::string& line = sections[path.substr(0, dot)];
      line += (line.empty() ? "" : ", ") + path.substr(dot + 1) + ": " + value;
    }
    std::string out;
    for (const auto& [section, keys] : sections) {
      out += section + ": {" + keys + "}\n";
    }
    return out;
  }

  // "{pod:N}" -> the port of pod N (for policies that name pods by URL).
  std::string with_ports(std::string text) const {
    for (int i = 0; i < options_.pods; ++i) {
      const std::string key = "{pod:" + std::to_string(i) + "}";
      for (auto at = text.find(key); at != std::string::npos; at = text.find(key)) {
        text.replace(at, key.size(), std::to_string(base_port_ + i));
      }
    }
    return text;
  }

  std::string pod_address(int i) const { return "127.0.0.1:" + std::to_string(base_port_ + i); }
  uint16_t pod_port(int i) const { return static_cast<uint16_t>(base_port_ + i); }

  http::ClientResponse complete(const std::string& prompt, int max_tokens = 8, bool stream = false,
                                std::vector<http::Header> headers = {},
                                Json extra = Json::object()) {
    Json body = {
        {"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", stream}};
    if (stream) {
      body["stream_options"] = {{"include_usage", true}};
    }
    body.update(extra);
    return client->request("POST", "/v1/completions", body.dump(), "application/json", headers);
  }
  std::string metrics() {
    http::HttpClient c("127.0.0.1", metrics_port);
    return c.get("/metrics").body;
  }
  std::string logs() const {
    return "--- epp ---\n" + epp->log() +
           (modelsim ? "\n--- modelsim ---\n" + modelsim->log() : std::string());
  }

  StackOptions options_;
  TempDir dir_;
  int base_port_ = 0;
  std::unique_ptr<Process> modelsim;
  std::unique_ptr<TrainerProcess> trainer;  // null with StackOptions::trainer_url
  std::string trainer_url;                  // what the EPP and the predictors use
  std::vector<std::unique_ptr<Process>> predictors;
  std::vector<uint16_t> predictor_ports;
  std::unique_ptr<Process> epp;
  uint16_t epp_port = 0, health_port = 0, metrics_port = 0;
  std::unique_ptr<http::HttpClient> client;
  std::string model;
  bool ready = false;
};

// A test that starts its own Stack with start(); on failure it prints the stack's logs.
class StackTest : public ::testing::Test {
 protected:
  void start(StackOptions o) {
    stack_ = std::make_unique<Stack>(std::move(o));
    ASSERT_TRUE(stack_->ready) << stack_->logs();
  }
  void TearDown() override {
    if (HasFailure() && stack_) {
      std::string logs = stack_->logs();
      std::cerr << logs.substr(logs.size() > 30000 ? logs.size() - 30000 : 0);
    }
  }
  // Sets a modelsim fault on pod `pod` (modelsim's POST /admin/fault body).
  void fault(int pod, const std::string& body) {
    http::HttpClient c("127.0.0.1", stack_->pod_port(pod));
    ASSERT_EQ(c.post("/admin/fault", body).status, 200);
  }
  std::unique_ptr<Stack> stack_;
};

// Sum of all samples of a Prometheus metric line prefix, e.g. "x_count{".
inline double metric_sum(const std::string& text, const std::string& prefix) {
  double total = 0;
  std::size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    if (pos > 0 && text[pos - 1] != '\n') {
      pos += prefix.size();
      continue;
    }
    auto eol = text.find('\n', pos);
    auto line = text.substr(pos, eol - pos);
    total += std::stod(line.substr(line.rfind(' ') + 1));
    pos = eol;
  }
  return total;
}

// Sum of the samples of `name` whose labels include every `key="value"` in `labels`.
inline double metric_value(const std::string& text, const std::string& name,
                           const std::vector<std::string>& labels = {}) {
  double total = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind(name, 0) != 0 ||
        (line.size() > name.size() && line[name.size()] != '{' && line[name.size()] != ' ')) {
      continue;
    }
    bool match = true;
    for (const auto& l : labels) {
      match = match && line.find(l) != std::string::npos;
    }
    if (match) {
      total += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return total;
}

// Sends each body to the EPP's /v1/completions on its own connection, the next one only once
// the EPP counts the earlier ones in flight (so every scheduling decision sees them), and waits
// for all. Returns each response's status and x-gateway-destination-endpoint.
struct DispatchResult {
  int status = 0;
  std::string destination;
};
inline std::vector<DispatchResult> send_while_earlier_in_flight(
    Stack& stack, const std::vector<Json>& bodies, const std::vector<http::Header>& headers) {
  auto in_flight = [&] { return metric_sum(stack.metrics(), "llmd_epp_pod_in_flight{"); };
  const double base = in_flight();
  std::vector<DispatchResult> out(bodies.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < bodies.size(); ++i) {
    threads.emplace_back([&, i] {
      http::HttpClient c("127.0.0.1", stack.epp_port, std::chrono::seconds(60));
      auto r = c.request("POST", "/v1/completions", bodies[i].dump(), "application/json", headers);
      out[i] = {r.status, std::string(r.header("x-gateway-destination-endpoint"))};
    });
    for (int w = 0; w < 400 && in_flight() < base + static_cast<double>(i) + 1; ++w) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  for (auto& t : threads) {
    t.join();
  }
  return out;
}

// Voluntary context switches of each thread of `pid`, summed by thread name (/proc).
inline std::map<std::string, long> thread_switches(pid_t pid) {
  std::map<std::string, long> by_name;  // name -> voluntary context switches, summed
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream comm(entry.path() / "comm");
    std::string name;
    std::getline(comm, name);
    std::ifstream status(entry.path() / "status");
    long switches = 0;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) {
        switches = std::stol(line.substr(line.find(':') + 1));
      }
    }
    by_name[name] += switches;
  }
  return by_name;
}

// Between two thread_switches() samples of the EPP around `requests` requests with predictions:
// the workers (epp-worker-0/1) woke for them and the predictor client's own I/O thread did not,
// so the prediction calls went out and were answered on the workers. Through the client's own
// thread every batch would wake it at least once; the prober's /readyz checks of an unhealthy
// replica (none in these stacks) are all it may do.
inline void expect_prediction_calls_on_workers(const std::map<std::string, long>& before,
                                               const std::map<std::string, long>& after,
                                               int requests) {
  const long workers = after.at("epp-worker-0") + after.at("epp-worker-1") -
                       before.at("epp-worker-0") - before.at("epp-worker-1");
  const long predict_io = after.at("epp-predict-io") - before.at("epp-predict-io");
  EXPECT_GE(workers, requests) << "the workers sleep between requests";
  EXPECT_LT(predict_io, requests / 4) << "prediction calls went through epp-predict-io";
}

inline std::string words(int n, const std::string& seed) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += seed + std::to_string(i % 97) + " ";
  }
  return out;
}

}  // namespace llmd::testing
