#include "epp/datastore/pod_registry.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace llmd::epp {
namespace {

const std::string& pool_of(const PodConfig& c) {
  static const std::string kDefaultPool;
  auto it = c.labels.find("pool");
  return it == c.labels.end() ? kDefaultPool : it->second;
}

}  // namespace

PodRegistry::PodRegistry(std::chrono::milliseconds staleness) : staleness_(staleness) {
  std::lock_guard lock(mu_);
  publish_locked();
}

PoolSnapshotConstPtr PodRegistry::snapshot() const {
  std::lock_guard lock(snapshot_mu_);
  return snapshot_;
}

void PodRegistry::remake_info(State& s) {
  s.info = std::make_shared<const PodInfo>(
      PodInfo{s.config.name, s.config.address, s.config.labels, s.metrics, s.live, role_label_});
}

void PodRegistry::set_role_label(const std::string& label) {
  std::lock_guard lock(mu_);
  if (label == role_label_) {
    return;
  }
  role_label_ = label;
  for (auto& [name, s] : pods_) {
    remake_info(s);
    refresh_entry_locked(s);
  }
  publish_locked();
}

void PodRegistry::set_pods(const std::vector<PodConfig>& pods) {
  std::lock_guard lock(mu_);
  std::map<std::string, State> next;
  for (const auto& p : pods) {
    auto it = pods_.find(p.name);
    State s = it != pods_.end() && it->second.config.address == p.address ? it->second : State{};
    std::shared_ptr<PoolLearning>& pool = pools_[pool_of(p)];
    if (!pool) {
      pool = std::make_shared<PoolLearning>();
    }
    // A pod moved to another pool starts afresh: its residuals and bookkeeping belong to the
    // pool it was scheduled in (requests still running there finish on the old object).
    if (!s.live || pool_of(s.config) != pool_of(p)) {
      s.live = std::make_shared<PodLive>(pool);
      s.live->set_failure_run(s.outlier.consecutive_failures() > 0);
    }
    s.config = p;
    remake_info(s);
    next[p.name] = std::move(s);
  }
  pods_ = std::move(next);
  // Entries in name order; a pool's index is its label's rank in first-seen order.
  entries_.clear();
  entries_.reserve(pods_.size());
  std::vector<const std::string*> pools;
  for (auto& [name, s] : pods_) {
    const std::string& label = pool_of(s.config);
    auto it = std::find_if(pools.begin(), pools.end(), [&](auto* l) { return *l == label; });
    const auto pool = static_cast<std::size_t>(it - pools.begin());
    if (it == pools.end()) {
      pools.push_back(&label);
    }
    s.index = entries_.size();
    entries_.push_back({nullptr, false, false, {}, pool});
    refresh_entry_locked(s);
  }
  pool_count_ = pools.size();
  aligned_peers_.reset();
  publish_locked();
  membership_version_.fetch_add(1);  // after the publish: pods() already shows the new set
}

std::vector<PodConfig> PodRegistry::pods() const {
  const auto snap = snapshot();
  std::vector<PodConfig> out;
  out.reserve(snap->pods.size());
  for (const auto& p : snap->pods) {
    out.push_back({p.info->name, p.info->address, p.info->labels});
  }
  return out;
}

void PodRegistry::update_metrics(const std::string& name, const PodMetrics& m) {
  const std::pair<std::string, PodMetrics> one{name, m};
  update_metrics({&one, 1});
}

bool PodRegistry::scraped_locked(State& s, const PodMetrics& m) {
  s.metrics = m;
  s.scraped_ok = true;
  s.ever_scraped = true;
  remake_info(s);
  refresh_entry_locked(s);
  return true;
}

bool PodRegistry::scrape_failed_locked(State& s) {
  if (!s.scraped_ok) {
    return false;  // already not ready: nothing to publish
  }
  s.scraped_ok = false;
  refresh_entry_locked(s);
  return true;
}

void PodRegistry::update_metrics(std::span<const std::pair<std::string, PodMetrics>> scrapes) {
  std::lock_guard lock(mu_);
  bool changed = false;
  for (const auto& [name, m] : scrapes) {
    if (auto it = pods_.find(name); it != pods_.end()) {
      changed = scraped_locked(it->second, m) || changed;
    }
  }
  if (changed) {
    publish_locked();
  }
}

void PodRegistry::mark_scrape_failed(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it != pods_.end() && scrape_failed_locked(it->second)) {
    publish_locked();
  }
}

void PodRegistry::apply_scrapes(std::span<const ScrapeResult> results) {
  std::lock_guard lock(mu_);
  bool changed = false;
  for (const auto& r : results) {
    auto it = pods_.find(r.name);
    if (it == pods_.end()) {
      continue;
    }
    changed =
        (r.metrics ? scraped_locked(it->second, *r.metrics) : scrape_failed_locked(it->second)) ||
        changed;
  }
  if (changed) {
    publish_locked();
  }
}

std::vector<Endpoint> PodRegistry::candidates(TimePoint now) const {
  return snapshot()->candidates(now);
}

std::size_t PodRegistry::ready_count(TimePoint now) const {
  const auto snap = snapshot();
  const PoolHealth h = snap->health(now);
  return static_cast<std::size_t>(
      std::count_if(snap->pods.begin(), snap->pods.end(),
                    [&](const auto& p) { return snap->routable(p, h, now); }));
}

bool PodRegistry::serves_model(const std::string& model) const {
  const auto snap = snapshot();
  return std::any_of(snap->pods.begin(), snap->pods.end(), [&](const auto& p) {
    const auto& models = p.info->metrics.models;
    return std::find(models.begin(), models.end(), model) != models.end();
  });
}

