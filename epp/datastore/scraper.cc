#include "epp/datastore/scraper.h"

#include <map>
#include <memory>

#include <spdlog/spdlog.h>

#include "common/http/client.h"
#include "epp/datastore/metrics_parser.h"

namespace llmd::epp {

Scraper::Scraper(ScraperOptions options, PodRegistry& registry)
    : options_(options), registry_(registry) {}

Scraper::~Scraper() { stop(); }

void Scraper::start() {
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    threads_.emplace_back([this, i] { loop(i); });
  }
}

void Scraper::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) {
      t.join();
    }
  }
  threads_.clear();
}

void Scraper::loop(int index) {
  std::map<std::string, std::unique_ptr<http::HttpClient>> clients;  // by address
  std::map<std::string, bool> last_ok;
  const int n_threads = std::max(1, options_.threads);
  auto next = std::chrono::steady_clock::now();
  while (true) {
    auto pods = registry_.pods();
    for (std::size_t i = 0; i < pods.size(); ++i) {
      if (static_cast<int>(i % static_cast<std::size_t>(n_threads)) != index) {
        continue;
      }
      const PodConfig& pod = pods[i];
      auto& client = clients[pod.address];
      if (!client) {
        auto colon = pod.address.rfind(':');
        uint16_t port = static_cast<uint16_t>(std::stoi(pod.address.substr(colon + 1)));
        client = std::make_unique<http::HttpClient>(pod.address.substr(0, colon), port,
                                                    options_.timeout);
      }
      auto r = client->get("/metrics");
      std::optional<PodMetrics> m;
      if (r.status == 200) {
        m = parse_vllm_metrics(r.body);
      }
      bool ok = m.has_value();
      if (ok) {
        m->scraped_at = std::chrono::steady_clock::now();
        registry_.update_metrics(pod.name, *m);
      } else {
        registry_.mark_scrape_failed(pod.name);
      }
      auto prev = last_ok.find(pod.name);
      if (prev == last_ok.end() || prev->second != ok) {
        if (ok) {
          spdlog::info("pod {} ({}) is ready", pod.name, pod.address);
        } else {
          spdlog::warn("pod {} ({}) scrape failed: {}", pod.name, pod.address,
                       r.status == 0 ? r.error : "status " + std::to_string(r.status));
        }
        last_ok[pod.name] = ok;
      }
    }
    ++rounds_;
    next += options_.interval;
    auto now = std::chrono::steady_clock::now();
    if (next < now) {
      next = now;
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_until(lock, next, [this] { return stopping_; })) {
      return;
    }
  }
}

}  // namespace llmd::epp
