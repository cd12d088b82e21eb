#include "epp/datastore/pod_registry.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace llmd::epp {
namespace {

// A reference, not a copy: candidates() looks the pool up twice per pod on every request.
const std::string& pool_of(const PodConfig& c) {
  static const std::string kDefaultPool;
  auto it = c.labels.find("pool");
  return it == c.labels.end() ? kDefaultPool : it->second;
}

}  // namespace

PodRegistry::PodRegistry(std::chrono::milliseconds staleness) : staleness_(staleness) {}

void PodRegistry::set_pods(const std::vector<PodConfig>& pods) {
  std::lock_guard lock(mu_);
  std::map<std::string, State> next;
  for (const auto& p : pods) {
    auto it = pods_.find(p.name);
    State s = it != pods_.end() && it->second.config.address == p.address ? it->second : State{};
    s.config = p;
    next[p.name] = s;
  }
  pods_ = std::move(next);
}

std::vector<PodConfig> PodRegistry::pods() const {
  std::lock_guard lock(mu_);
  std::vector<PodConfig> out;
  for (const auto& [_, s] : pods_) {
    out.push_back(s.config);
  }
  return out;
}

void PodRegistry::update_metrics(const std::string& name, const PodMetrics& m) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it != pods_.end()) {
    it->second.metrics = m;
    it->second.scraped_ok = true;
    it->second.ever_scraped = true;
  }
}

void PodRegistry::mark_scrape_failed(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it != pods_.end()) {
    it->second.scraped_ok = false;
  }
}

std::shared_ptr<PodFirstTokenWaits> PodRegistry::first_token_waits(
    const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  return it == pods_.end() ? nullptr : it->second.waits;
}

std::shared_ptr<PodStepClock> PodRegistry::step_clock(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  return it == pods_.end() ? nullptr : it->second.step_clock;
}

void PodRegistry::configure_outlier_detection(const OutlierDetectionOptions& options) {
  std::lock_guard lock(mu_);
  outlier_options_ = options;
}

void PodRegistry::set_ejection_listener(EjectionListener listener) {
  std::lock_guard lock(mu_);
  ejection_listener_ = std::move(listener);
}

void PodRegistry::on_pod_failure(const std::string& name,
                                 std::chrono::steady_clock::time_point now) {
  std::chrono::milliseconds length{0};
  int64_t ejections = 0;
  int failures = 0;
  EjectionListener listener;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(name);
    if (it == pods_.end()) {
      return;
    }
    // Envoy's cap: at most max_ejection_percent of the pool at once, always at least one pod.
    const Health h = health_locked(now);
    const auto cap = std::max<std::size_t>(
        1, static_cast<std::size_t>(outlier_options_.max_ejection_percent / 100.0 *
                                    static_cast<double>(pods_.size())));
    failures = it->second.outlier.consecutive_failures() + 1;
    length = it->second.outlier.on_failure(outlier_options_, h.ejected < cap, now);
    ejections = it->second.outlier.ejections();
    listener = ejection_listener_;
  }
  if (length.count() > 0) {
    spdlog::warn("pod {} ejected for {:.1f} s after {} consecutive failures (ejection {})", name,
                 static_cast<double>(length.count()) / 1000.0, failures, ejections);
    if (listener) {
      listener(name, length, ejections);
    }
  }
}

void PodRegistry::on_pod_success(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it != pods_.end()) {
    it->second.outlier.on_success();
  }
}

bool PodRegistry::fresh(const State& s, std::chrono::steady_clock::time_point now) const {
  return s.scraped_ok && now - s.metrics.scraped_at <= staleness_;
}

PodRegistry::Health PodRegistry::health_locked(std::chrono::steady_clock::time_point now) const {
  Health h;
  h.pods = pods_.size();
  for (const auto& [_, s] : pods_) {
    const bool ejected = s.outlier.ejected(now);
    h.ejected += ejected ? 1 : 0;
    h.healthy += fresh(s, now) && !ejected ? 1 : 0;
  }
  h.panic = h.pods > 0 && static_cast<double>(h.healthy) * 100.0 <
                              outlier_options_.panic_threshold_percent * static_cast<double>(h.pods);
  return h;
}

