#pragma once
// Scrapes every pod's /metrics on an interval (default 50 ms) and updates the PodRegistry.
// `threads` scraper threads split the pods between them; each owns one keep-alive client per
// pod, so a slow pod delays only its own thread's round. A failed or unparsable scrape marks
// the pod not ready at once.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "epp/datastore/pod_registry.h"

namespace llmd::epp {

struct ScraperOptions {
  std::chrono::milliseconds interval{50};
  std::chrono::milliseconds timeout{1000};
  int threads = 2;
};

class Scraper {
 public:
  Scraper(ScraperOptions options, PodRegistry& registry);
  ~Scraper();
  void start();
  void stop();
  uint64_t rounds() const { return rounds_.load(); }

 private:
  void loop(int index);
  ScraperOptions options_;
  PodRegistry& registry_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::atomic<uint64_t> rounds_{0};
};

}  // namespace llmd::epp
