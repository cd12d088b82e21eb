#pragma once
// Scrapes every pod's /metrics on an interval (default 50 ms) and updates the PodRegistry.
// Scrapes are asynchronous (one AsyncHttpClient, a keep-alive connection per pod): each round
// asks every pod that has no scrape in flight, so a pod that hangs delays only its own metrics
// (they go stale after the registry's staleness bound) and never another pod's. A failed or
// unparsable scrape marks the pod not ready at once.
//
// Threads: one ticker thread starts the rounds (it never waits on I/O); answers are parsed on
// the client's I/O thread. The registry is thread-safe.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "epp/datastore/pod_registry.h"

namespace llmd::http {
class AsyncHttpClient;
struct AsyncResponse;
}  // namespace llmd::http

namespace llmd::epp {

struct ScraperOptions {
  std::chrono::milliseconds interval{50};
  std::chrono::milliseconds timeout{1000};  // a scrape's bound; the pod then counts as failed
};

class Scraper {
 public:
  Scraper(ScraperOptions options, PodRegistry& registry);
  ~Scraper();
  void start();
  void stop();
  uint64_t rounds() const { return rounds_.load(); }

 private:
  struct PodState {
    bool in_flight = false;
    std::optional<bool> last_ok;  // for logging changes only
  };
  void loop();
  void round();
  void answered(const PodConfig& pod, const http::AsyncResponse& r);

  ScraperOptions options_;
  PodRegistry& registry_;
  std::unique_ptr<http::AsyncHttpClient> client_;
  std::thread ticker_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                  // guarded by mu_
  std::map<std::string, PodState> state_;  // by pod name; guarded by mu_
  std::atomic<uint64_t> rounds_{0};
};

}  // namespace llmd::epp
