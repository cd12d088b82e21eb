#pragma once
// bench/epp_overhead's fake pods: in-process vLLM stand-ins that answer /metrics and a one-token
// completion at once and note when each request arrived, so the only time measured is the
// EPP's. A request is known by the id at the start of its prompt ("req-..."), which the EPP
// forwards in the body whatever else it rewrites.
#include <pthread.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/http/server.h"

namespace llmd::bench {

// Fake pod threads (and the server threads they start, which inherit the name) are named so
// that their CPU can be told apart from the load generator's in this process.
inline constexpr char kPodThreadName[] = "fakepod";

class Arrivals {
 public:
  using Clock = std::chrono::steady_clock;
  void record(std::string id) {
    const auto now = Clock::now();
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
  void clear() {  // between steps: ids of failed requests are never taken
    std::lock_guard lock(mu_);
    at_.clear();
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
        if (auto at = r.body.find("req-"); at != std::string::npos) {
          arrivals.record(r.body.substr(at, r.body.find(' ', at) - at));
        }
        return http::Response::text(200, completion, "application/json");
      });
      server->start();
      ports_.push_back(server->port());
      threads_.emplace_back([s = server.get()] {
        pthread_setname_np(pthread_self(), kPodThreadName);
        s->run(false);
      });
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

}  // namespace llmd::bench