std::shared_ptr<PodLive> PodRegistry::live(const std::string& name) const {
  const auto snap = snapshot();
  const PoolSnapshot::Pod* p = snap->find(name);
  return p == nullptr ? nullptr : p->info->live;
}

PodRegistry::Health PodRegistry::health(TimePoint now) const {
  return snapshot()->health(now);
}

std::vector<PodRegistry::PodHealth> PodRegistry::pod_health(TimePoint now) const {
  std::lock_guard lock(mu_);
  std::vector<PodHealth> out;
  out.reserve(pods_.size());
  for (const auto& [name, s] : pods_) {
    out.push_back(
        {name, s.outlier.ejected(now), s.outlier.consecutive_failures(), s.outlier.ejections()});
  }
  return out;
}

void PodRegistry::configure_outlier_detection(const OutlierDetectionOptions& options) {
  std::lock_guard lock(mu_);
  outlier_options_ = options;
  publish_locked();  // the panic threshold
}

void PodRegistry::set_ejection_listener(EjectionListener listener) {
  std::lock_guard lock(mu_);
  ejection_listener_ = std::move(listener);
}

void PodRegistry::on_pod_failure(const std::string& name, TimePoint now) {
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
    State& s = it->second;
    // Envoy's cap: at most max_ejection_percent of the pool at once, always at least one pod.
    // The published snapshot is the master table's state (writers publish before unlocking).
    const PoolHealth h = snapshot_->health(now);
    const auto cap = std::max<std::size_t>(
        1, static_cast<std::size_t>(outlier_options_.max_ejection_percent / 100.0 *
                                    static_cast<double>(pods_.size())));
    failures = s.outlier.consecutive_failures() + 1;
    length = s.outlier.on_failure(outlier_options_, h.ejected < cap, now);
    ejections = s.outlier.ejections();
    s.live->set_failure_run(s.outlier.consecutive_failures() > 0);
    if (length.count() > 0) {
      refresh_entry_locked(s);
      publish_locked();
    }
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
  {
    const auto snap = snapshot();
    const PoolSnapshot::Pod* p = snap->find(name);
    if (p == nullptr || !p->info->live->failure_run()) {
      return;  // no run to break: the common case takes no lock
    }
  }
  std::lock_guard lock(mu_);
  auto it = pods_.find(name);
  if (it != pods_.end()) {
    it->second.outlier.on_success();
    it->second.live->set_failure_run(false);
  }
}

std::vector<PodRegistry::PodLoad> PodRegistry::own_in_flight() const {
  const auto snap = snapshot();
  std::vector<PodLoad> out;
  out.reserve(snap->pods.size());
  for (const auto& p : snap->pods) {
    const PodLive::Load l = p.info->live->load();
    out.push_back({p.info->name, l.dispatched, l.prefill_tokens, l.decode_tokens});
  }
  return out;
}

void PodRegistry::set_peer_in_flight(const std::string& peer, const std::vector<PodLoad>& loads,
                                     TimePoint now) {
  PeerReport report;
  report.at = now;
  for (const auto& l : loads) {
    report.by_pod[l.pod] = l;
  }
  std::lock_guard lock(mu_);
  // Expired peers are dropped here, so a churn of peer names cannot grow the table.
  std::erase_if(peers_, [&](const auto& kv) { return now - kv.second.at > peer_expiry_; });
  peers_[peer] = std::move(report);
  aligned_peers_.reset();
  publish_locked();
}

void PodRegistry::set_peer_expiry(std::chrono::milliseconds expiry) {
  std::lock_guard lock(mu_);
  peer_expiry_ = expiry;
  publish_locked();
}

std::shared_ptr<const std::vector<PoolSnapshot::Peer>> PodRegistry::align_peers_locked() const {
  auto out = std::make_shared<std::vector<PoolSnapshot::Peer>>();
  out->reserve(peers_.size());
  for (const auto& [_, report] : peers_) {
    PoolSnapshot::Peer& peer = out->emplace_back();
    peer.at = report.at;
    peer.loads.resize(pods_.size());
    std::size_t i = 0;
    for (const auto& [name, s] : pods_) {
      if (auto it = report.by_pod.find(name); it != report.by_pod.end()) {
        peer.loads[i] = {it->second.dispatched, it->second.prefill_tokens,
                         it->second.decode_tokens};
      }
      ++i;
    }
  }
  return out;
}

void PodRegistry::refresh_entry_locked(const State& s) {
  PoolSnapshot::Pod& e = entries_[s.index];
  e.info = s.info;
  e.scraped_ok = s.scraped_ok;
  e.ever_scraped = s.ever_scraped;
  e.ejected_until = s.outlier.ejected_until();
}

void PodRegistry::publish_locked() {
  auto next = std::make_shared<PoolSnapshot>();
  next->pods = entries_;
  next->pool_count = pool_count_;
  next->staleness = staleness_;
  next->peer_expiry = peer_expiry_;
  next->panic_threshold_percent = outlier_options_.panic_threshold_percent;
  if (!aligned_peers_) {
    aligned_peers_ = align_peers_locked();
  }
  next->peers = aligned_peers_;
  PoolSnapshotConstPtr previous;  // released after the lock: readers may still hold it
  {
    std::lock_guard lock(snapshot_mu_);
    previous = std::exchange(snapshot_, std::move(next));
  }
  publishes_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace llmd::epp
