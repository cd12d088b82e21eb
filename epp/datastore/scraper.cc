#include "epp/datastore/scraper.h"

#include <spdlog/spdlog.h>

#include "common/http/async_client.h"
#include "epp/datastore/metrics_parser.h"

namespace llmd::epp {

Scraper::Scraper(ScraperOptions options, PodRegistry& registry)
    : options_(options), registry_(registry) {}

Scraper::~Scraper() { stop(); }

void Scraper::start() {
  client_ = std::make_unique<http::AsyncHttpClient>(std::vector<http::Url>{});
  ticker_ = std::thread([this] { loop(); });
}

void Scraper::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) {
    ticker_.join();
  }
  client_.reset();  // ends the scrapes in flight; their callbacks run before it returns
}

void Scraper::loop() {
  auto next = std::chrono::steady_clock::now();
  while (true) {
    round();
    ++rounds_;
    next += options_.interval;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) {
      next = now;
    }
    std::unique_lock lock(mu_);
    if (cv_.wait_until(lock, next, [this] { return stopping_; })) {
      return;
    }
  }
}

void Scraper::round() {
  const auto pods = registry_.pods();
  std::vector<PodConfig> due;
  {
    std::lock_guard lock(mu_);
    std::map<std::string, PodState> next;  // pods that left the pool are forgotten
    for (const auto& pod : pods) {
      PodState& s = next[pod.name];
      if (auto it = state_.find(pod.name); it != state_.end()) {
        s = it->second;
      }
      if (!s.in_flight) {
        s.in_flight = true;
        due.push_back(pod);
      }
    }
    state_ = std::move(next);
  }
  for (const auto& pod : due) {
    const auto colon = pod.address.rfind(':');
    http::Url url;
    url.host = pod.address.substr(0, colon);
    url.port = colon == std::string::npos
                   ? 80
                   : static_cast<uint16_t>(std::stoi(pod.address.substr(colon + 1)));
    client_->request(url, "GET", "/metrics", {}, options_.timeout,
                     [this, pod](http::AsyncResponse r) { answered(pod, r); });
  }
}

void Scraper::answered(const PodConfig& pod, const http::AsyncResponse& r) {
  std::optional<PodMetrics> m;
  if (r.status == 200) {
    m = parse_vllm_metrics(r.body);
  }
  const bool ok = m.has_value();
  if (ok) {
    m->scraped_at = std::chrono::steady_clock::now();
    registry_.update_metrics(pod.name, *m);
  } else {
    registry_.mark_scrape_failed(pod.name);
  }
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    auto it = state_.find(pod.name);
    if (it != state_.end()) {
      it->second.in_flight = false;
      changed = it->second.last_ok != ok;
      it->second.last_ok = ok;
    }
  }
  if (changed) {
    if (ok) {
      spdlog::info("pod {} ({}) is ready", pod.name, pod.address);
    } else {
      spdlog::warn("pod {} ({}) scrape failed: {}", pod.name, pod.address,
                   r.status == 0 ? r.error : "status " + std::to_string(r.status));
    }
  }
}

}  // namespace llmd::epp
