#include "epp/queue/router_queue.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace llmd::epp {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Priorities come from request bodies: a huge value must saturate, not wrap around and jump
// to the back of the queue.
int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? kMax : kMin) : r;
}

int64_t sat_mul(int64_t a, int64_t b) {  // a, b >= 0
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kMax : r;
}

int64_t sat_neg(int64_t a) {
  return a == kMin ? kMax : -a;
}

int64_t ns(std::chrono::milliseconds d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

int64_t ms_to_ns(double ms) {
  if (!(ms > 0)) {
    return 0;
  }
  return ms >= 9.0e12 ? kMax : static_cast<int64_t>(std::llround(ms * 1e6));
}

}  // namespace

std::optional<QueuePolicy> parse_queue_policy(std::string_view s) {
  if (s == "fcfs") {
    return QueuePolicy::kFcfs;
  }
  if (s == "lcfs") {
    return QueuePolicy::kLcfs;
  }
  if (s == "wspt") {
    return QueuePolicy::kWspt;
  }
  if (s == "slo-deadline") {
    return QueuePolicy::kSloDeadline;
  }
  return std::nullopt;
}

std::string_view to_string(QueuePolicy p) {
  switch (p) {
    case QueuePolicy::kFcfs:
      return "fcfs";
    case QueuePolicy::kLcfs:
      return "lcfs";
    case QueuePolicy::kWspt:
      return "wspt";
    case QueuePolicy::kSloDeadline:
      return "slo-deadline";
  }
  return "fcfs";
}

bool RouterQueue::Key::operator<(const Key& o) const {
  if (tier != o.tier) {
    return tier > o.tier;
  }
  if (rate != o.rate) {
    return rate > o.rate;
  }
  if (time_ns != o.time_ns) {
    return time_ns < o.time_ns;
  }
  return seq < o.seq;
}

RouterQueue::RouterQueue(QueueSettings s) : settings_(s) {}

RouterQueue::Key RouterQueue::key_of(const QueueEntry& e) const {
  const int64_t arrival =
      std::chrono::duration_cast<std::chrono::nanoseconds>(e.arrival.time_since_epoch()).count();
  const int64_t prio = std::max<int64_t>(0, e.priority);  // cannot fall behind plain FCFS
  Key k{e.strict_priority, 0, arrival, next_seq_};
  switch (settings_.policy) {
    case QueuePolicy::kFcfs:
      k.time_ns = sat_add(arrival, -sat_mul(prio, ns(settings_.priority_bump)));
      break;
    case QueuePolicy::kLcfs:
      k.time_ns = sat_neg(sat_add(arrival, sat_mul(prio, ns(settings_.priority_bump))));
      break;
    case QueuePolicy::kWspt: {
      double service = e.predicted_service_ms >= 1 ? e.predicted_service_ms : 1.0;  // also NaN
      k.rate = (1.0 + static_cast<double>(prio)) / service;
      break;
    }
    case QueuePolicy::kSloDeadline: {
      bool slo = e.slo_ttft_ms && std::isfinite(*e.slo_ttft_ms);
      int64_t budget = slo ? ms_to_ns(*e.slo_ttft_ms)
                           : ns(settings_.default_deadline.value_or(settings_.timeout));
      k.time_ns = sat_add(arrival, budget);
      break;
    }
  }
  return k;
}

RouterQueue::PushResult RouterQueue::push(const QueueEntry& e) {
  PushResult r;
  if (by_id_.contains(e.id) || settings_.max_size == 0) {
    return r;
  }
  Key k = key_of(e);
  if (order_.size() >= settings_.max_size) {
    auto worst = std::prev(order_.end());
    if (!(k < worst->key)) {
      return r;
    }
    r.evicted = take(worst);
  }
  ++next_seq_;
  auto o = order_.insert(Node{k, e}).first;
  auto a = arrivals_.emplace(e.arrival, e.id).first;
  by_id_.emplace(e.id, Handles{o, a});
  ++by_tier_[e.strict_priority];
  r.accepted = true;
  return r;
}

QueueEntry RouterQueue::take(Order::iterator it) {
  QueueEntry e = it->entry;
  auto h = by_id_.find(e.id);
  arrivals_.erase(h->second.arrival);
  by_id_.erase(h);
  order_.erase(it);
  if (auto t = by_tier_.find(e.strict_priority); --t->second == 0) {
    by_tier_.erase(t);
  }
  return e;
}

std::optional<QueueEntry> RouterQueue::pop() {
  if (order_.empty()) {
    return std::nullopt;
  }
  return take(order_.begin());
}

const QueueEntry* RouterQueue::peek() const {
  return order_.empty() ? nullptr : &order_.begin()->entry;
}

bool RouterQueue::remove(uint64_t id) {
  auto h = by_id_.find(id);
  if (h == by_id_.end()) {
    return false;
  }
  take(h->second.order);
  return true;
}

std::vector<QueueEntry> RouterQueue::expire(Clock::time_point now) {
  std::vector<QueueEntry> out;
  while (!arrivals_.empty() && arrivals_.begin()->first + settings_.timeout <= now) {
    out.push_back(take(by_id_.at(arrivals_.begin()->second).order));
  }
  return out;
}

std::optional<std::size_t> RouterQueue::position(uint64_t id) const {
  auto h = by_id_.find(id);
  if (h == by_id_.end()) {
    return std::nullopt;
  }
  Order::const_iterator it = h->second.order;
  return static_cast<std::size_t>(std::distance(order_.begin(), it));
}

}  // namespace llmd::epp