bool PodRegistry::routable(const State& s, const Health& h,
                           std::chrono::steady_clock::time_point now) const {
  return h.panic ? s.ever_scraped : fresh(s, now) && !s.outlier.ejected(now);
}

PodRegistry::Health PodRegistry::health(std::chrono::steady_clock::time_point now) const {
  std::lock_guard lock(mu_);
  return health_locked(now);
}

std::vector<PodRegistry::PodHealth> PodRegistry::pod_health(
    std::chrono::steady_clock::time_point now) const {
  std::lock_guard lock(mu_);
  std::vector<PodHealth> out;
  out.reserve(pods_.size());
  for (const auto& [name, s] : pods_) {
    out.push_back({name, s.outlier.ejected(now), s.outlier.consecutive_failures(),
                   s.outlier.ejections()});
  }
  return out;
}

std::vector<PodRegistry::PodLoad> PodRegistry::own_in_flight() const {
  std::lock_guard lock(mu_);
  std::vector<PodLoad> out;
  out.reserve(pods_.size());
  for (const auto& [name, s] : pods_) {
    out.push_back({name, s.dispatched, s.prefill_tokens, s.decode_tokens});
  }
  return out;
}

void PodRegistry::set_peer_in_flight(const std::string& peer, const std::vector<PodLoad>& loads,
                                     std::chrono::steady_clock::time_point now) {
  PeerSnapshot snap;
  snap.at = now;
  for (const auto& l : loads) {
    snap.by_pod[l.pod] = l;
  }
  std::lock_guard lock(mu_);
  // Expired peers are dropped here, so a churn of peer names cannot grow the table.
  std::erase_if(peers_, [&](const auto& kv) { return now - kv.second.at > peer_expiry_; });
  peers_[peer] = std::move(snap);
}

void PodRegistry::set_peer_expiry(std::chrono::milliseconds expiry) {
  std::lock_guard lock(mu_);
  peer_expiry_ = expiry;
}

std::vector<Endpoint> PodRegistry::candidates(std::chrono::steady_clock::time_point now) const {
  std::lock_guard lock(mu_);
  // Per pool, the mean residual of its pods with enough observations (sum, count).
  struct PoolMeans {
    double ttft = 0, tpot = 0;
    int ttft_n = 0, tpot_n = 0;
  };
  std::map<std::string, PoolMeans> pools;
  for (const auto& [name, s] : pods_) {
    auto& m = pools[pool_of(s.config)];
    if (s.ttft_residual.counts()) {
      m.ttft += s.ttft_residual.mean(), ++m.ttft_n;
    }
    if (s.tpot_residual.counts()) {
      m.tpot += s.tpot_residual.mean(), ++m.tpot_n;
    }
  }
  const Health h = health_locked(now);
  std::vector<Endpoint> out;
  out.reserve(pods_.size());
  for (const auto& [name, s] : pods_) {
    if (!routable(s, h, now)) {
      continue;
    }
    Endpoint e;
    e.name = name;
    e.address = s.config.address;
    e.labels = s.config.labels;
    e.metrics = s.metrics;
    e.dispatched = s.dispatched;
    e.prefill_tokens_in_flight = s.prefill_tokens;
    e.decode_tokens_in_flight = s.decode_tokens;
    for (const auto& [peer, snap] : peers_) {
      if (now - snap.at > peer_expiry_) {
        continue;
      }
      if (auto it = snap.by_pod.find(name); it != snap.by_pod.end()) {
        e.dispatched += it->second.dispatched;
        e.prefill_tokens_in_flight += it->second.prefill_tokens;
        e.decode_tokens_in_flight += it->second.decode_tokens;
      }
    }
    e.step = s.step_clock->timing();
    e.ttft_late_ms = s.waits->late_ms(now);
    if (s.predicted_ttft_ms && now - s.predicted_at <= staleness_) {
      e.last_predicted_ttft_ms = s.predicted_ttft_ms;
    }
    const std::string& pool = pool_of(s.config);
    if (auto c = coverage_.find(pool); c != coverage_.end()) {
      e.ttft_bound_factor = c->second.ttft.factor();
      e.tpot_bound_factor = c->second.tpot.factor();
    }
    const PoolMeans& m = pools[pool];
    if (m.ttft_n > 0) {
      e.ttft_residual_factor = s.ttft_residual.factor(m.ttft / m.ttft_n, now);
    }
    if (m.tpot_n > 0) {
      e.tpot_residual_factor = s.tpot_residual.factor(m.tpot / m.tpot_n, now);
    }
    out.push_back(std::move(e));
  }
  return out;
}

