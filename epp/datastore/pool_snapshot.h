#pragma once
// One published state of the pool: its pods (address, labels, latest scrape: PodInfo), their
// scrape and outlier health, the peers' in-flight reports and the options that judge them.
// PodRegistry publishes a new one whenever any of these changes; readers take the pointer and
// never copy a pod's entry. What changes with every request is not here but in each pod's
// PodLive, which the entries point to.
//
// Threading: immutable once published (held as shared_ptr<const PoolSnapshot>); any thread
// may read it. Time-dependent judgements (staleness, ejection end, peer expiry, residual
// fading) are made by the reader at the `now` it passes, as they always were.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "epp/datastore/pod_live.h"
#include "epp/interface/endpoint.h"

namespace llmd::epp {

struct PoolHealth {
  std::size_t pods = 0;     // in the pool
  std::size_t healthy = 0;  // scraped recently and not ejected
  std::size_t ejected = 0;  // by outlier detection
  bool panic = false;       // routing over every pod that ever answered a scrape
};

struct PoolSnapshot {
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Pod {
    PodInfoConstPtr info;       // never null; info->live is the pod's PodLive (never null here)
    bool scraped_ok = false;    // the latest scrape succeeded
    bool ever_scraped = false;  // some scrape succeeded since the pod joined
    TimePoint ejected_until{};  // outlier detection
    std::size_t pool = 0;       // index of its pool label among the snapshot's pools
  };
  // One peer's latest report (PodRegistry::set_peer_in_flight), aligned with `pods`.
  struct Peer {
    TimePoint at{};
    std::vector<PodLive::Load> loads;
  };

  std::vector<Pod> pods;  // by name
  std::size_t pool_count = 0;
  std::shared_ptr<const std::vector<Peer>> peers;  // never null
  std::chrono::milliseconds staleness{2000};
  std::chrono::milliseconds peer_expiry{1000};
  double panic_threshold_percent = 50;

  PoolHealth health(TimePoint now) const;
  bool fresh(const Pod& p, TimePoint now) const {
    return p.scraped_ok && now - p.info->metrics.scraped_at <= staleness;
  }
  // Whether candidates() returns `p` given the pool's health `h` at `now`.
  bool routable(const Pod& p, const PoolHealth& h, TimePoint now) const {
    return h.panic ? p.ever_scraped : fresh(p, now) && now >= p.ejected_until;
  }
  // Healthy pods (fresh scrape, not ejected) as scheduling candidates; in panic every pod
  // that ever answered a scrape. Each Endpoint points at the pod's PodInfo and carries its
  // PodLive's counts (plus the unexpired peers'), predicted TTFT, step timing, first-token
  // lateness and residual and bound factors, each read once here: the cycle's plugins all see
  // these same values.
  std::vector<Endpoint> candidates(TimePoint now) const;
  const Pod* find(const std::string& name) const;  // null when not in the pool
};
using PoolSnapshotConstPtr = std::shared_ptr<const PoolSnapshot>;

}  // namespace llmd::epp
