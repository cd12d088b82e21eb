#pragma once
// The EPP router queue's ordering container (spec epp.md section 5, semantics of NVIDIA Dynamo's
// router queue): requests wait here while every eligible pod is saturated and leave best first.
// Order = (strict_priority desc, policy key, arrival, push sequence). Pure logic: time is passed
// in, nothing blocks. Not thread-safe: the owner (the proxy's queue) guards it with its mutex.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llmd::epp {

enum class QueuePolicy { kFcfs, kLcfs, kWspt, kSloDeadline };

// "fcfs" | "lcfs" | "wspt" | "slo-deadline"; nullopt for anything else.
std::optional<QueuePolicy> parse_queue_policy(std::string_view s);
std::string_view to_string(QueuePolicy p);

struct QueueSettings {
  QueuePolicy policy = QueuePolicy::kFcfs;
  std::size_t max_size = 1000;               // a full queue evicts its worst or rejects
  std::chrono::milliseconds timeout{30000};  // arrival + timeout <= now: expired
  // fcfs/lcfs: one unit of soft priority moves the effective arrival this much (Dynamo: 1 s).
  std::chrono::milliseconds priority_bump{1000};
  // slo-deadline: deadline of a request without a TTFT SLO is arrival + this (absent = timeout).
  std::optional<std::chrono::milliseconds> default_deadline;
};

struct QueueEntry {
  uint64_t id = 0;              // unique among queued entries (the caller's request handle)
  int64_t strict_priority = 0;  // tier: a higher tier always leaves first
  int64_t priority = 0;         // soft priority, higher = more important; < 0 counts as 0
  std::chrono::steady_clock::time_point arrival{};
  std::optional<double> slo_ttft_ms;  // slo-deadline
  double predicted_service_ms = 0;    // wspt; clamped to >= 1 ms
};

class RouterQueue {
 public:
  explicit RouterQueue(QueueSettings s);

  struct PushResult {
    bool accepted = false;              // false: the queue is full and `e` ranks no better (429)
    std::optional<QueueEntry> evicted;  // the worst entry, pushed out by `e` (answer it 429)
  };
  // A duplicate id is rejected. Call expire(now) first so expired entries free their slots.
  PushResult push(const QueueEntry& e);
  std::optional<QueueEntry> pop();  // the best entry; does not check expiry
  const QueueEntry* peek() const;   // valid until the next mutation
  bool remove(uint64_t id);         // the client went away; false when not queued
  // Removes and returns the entries with arrival + timeout <= now, oldest first (answer 503).
  std::vector<QueueEntry> expire(std::chrono::steady_clock::time_point now);

  std::size_t size() const { return order_.size(); }
  bool empty() const { return order_.empty(); }
  const std::map<int64_t, std::size_t>& pending_by_tier() const { return by_tier_; }
  std::optional<std::size_t> position(uint64_t id) const;  // 0-based rank; O(n), for messages
  const QueueSettings& settings() const { return settings_; }

 private:
  struct Key {
    int64_t tier;
    double rate;      // wspt weight / service (0 for the other policies); larger first
    int64_t time_ns;  // effective arrival or deadline, negated for lcfs; smaller first
    uint64_t seq;
    bool operator<(const Key& o) const;
  };
  struct Node {
    Key key;
    QueueEntry entry;
    bool operator<(const Node& o) const { return key < o.key; }
  };
  using Order = std::set<Node>;
  using Arrivals = std::set<std::pair<std::chrono::steady_clock::time_point, uint64_t>>;
  struct Handles {
    Order::iterator order;
    Arrivals::iterator arrival;
  };

  Key key_of(const QueueEntry& e) const;
  QueueEntry take(Order::iterator it);

  QueueSettings settings_;
  uint64_t next_seq_ = 0;
  Order order_;
  Arrivals arrivals_;  // for expire(): oldest first, independent of the policy
  std::unordered_map<uint64_t, Handles> by_id_;
  std::map<int64_t, std::size_t> by_tier_;
};

}  // namespace llmd::epp
