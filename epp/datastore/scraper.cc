#include "epp/datastore/scraper.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include <spdlog/spdlog.h>

#include "common/http/async_client.h"
#include "epp/datastore/metrics_parser.h"

namespace llmd::epp {

struct Scraper::Pod {
  std::string name;
  std::string address;
  std::map<std::string, std::string> labels;  // the engine label picks the mapping
  http::Url url;
  std::chrono::nanoseconds phase{0};
  bool active = true;           // false once it left the pool: its timer and answer are dropped
  bool in_flight = false;       // a scrape is on the wire: the next turn is skipped
  std::optional<bool> last_ok;  // for logging changes only
};

namespace {

http::Url pod_url(const std::string& address) {
  const auto colon = address.rfind(':');
  http::Url url;
  url.host = address.substr(0, colon);
  url.port = 80;
  if (colon != std::string::npos) {
    const std::string_view port(address.data() + colon + 1, address.size() - colon - 1);
    unsigned v = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
    if (ec == std::errc() && ptr == port.data() + port.size() && v > 0 && v <= 65535) {
      url.port = static_cast<uint16_t>(v);
    }
  }
  return url;
}

int64_t slot_count(std::chrono::nanoseconds interval, std::chrono::nanoseconds slot) {
  return std::max<int64_t>(1, interval / std::max(slot, std::chrono::nanoseconds(1)));
}

}  // namespace

std::chrono::nanoseconds scrape_phase(uint64_t k, std::chrono::nanoseconds interval,
                                      std::chrono::nanoseconds slot) {
  // Golden-ratio (Weyl) sequence: for any n, the first n points split the interval into gaps of
  // at most three lengths, the largest under 2.7/n of it, and adding a pod moves no other; so
  // the slots fill evenly (within about one pod of each other).
  constexpr double kGolden = 0.6180339887498949;
  const int64_t slots = slot_count(interval, slot);
  double whole = 0;
  const double frac = std::modf(static_cast<double>(k) * kGolden, &whole);
  const auto index = std::min(slots - 1, static_cast<int64_t>(frac * static_cast<double>(slots)));
  return index * (interval / slots);
}

Scraper::Scraper(ScraperOptions options, PodRegistry& registry)
    : options_(options),
      slot_(std::chrono::nanoseconds(options.interval) /
            slot_count(options.interval, options.slot)),
      registry_(registry),
      config_(options_.config) {}

Scraper::~Scraper() {
  stop();
}

void Scraper::start() {
  stopping_ = false;
  epoch_ = Clock::now();
  membership_known_ = false;
  http::AsyncHttpClient::Options o;
  o.thread_name = "epp-scraper";
  if (options_.config->scheme == "https") {
    http::TlsOptions tls;
    tls.verify = !options_.config->insecure_skip_verify;
    o.tls = http::make_tls_context(tls);
  }
  client_ = std::make_unique<http::AsyncHttpClient>(std::vector<http::Url>{}, o);
  io_ = client_.get();
  io_->post([this] { sync(epoch_); });
}

void Scraper::stop() {
  // Set before the client ends the exchanges in flight: their callbacks (which run before the
  // client's destructor returns) then neither publish nor log a failure.
  stopping_ = true;
  client_.reset();  // cancels the timers (their tasks are dropped) and joins the I/O thread
  io_ = nullptr;
  pods_.clear();
  pending_.clear();
  outstanding_ = 0;
  publish_armed_ = false;
}

void Scraper::set_config(std::shared_ptr<const ScrapeConfig> config) {
  std::lock_guard lock(config_mu_);
  config_ = std::move(config);
}

std::shared_ptr<const ScrapeConfig> Scraper::config() const {
  std::lock_guard lock(config_mu_);
  return config_;
}

std::string Scraper::needs_restart(const ScrapeConfig& next) const {
  const ScrapeConfig& started = *options_.config;
  if (next.scheme != started.scheme) {
    return "metrics-data-source scheme " + started.scheme + " -> " + next.scheme +
           " takes a restart (the scrapes' TLS settings are made at start)";
  }
  if (next.scheme == "https" && next.insecure_skip_verify != started.insecure_skip_verify) {
    return "metrics-data-source insecureSkipVerify takes a restart (the scrapes' TLS settings are "
           "made at start)";
  }
  return {};
}

void Scraper::sync(Clock::time_point due) {
  if (stopping_) {
    return;
  }
  const uint64_t v = registry_.membership_version();
  if (!membership_known_ || v != membership_seen_) {
    membership_known_ = true;
    membership_seen_ = v;
    reconcile(due);
  }
  // Phase 0 of every interval. A late run skips to the next one still ahead.
  auto next = due + options_.interval;
  const auto now = Clock::now();
  while (next < now) {
    next += options_.interval;
  }
  io_->post_at(next, [this, next] { sync(next); });
}

void Scraper::reconcile(Clock::time_point due) {
  std::map<std::string, PodPtr> next;
  for (auto& config : registry_.pods()) {
    if (auto it = pods_.find(config.name);
        it != pods_.end() && it->second->address == config.address) {
      it->second->labels = config.labels;
      next.emplace(config.name, std::move(it->second));
      pods_.erase(it);
      continue;
    }
    auto pod = std::make_shared<Pod>();
    pod->name = config.name;
    pod->address = config.address;
    pod->labels = config.labels;
    pod->url = pod_url(config.address);
    pod->phase = scrape_phase(arrivals_++, options_.interval, options_.slot);
    // Scraped at once, so that a pod that joins (at start, by discovery, by a reload) becomes
    // routable without waiting for its slot; then at its slot, from the first one at least an
    // interval away (`due` is this interval's start).
    scrape(pod);
    const auto now = Clock::now();
    auto first = due + pod->phase;
    while (first < now + options_.interval) {
      first += options_.interval;
    }
    io_->post_at(first, [this, pod, first] { fire(pod, first); });
    next.emplace(config.name, std::move(pod));
  }
  for (auto& [name, pod] : pods_) {
    pod->active = false;  // left the pool, or came back at another address (a new task above)
  }
  pods_ = std::move(next);
}

void Scraper::fire(const PodPtr& pod, Clock::time_point due) {
  if (!pod->active || stopping_) {
    return;  // the pod left the pool: its timer ends here
  }
  if (!pod->in_flight) {
    scrape(pod);
  }
  // One interval after this turn began (not after the answer), keeping the pod's phase; a late
  // run skips the turns already past instead of firing them in a burst.
  auto next = due + options_.interval;
  const auto now = Clock::now();
  while (next < now) {
    next += options_.interval;
  }
  io_->post_at(next, [this, pod, next] { fire(pod, next); });
}

void Scraper::scrape(const PodPtr& pod) {
  pod->in_flight = true;
  ++outstanding_;
  scrapes_.fetch_add(1, std::memory_order_relaxed);
  const auto cfg = config();
  http::Url url = pod->url;
  url.tls = cfg->scheme == "https";
  if (cfg->port != 0) {
    url.port = cfg->port;
  }
  // The mapping belongs to `cfg`, which the callback keeps alive.
  const EngineMapping* mapping = cfg->mapping_for(pod->labels);
  io_->request(url, "GET", cfg->path, {}, options_.timeout,
               [this, pod, cfg, mapping](http::AsyncResponse r) { answered(pod, mapping, r); });
}

void Scraper::answered(const PodPtr& pod, const EngineMapping* mapping,
                       const http::AsyncResponse& r) {
  pod->in_flight = false;
  --outstanding_;
  if (stopping_ || !pod->active) {
    return;  // stop() cancelled it, or the pod left the pool meanwhile
  }
  std::optional<PodMetrics> m;
  if (r.status == 200 && mapping != nullptr) {
    m = parse_engine_metrics(r.body, *mapping);
  }
  const bool ok = m.has_value();
  if (ok) {
    m->scraped_at = Clock::now();
  }
  pending_.push_back({pod->name, std::move(m)});
  if (pod->last_ok != ok) {
    pod->last_ok = ok;
    if (ok) {
      spdlog::info("pod {} ({}) is ready", pod->name, pod->address);
    } else {
      spdlog::warn("pod {} ({}) scrape failed: {}", pod->name, pod->address,
                   r.status == 0     ? r.error
                   : r.status != 200 ? "status " + std::to_string(r.status)
                   : mapping         ? "the answer lacks the " + mapping->engine +
                                   " gauges (queue, "
                                   "running, KV usage)"
                             : std::string("no engine mapping"));
    }
  }
  schedule_publish();
}

void Scraper::schedule_publish() {
  if (outstanding_ == 0) {
    publish();  // every scrape in flight has answered: the batch is whole
    return;
  }
  if (publish_armed_) {
    return;  // the armed publish takes this answer too
  }
  // A scrape is still out (the slot's stragglers, or a hung pod): publish at the next slot
  // boundary at the latest. On the boundary, so the wake-up is the one that starts that slot's
  // scrapes.
  publish_armed_ = true;
  io_->post_at(next_boundary(), [this] {
    publish_armed_ = false;
    publish();
  });
}

Scraper::Clock::time_point Scraper::next_boundary() const {
  const auto since = Clock::now() - epoch_;
  return epoch_ + (since / slot_ + 1) * slot_;
}

void Scraper::publish() {
  if (pending_.empty() || stopping_) {
    return;
  }
  registry_.apply_scrapes(pending_);
  published_.fetch_add(pending_.size(), std::memory_order_relaxed);
  pending_.clear();
}

}  // namespace llmd::epp
