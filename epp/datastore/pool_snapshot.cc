#include "epp/datastore/pool_snapshot.h"

#include <algorithm>

namespace llmd::epp {

PoolHealth PoolSnapshot::health(TimePoint now) const {
  PoolHealth h;
  h.pods = pods.size();
  for (const Pod& p : pods) {
    const bool ejected = now < p.ejected_until;
    h.ejected += ejected ? 1 : 0;
    h.healthy += fresh(p, now) && !ejected ? 1 : 0;
  }
  h.panic = h.pods > 0 && static_cast<double>(h.healthy) * 100.0 <
                              panic_threshold_percent * static_cast<double>(h.pods);
  return h;
}

const PoolSnapshot::Pod* PoolSnapshot::find(const std::string& name) const {
  auto it = std::lower_bound(pods.begin(), pods.end(), name,
                             [](const Pod& p, const std::string& n) { return p.info->name < n; });
  return it != pods.end() && it->info->name == name ? &*it : nullptr;
}

std::vector<Endpoint> PoolSnapshot::candidates(TimePoint now) const {
  // Each pod's residuals, read once: both the pool means and the pod's factor use this copy.
  struct Residuals {
    PodResidual ttft, tpot;
  };
  std::vector<Residuals> residuals;
  residuals.reserve(pods.size());
  // Per pool, the mean residual of its pods with enough observations (sum, count), summed in
  // name order.
  struct PoolMeans {
    double ttft = 0, tpot = 0;
    int ttft_n = 0, tpot_n = 0;
  };
  std::vector<PoolMeans> means(pool_count);
  for (const Pod& p : pods) {
    const PodLive& live = *p.info->live;
    Residuals& r = residuals.emplace_back(Residuals{live.ttft_residual(), live.tpot_residual()});
    PoolMeans& m = means[p.pool];
    if (r.ttft.counts()) {
      m.ttft += r.ttft.mean(), ++m.ttft_n;
    }
    if (r.tpot.counts()) {
      m.tpot += r.tpot.mean(), ++m.tpot_n;
    }
  }
  const PoolHealth h = health(now);
  std::vector<const Peer*> live_peers;
  for (const Peer& peer : *peers) {
    if (now - peer.at <= peer_expiry) {
      live_peers.push_back(&peer);
    }
  }
  std::vector<Endpoint> out;
  out.reserve(pods.size());
  for (std::size_t i = 0; i < pods.size(); ++i) {
    const Pod& p = pods[i];
    if (!routable(p, h, now)) {
      continue;
    }
    const PodLive& live = *p.info->live;
    Endpoint& e = out.emplace_back(p.info);
    const PodLive::Load own = live.load();
    e.dispatched = own.dispatched;
    e.prefill_tokens_in_flight = own.prefill_tokens;
    e.decode_tokens_in_flight = own.decode_tokens;
    for (const Peer* peer : live_peers) {
      e.dispatched += peer->loads[i].dispatched;
      e.prefill_tokens_in_flight += peer->loads[i].prefill_tokens;
      e.decode_tokens_in_flight += peer->loads[i].decode_tokens;
    }
    e.step = live.step_clock().timing();
    e.ttft_late_ms = live.first_token_waits().late_ms(now);
    e.last_predicted_ttft_ms = live.predicted_ttft(now, staleness);
    e.ttft_bound_factor = live.pool().ttft_factor();
    e.tpot_bound_factor = live.pool().tpot_factor();
    const PoolMeans& m = means[p.pool];
    if (m.ttft_n > 0) {
      e.ttft_residual_factor = residuals[i].ttft.factor(m.ttft / m.ttft_n, now);
    }
    if (m.tpot_n > 0) {
      e.tpot_residual_factor = residuals[i].tpot.factor(m.tpot / m.tpot_n, now);
    }
  }
  return out;
}

}  // namespace llmd::epp
