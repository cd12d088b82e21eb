// The EPP's own added latency: time from a client sending a request to the EPP until the
// picked pod receives it (parse + schedule incl. the coalesced prediction round trip + connect
// + forward), at fixed offered rates, with 10 and 100 pods. Pods are in-process fake endpoints
// that answer instantly (vLLM metrics + a one-token completion), so only EPP time is measured.
// Starts a real trainer (trained on synthetic samples), predictors and the EPP.
//   epp_overhead [--rates 100,500,1000] [--pods 10,100] [--duration 5] [--predictors 2]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench_stats.h"
#include "bench/train_synthetic.h"
#include "common/config/options.h"
#include "common/features/feature_json.h"
#include "common/http/client.h"
#include "common/http/server.h"
#include "common/testing/synthetic_law.h"
#include "common/util/files.h"
#include "common/util/time.h"
#include "tests/support/process.h"

using namespace llmd;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// Threads of a process (the entries of /proc/<pid>/task); 0 when it cannot be read.
int thread_count(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/task", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n;
}

// Arrival times at the pods, by request id.
class Arrivals {
 public:
  void record(std::string id) {
    auto now = Clock::now();
    std::lock_guard lock(mu_);
    at_[std::move(id)] = now;
  }
  std::optional<Clock::time_point> take(const std::string& id) {
    std::lock_guard lock(mu_);
    auto it = at_.find(id);
    if (it == at_.end()) {
      return std::nullopt;
    }
    auto t = it->second;
    at_.erase(it);
    return t;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, Clock::time_point> at_;
};

class FakePods {
 public:
  FakePods(int n, Arrivals& arrivals) {
    const std::string metrics =
        "vllm:num_requests_waiting{model_name=\"m\"} 0\nvllm:num_requests_running{model_name=\"m\"} 1\n"
        "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.1\n"
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"31250\"} 1\n";
    const std::string completion =
        R"({"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":" a","finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}})";
    for (int i = 0; i < n; ++i) {
      http::ServerOptions o;
      o.host = "127.0.0.1";
      o.port = 0;
      o.io_threads = 1;
      auto server = std::make_unique<http::HttpServer>(o, [&arrivals, metrics, completion](http::Request& r) {
        if (r.path == "/metrics") {
          return http::Response::text(200, metrics, "text/plain");
        }
        arrivals.record(std::string(r.header("x-request-id")));
        return http::Response::text(200, completion, "application/json");
      });
      server->start();
      ports_.push_back(server->port());
      threads_.emplace_back([s = server.get()] { s->run(false); });
      servers_.push_back(std::move(server));
    }
  }
  ~FakePods() {
    for (auto& s : servers_) {
      s->stop();
    }
    for (auto& t : threads_) {
      t.join();
    }
  }
  const std::vector<uint16_t>& ports() const { return ports_; }

 private:
  std::vector<std::unique_ptr<http::HttpServer>> servers_;
  std::vector<std::thread> threads_;
  std::vector<uint16_t> ports_;
};

