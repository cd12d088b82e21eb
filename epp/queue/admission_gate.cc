#include "epp/queue/admission_gate.h"

#include <algorithm>

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include "epp/queue/flow_control_metrics.h"
#include "epp/queue/saturation.h"

namespace llmd::epp {

namespace {

double seconds_between(std::chrono::steady_clock::time_point from,
                       std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

struct AdmissionGate::Waiter {
  Wake wake;
  Clock::time_point arrival;
  FlowControlMetrics::Flow flow;  // its GIE flow-control series (empty without them)
};

struct AdmissionGate::PoolQueue {
  explicit PoolQueue(const QueueSettings& s) : queue(s) {}
  RouterQueue queue;
  std::map<uint64_t, Waiter> waiters;  // by queue entry id
  int64_t in_transit = 0;              // admitted, not yet through scheduling
};

struct AdmissionGate::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : pending(prometheus::BuildGauge()
                    .Name("llmd_epp_router_queue_pending")
                    .Help("Requests waiting in the router queue, by strict priority tier")
                    .Register(r)),
        outcomes(prometheus::BuildCounter()
                     .Name("llmd_epp_router_queue_requests_total")
                     .Help("Router queue decisions: immediate, admitted (after waiting), "
                           "evicted, rejected, timeout")
                     .Register(r)),
        wait(prometheus::BuildHistogram()
                 .Name("llmd_epp_router_queue_wait_seconds")
                 .Help("Time requests spent in the router queue before admission")
                 .Register(r)
                 .Add({},
                      prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                              0.25, 0.5, 1, 2.5, 5, 10, 30})) {}
  prometheus::Family<prometheus::Gauge>& pending;
  prometheus::Family<prometheus::Counter>& outcomes;
  prometheus::Histogram& wait;
  std::map<int64_t, prometheus::Gauge*> tiers;
  void count(const char* outcome) { outcomes.Add({{"outcome", outcome}}).Increment(); }
};

AdmissionGate::AdmissionGate(Candidates candidates, prometheus::Registry* registry,
                             FlowControlMetrics* gie)
    : candidates_(std::move(candidates)),
      metrics_(registry ? std::make_unique<Metrics>(*registry) : nullptr),
      gie_(gie) {}

AdmissionGate::~AdmissionGate() = default;

void AdmissionGate::configure(std::optional<RouterQueueConfig> config) {
  std::vector<Woken> wakes;
  {
    std::lock_guard lock(mu_);
    config_ = std::move(config);
    if (config_) {
      // New settings (policy, size, timeout) for every queue; waiters keep their arrival.
      for (auto& [name, q] : pools_) {
        RouterQueue next(config_->queue);
        while (auto e = q->queue.pop()) {
          next.push(*e);
        }
        q->queue = std::move(next);
      }
    } else {
      // Disabled: whoever waits goes now.
      const auto now = Clock::now();
      for (auto& [name, q] : pools_) {
        for (auto& [id, w] : q->waiters) {
          left(w, FlowControlMetrics::kDispatched, now);
          wakes.push_back({std::move(w.wake), AdmissionVerdict{}});
          ++q->in_transit;
        }
        q->waiters.clear();
        while (q->queue.pop()) {
        }
      }
      update_metrics();
    }
  }
  for (auto& [wake, verdict] : wakes) {
    wake(verdict);
  }
}

void AdmissionGate::close(const std::string& detail) {
  std::vector<Woken> wakes;
  {
    std::lock_guard lock(mu_);
    closed_ = detail;
    const auto now = Clock::now();
    for (auto& [name, q] : pools_) {
      for (auto& [id, w] : q->waiters) {
        left(w, FlowControlMetrics::kEvictedOther, now);
        wakes.push_back({std::move(w.wake), AdmissionVerdict{503, detail}});
        if (metrics_) metrics_->count("shutdown");
      }
      q->waiters.clear();
      while (q->queue.pop()) {
      }
    }
    update_metrics();
  }
  for (auto& [wake, verdict] : wakes) {
    wake(verdict);
  }
}

bool AdmissionGate::enabled() const {
  std::lock_guard lock(mu_);
  return config_.has_value();
}

bool AdmissionGate::needs_service_estimate() const {
  std::lock_guard lock(mu_);
  return config_ && config_->queue.policy == QueuePolicy::kWspt;
}

std::chrono::milliseconds AdmissionGate::max_wait() const {
  std::lock_guard lock(mu_);
  return config_ ? config_->queue.timeout : std::chrono::milliseconds(0);
}

AdmissionGate::PoolQueue& AdmissionGate::pool_queue(const std::string& pool) {
  auto& q = pools_[pool];
  if (!q) {
    q = std::make_unique<PoolQueue>(config_ ? config_->queue : QueueSettings{});
  }
  return *q;
}

std::pair<std::size_t, int64_t> AdmissionGate::free_pods(const std::string& pool) const {
  const auto pods = candidates_(pool);
  int64_t free = 0;
  for (const auto& e : pods) {
    free += pod_saturated(e, config_->saturation, e.last_predicted_ttft_ms) ? 0 : 1;
  }
  return {pods.size(), free};
}

bool AdmissionGate::has_capacity(const std::string& pool, PoolQueue& q) {
  const auto [pods, free] = free_pods(pool);
  if (pods == 0) {
    return true;  // nothing to wait for: the scheduler answers 503 right away
  }
  return q.in_transit < free;
}

void AdmissionGate::left(const Waiter& w, const char* outcome, Clock::time_point now) {
  if (gie_ != nullptr) {
    gie_->leave(w.flow, outcome, seconds_between(w.arrival, now));
  }
}

AdmissionGate::Ticket AdmissionGate::enter(const AdmissionRequest& request, Wake wake,
                                           Clock::time_point now) {
  const auto began = Clock::now();
  std::vector<Woken> wakes;
  Ticket ticket;
  {
    std::lock_guard lock(mu_);
    // GIE's flow-control series of this request (only while queueing is configured): it is
    // inside the gate from here to its outcome.
    FlowControlMetrics::Flow flow;
    if (gie_ != nullptr && config_) {
      flow = gie_->enter(request);
    }
    auto finished = [&](const char* outcome) {  // the outcome is known within enter()
      if (flow.size != nullptr) {
        const double s = seconds_between(began, Clock::now());
        gie_->leave(flow, outcome, s);
        gie_->enqueued(flow, outcome, s);
      }
    };
    if (closed_) {
      ticket.verdict = {503, *closed_};
      finished(FlowControlMetrics::kRejectedOther);
      return ticket;
    }
    PoolQueue& q = pool_queue(request.pool);
    if (!config_) {
      ++q.in_transit;
      return ticket;
    }
    expire(q, now, wakes);
    if (q.queue.empty() && has_capacity(request.pool, q)) {
      ++q.in_transit;
      if (metrics_) metrics_->count("immediate");
      finished(FlowControlMetrics::kDispatched);
    } else {
      QueueEntry e;
      e.id = next_id_++;
      e.strict_priority = request.strict_priority;
      e.priority = request.priority;
      e.arrival = now;
      e.slo_ttft_ms = request.slo_ttft_ms;
      e.predicted_service_ms = request.predicted_service_ms;
      auto pushed = q.queue.push(e);
      if (!pushed.accepted) {
        ticket.verdict = {429, fmt::format("Router queue is full ({} requests waiting with a "
                                           "higher or equal priority)",
                                           q.queue.size())};
        if (metrics_) metrics_->count("rejected");
        finished(FlowControlMetrics::kRejectedCapacity);
      } else {
        ticket.queued = true;
        ticket.id = e.id;
        if (flow.size != nullptr) {
          gie_->enqueued(flow, FlowControlMetrics::kNotYetFinalized,
                         seconds_between(began, Clock::now()));
        }
        q.waiters.emplace(e.id, Waiter{std::move(wake), now, std::move(flow)});
        if (pushed.evicted) {
          auto it = q.waiters.find(pushed.evicted->id);
          if (it != q.waiters.end()) {
            // GIE has no eviction by a later arrival: the closest of its outcomes.
            left(it->second, FlowControlMetrics::kEvictedOther, now);
            wakes.push_back({std::move(it->second.wake),
                             {429,
                              "Evicted from the full router queue by a request with a "
                              "higher priority"}});
            q.waiters.erase(it);
          }
          if (metrics_) metrics_->count("evicted");
        }
        drain(request.pool, wakes);
      }
    }
    update_metrics();
  }
  for (auto& [w, verdict] : wakes) {
    w(verdict);
  }
  return ticket;
}

void AdmissionGate::expire(PoolQueue& q, Clock::time_point now, std::vector<Woken>& wakes) {
  for (const auto& e : q.queue.expire(now)) {
    auto it = q.waiters.find(e.id);
    if (it == q.waiters.end()) {
      continue;
    }
    left(it->second, FlowControlMetrics::kEvictedTtl, now);
    wakes.push_back({std::move(it->second.wake),
                     {503, fmt::format("Timed out after {} ms in the router queue (tier {}): "
                                       "every pod of the pool stayed saturated",
                                       config_->queue.timeout.count(), e.strict_priority)}});
    q.waiters.erase(it);
    if (metrics_) metrics_->count("timeout");
  }
}

void AdmissionGate::cancel(uint64_t id) {
  std::lock_guard lock(mu_);
  for (auto& [name, q] : pools_) {
    if (auto it = q->waiters.find(id); it != q->waiters.end()) {
      left(it->second, FlowControlMetrics::kEvictedCancelled, Clock::now());
      q->waiters.erase(it);
      q->queue.remove(id);
      if (metrics_) metrics_->count("cancelled");
      update_metrics();
      return;
    }
  }
}

void AdmissionGate::drain(const std::string& pool, std::vector<Woken>& wakes) {
  PoolQueue& q = pool_queue(pool);
  const auto now = Clock::now();
  while (!q.queue.empty() && has_capacity(pool, q)) {
    auto e = q.queue.pop();
    auto it = q.waiters.find(e->id);
    if (it == q.waiters.end()) {
      continue;
    }
    if (metrics_) {
      metrics_->count("admitted");
      metrics_->wait.Observe(seconds_between(it->second.arrival, now));
    }
    left(it->second, FlowControlMetrics::kDispatched, now);
    wakes.push_back({std::move(it->second.wake), AdmissionVerdict{}});
    q.waiters.erase(it);
    ++q.in_transit;
  }
  if (gie_ != nullptr) {
    gie_->dispatch_cycle(seconds_between(now, Clock::now()));
  }
}

void AdmissionGate::on_scheduled(const std::string& pool) {
  std::vector<Woken> wakes;
  {
    std::lock_guard lock(mu_);
    PoolQueue& q = pool_queue(pool);
    q.in_transit = std::max<int64_t>(0, q.in_transit - 1);
    if (config_ && !q.queue.empty()) {
      drain(pool, wakes);
      update_metrics();
    }
  }
  for (auto& [w, verdict] : wakes) {
    w(verdict);
  }
}

void AdmissionGate::on_first_token(const std::string& pool) {
  wake(pool);
}

void AdmissionGate::on_finished(const std::string& pool) {
  wake(pool);
}

void AdmissionGate::wake(const std::string& pool) {
  std::vector<Woken> wakes;
  {
    std::lock_guard lock(mu_);
    if (config_ && !pool_queue(pool).queue.empty()) {
      drain(pool, wakes);
      update_metrics();
    }
  }
  for (auto& [w, verdict] : wakes) {
    w(verdict);
  }
}

void AdmissionGate::tick(Clock::time_point now) {
  std::vector<Woken> wakes;
  {
    std::lock_guard lock(mu_);
    if (!config_) {
      return;
    }
    for (auto& [name, q] : pools_) {
      expire(*q, now, wakes);
      if (!q->queue.empty()) {
        drain(name, wakes);
      }
    }
    update_metrics();
  }
  for (auto& [w, verdict] : wakes) {
    w(verdict);
  }
}

std::size_t AdmissionGate::pending() const {
  std::lock_guard lock(mu_);
  std::size_t n = 0;
  for (const auto& [name, q] : pools_) {
    n += q->queue.size();
  }
  return n;
}

std::map<std::string, double> AdmissionGate::saturation() const {
  std::map<std::string, double> out;
  std::lock_guard lock(mu_);
  if (!config_) {
    return out;
  }
  auto add = [&](const std::string& pool) {
    const auto [pods, free] = free_pods(pool);
    if (pods > 0) {
      out[pool] = 1.0 - static_cast<double>(free) / static_cast<double>(pods);
    }
  };
  add("");
  for (const auto& [name, q] : pools_) {
    if (!name.empty()) {
      add(name);
    }
  }
  return out;
}

void AdmissionGate::update_metrics() {
  if (!metrics_) {
    return;
  }
  std::map<int64_t, std::size_t> tiers;
  for (const auto& [name, q] : pools_) {
    for (const auto& [tier, n] : q->queue.pending_by_tier()) {
      tiers[tier] += n;
    }
  }
  for (auto& [tier, gauge] : metrics_->tiers) {
    gauge->Set(0);
  }
  for (const auto& [tier, n] : tiers) {
    auto& g = metrics_->tiers[tier];
    if (g == nullptr) {
      g = &metrics_->pending.Add({{"tier", std::to_string(tier)}});
    }
    g->Set(static_cast<double>(n));
  }
}

}  // namespace llmd::epp
