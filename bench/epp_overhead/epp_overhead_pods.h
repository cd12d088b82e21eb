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

#include "common/http/stream_server.h"

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

// Every fake pod is one listener of a single StreamServer, served by `threads` io threads (one
// by default): 100 pods on 100 threads of their own made the benchmark's own wake-ups compete
// with the EPP for the two cores.
class FakePods {
 public:
  FakePods(int n, Arrivals& arrivals, int threads = 1) {
    const std::string metrics =
        "vllm:num_requests_waiting{model_name=\"m\"} "
        "0\nvllm:num_requests_running{model_name=\"m\"} 1\n"
        "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.1\n"
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"31250\"} 1\n";
    const std::string completion =
        R"({"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":" a","finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}})";
    http::StreamServerOptions o;
    o.host = "127.0.0.1";
    o.io_threads = threads;
    o.descriptors_per_connection = 0;
    o.fresh_connections_idle = true;  // the EPP's pools open connections ahead of use
    server_ = std::make_unique<http::StreamServer>(
        o, [&arrivals, metrics, completion](std::size_t, http::Request&& r,
                                            http::ResponseStreamPtr out) {
          if (r.path == "/metrics") {
            out->respond(http::Response::text(200, metrics, "text/plain"));
            return;
          }
          if (auto at = r.body.find("req-"); at != std::string::npos) {
            arrivals.record(r.body.substr(at, r.body.find(' ', at) - at));
          }
          out->respond(http::Response::text(200, completion, "application/json"));
        });
    for (int i = 0; i < n; ++i) {
      ports_.push_back(server_->port(server_->listen(0)));
    }
    thread_ = std::thread([s = server_.get()] {
      pthread_setname_np(pthread_self(), kPodThreadName);  // its io threads inherit the name
      s->run(false);
    });
  }
  ~FakePods() {
    server_->stop(std::chrono::milliseconds(0));
    thread_.join();
  }
  const std::vector<uint16_t>& ports() const { return ports_; }

 private:
  std::unique_ptr<http::StreamServer> server_;
  std::thread thread_;
  std::vector<uint16_t> ports_;
};

}  // namespace llmd::bench