double metric(const std::string& text, const std::string& name) {
  double total = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) == 0 && (line[name.size()] == ' ' || line[name.size()] == '{')) {
      total += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    config::Options o("epp_overhead", "Added latency of the EPP (request in -> upstream)");
    o.add("rates", "", "100,500,1000", "Offered requests/s");
    o.add("pods", "", "10,100", "Pool sizes");
    o.add("duration", "", "5", "Seconds per step");
    o.add("predictors", "", "2", "Predictor replicas");
    o.add("out", "", "bench/results/epp_overhead", "Result file prefix (.md, .json)");
    if (!o.parse(argc, argv)) {
      return 0;
    }
    testing::TempDir dir;
    uint16_t tport = testing::free_port();
    testing::Process trainer(testing::binary("trainer/trainer"),
        {"--host", "127.0.0.1", "--port", std::to_string(tport), "--retraining-interval", "0.5",
         "--ttft-model-path", dir.file("t/ttft.ubj"), "--tpot-model-path", dir.file("t/tpot.ubj"),
         "--ttft-gated-model-path", dir.file("t/ttft_gated.bin"),
         "--tpot-gated-model-path", dir.file("t/tpot_gated.bin"), "--log-level", "warn"});
    if (!trainer.wait_http_ok(tport)) {
      throw std::runtime_error("trainer did not start");
    }
    bench::train_synthetic(tport, 5000, std::chrono::seconds(60));
    std::vector<std::unique_ptr<testing::Process>> predictors;
    std::string urls;
    for (int i = 0; i < o.integer("predictors", 0, 8); ++i) {
      uint16_t p = testing::free_port();
      std::string d = dir.file("p" + std::to_string(i));
      predictors.push_back(std::make_unique<testing::Process>(testing::binary("predictor/predictor"),
          std::vector<std::string>{"--host", "127.0.0.1", "--port", std::to_string(p), "--workers", "1",
                                   "--training-server-url", "http://127.0.0.1:" + std::to_string(tport),
                                   "--log-level", "warn",
                                   "--local-ttft-model-path", d + "/ttft.ubj", "--local-tpot-model-path", d + "/tpot.ubj",
                                   "--local-ttft-gated-model-path", d + "/ttft_gated.bin",
                                   "--local-tpot-gated-model-path", d + "/tpot_gated.bin"}));
      if (!predictors.back()->wait_http_ok(p, "/readyz")) {
        throw std::runtime_error("predictor not ready");
      }
      urls += (urls.empty() ? "" : ",") + std::string("http://127.0.0.1:") + std::to_string(p);
    }
    trainer.terminate();  // its CPU must not disturb the measurement

    Arrivals arrivals;
    std::string md = fmt::format(
        "# EPP added latency (client send -> pod receives the forwarded request)\n\n"
        "{} on {} cores ({}). Fake pods answer instantly; {} predictor replicas with a trained "
        "200-tree model; the EPP asks for a prediction for every candidate pod of every request "
        "through its coalescer (adaptive: a batch leaves at once while none is in flight, else "
        "within 1 ms). The load generator, the EPP, the predictors and the fake "
        "pods share the same 2 cores. {} s per step.\n\n"
        "*EPP threads*: `ls /proc/<epp pid>/task | wc -l`, idle before the step / the most seen "
        "during it (sampled every 20 ms).\n\n"
        "| pods | offered rps | achieved rps | p50 ms | p90 ms | p99 ms | errors | rows/batch | "
        "callers/batch | predictions used | EPP threads |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n",
        util::now_rfc3339(), std::thread::hardware_concurrency(), bench::cpu_model(),
        predictors.size(),
        o.str("duration"));
    Json results = Json::array();
    for (double pods_d : bench::parse_number_list(o.str("pods"))) {
      const int pods = static_cast<int>(pods_d);
      FakePods fake(pods, arrivals);
      std::ofstream pool(dir.file("pool.yaml"));
      pool << "pool:\n  pods:\n";
      for (int i = 0; i < pods; ++i) {
        pool << "  - {name: pod-" << i << ", address: 127.0.0.1:" << fake.ports()[static_cast<std::size_t>(i)] << "}\n";
      }
      pool << "scrapeIntervalMs: 50\nstalenessMs: 2000\npipeline: " << LLMD_SOURCE_DIR
           << "/epp/config/default-pipeline.yaml\n";
      pool.close();
      uint16_t eport = testing::free_port(), hport = testing::free_port(), mport = testing::free_port();
      testing::Process epp(testing::binary("epp/epp"),
          {"--config", dir.file("pool.yaml"), "--host", "127.0.0.1", "--port", std::to_string(eport),
           "--health-port", std::to_string(hport), "--metrics-port", std::to_string(mport),
           "--prediction-server-url", urls, "--log-level", "warn"});
      if (!epp.wait_http_ok(hport, "/readyz")) {
        throw std::runtime_error("epp not ready: " + epp.log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // every pod scraped
      http::HttpClient mc("127.0.0.1", mport);
      for (double rate_d : bench::parse_number_list(o.str("rates"))) {
        const int rate = static_cast<int>(rate_d);
        std::string before = mc.get("/metrics").body;
        const int idle_threads = thread_count(epp.pid());
        std::atomic<int> peak_threads{idle_threads};
        std::atomic<bool> step_done{false};
        std::thread sampler([&] {
          while (!step_done.load()) {
            peak_threads.store(std::max(peak_threads.load(), thread_count(epp.pid())));
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        });
        const double duration = o.number("duration", 0.5, 120);
        const int threads = std::clamp(rate / 100 + 2, 2, 12);
        const auto start = Clock::now() + std::chrono::milliseconds(50);
        const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(duration));
        std::atomic<uint64_t> next{0};
        std::vector<std::vector<double>> lat(static_cast<std::size_t>(threads));
        std::atomic<uint64_t> errors{0};
        std::vector<std::thread> pool_threads;
        for (int t = 0; t < threads; ++t) {
          pool_threads.emplace_back([&, t] {
            http::HttpClient c("127.0.0.1", eport, std::chrono::seconds(5));
            while (true) {
              uint64_t i = next.fetch_add(1);
              auto at = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(static_cast<double>(i) / rate));
              if (at >= end) {
                return;
              }
              std::this_thread::sleep_until(at);
              std::string id = fmt::format("b{}-{}-{}", pods, rate, i);
              Json body = {{"model", "m"}, {"prompt", fmt::format("request {} of a short benchmark prompt", i)},
                           {"max_tokens", 1}};
              auto sent = Clock::now();
              auto r = c.request("POST", "/v1/completions", body.dump(), "application/json",
                                 {{"x-request-id", id}});
              auto arrived = arrivals.take(id);
              if (r.status != 200 || !arrived) {
                ++errors;
                continue;
              }
              lat[static_cast<std::size_t>(t)].push_back(
                  std::chrono::duration<double, std::milli>(*arrived - sent).count());
            }
          });
        }
        for (auto& th : pool_threads) {
          th.join();
        }
        step_done.store(true);
        sampler.join();
        std::string after = mc.get("/metrics").body;
        std::vector<double> all;
        for (auto& v : lat) {
          all.insert(all.end(), v.begin(), v.end());
        }
        auto delta = [&](const std::string& n) { return metric(after, n) - metric(before, n); };
        double batches = delta("llmd_epp_predictor_batch_rows_count");
        double rows = delta("llmd_epp_predictor_batch_rows_sum");
        double callers = delta("llmd_epp_predictor_batch_callers_sum");
        double used = delta("llmd_epp_scheduling_predictions_total");
        double used_true = metric(after, "llmd_epp_scheduling_predictions_total{used=\"true\"}") -
                           metric(before, "llmd_epp_scheduling_predictions_total{used=\"true\"}");
        double p50 = bench::percentile(all, 0.5), p90 = bench::percentile(all, 0.9), p99 = bench::percentile(all, 0.99);
        double achieved = static_cast<double>(all.size()) / duration;
        md += fmt::format(
            "| {} | {} | {:.0f} | {:.3f} | {:.3f} | {:.3f} | {} | {:.0f} | {:.1f} | {:.0f}% | {} / {} |\n",
            pods, rate, achieved, p50, p90, p99, errors.load(), batches > 0 ? rows / batches : 0,
            batches > 0 ? callers / batches : 0, used > 0 ? 100.0 * used_true / used : 0,
            idle_threads, peak_threads.load());
        results.push_back(Json{{"pods", pods}, {"offered_rps", rate}, {"achieved_rps", achieved},
                               {"p50_ms", p50}, {"p90_ms", p90}, {"p99_ms", p99},
                               {"errors", errors.load()},
                               {"rows_per_batch", batches > 0 ? rows / batches : 0},
                               {"callers_per_batch", batches > 0 ? callers / batches : 0},
                               {"epp_threads_idle", idle_threads},
                               {"epp_threads_peak", peak_threads.load()}});
        std::cerr << "pods " << pods << " rate " << rate << " p99 " << p99 << " ms\n";
      }
    }
    std::cout << md << std::endl;
    util::write_file_atomic(o.str("out") + ".md", md);
    util::write_file_atomic(o.str("out") + ".json", results.dump(2));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "epp_overhead: " << e.what() << std::endl;
    return 1;
  }
}