void PodRegistry::record_predicted_ttft(const std::string& name, double ttft_ms,
                                        std::chrono::steady_clock::time_point now) {
  const PredictedTtft one{&name, ttft_ms};
  record_predicted_ttfts({&one, 1}, now);
}

void PodRegistry::record_predicted_ttfts(std::span<const PredictedTtft> predicted,
                                         std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mu_);
  // A cycle's scores usually keep candidates() order, which is this map's: the pod after the
  // previous one is tried before a lookup.
  auto next = pods_.begin();
  for (const auto& p : predicted) {
    auto it = next != pods_.end() && next->first == *p.name ? next : pods_.find(*p.name);
    if (it != pods_.end()) {
      it->second.predicted_ttft_ms = p.ttft_ms;
      it->second.predicted_at = now;
      next = std::next(it);
    }
  }
}

template <PodResidual PodRegistry::State::*Residual,
          BoundCoverage PodRegistry::PoolCoverage::*Coverage>
void PodRegistry::observe(const std::string& name, double model_ms, double bound_ms,
                          double actual_ms, std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it != pods_.end()) {
    (it->second.*Residual).add(model_ms, actual_ms, now);
    (coverage_[pool_of(it->second.config)].*Coverage).add(bound_ms, actual_ms);
  }
}

void PodRegistry::observe_ttft(const std::string& name, double model_ms, double bound_ms,
                               double actual_ms, std::chrono::steady_clock::time_point now) {
  observe<&State::ttft_residual, &PoolCoverage::ttft>(name, model_ms, bound_ms, actual_ms, now);
}

void PodRegistry::observe_tpot(const std::string& name, double model_ms, double bound_ms,
                               double actual_ms, std::chrono::steady_clock::time_point now) {
  observe<&State::tpot_residual, &PoolCoverage::tpot>(name, model_ms, bound_ms, actual_ms, now);
}

std::size_t PodRegistry::ready_count(std::chrono::steady_clock::time_point now) const {
  std::lock_guard lock(mu_);
  const Health h = health_locked(now);
  return static_cast<std::size_t>(std::count_if(
      pods_.begin(), pods_.end(), [&](const auto& kv) { return routable(kv.second, h, now); }));
}

bool PodRegistry::serves_model(const std::string& model) const {
  std::lock_guard lock(mu_);
  return std::any_of(pods_.begin(), pods_.end(), [&](const auto& kv) {
    const auto& models = kv.second.metrics.models;
    return std::find(models.begin(), models.end(), model) != models.end();
  });
}

void PodRegistry::on_dispatch(const std::string& name, int64_t input_tokens) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it != pods_.end()) {
    ++it->second.dispatched;
    it->second.prefill_tokens += input_tokens;
  }
}

void PodRegistry::on_first_token(const std::string& name, int64_t input_tokens,
                                 int64_t max_tokens) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it != pods_.end()) {
    it->second.prefill_tokens = std::max<int64_t>(0, it->second.prefill_tokens - input_tokens);
    it->second.decode_tokens += max_tokens;
  }
}

void PodRegistry::on_finished(const std::string& name, int64_t input_tokens, int64_t decode_tokens,
                              bool first_token_seen) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it == pods_.end()) {
    return;  // pod removed by a reload while the request ran
  }
  it->second.dispatched = std::max<int64_t>(0, it->second.dispatched - 1);
  if (first_token_seen) {
    it->second.decode_tokens = std::max<int64_t>(0, it->second.decode_tokens - decode_tokens);
  } else {
    it->second.prefill_tokens = std::max<int64_t>(0, it->second.prefill_tokens - input_tokens);
  }
}

}  // namespace llmd::epp
