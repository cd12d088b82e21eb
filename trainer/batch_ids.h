#pragma once
// The ids of recently ingested batches (predictor-api.md section 3, "Idempotent ingestion"): a
// sender that retries a batch whose 202 it never saw gets 202 again without a second ingest.
// Bounded: the oldest id is forgotten first; a retry older than the window is ingested again,
// which only a sender retrying for hours could see. Persisted by the owner (each sample-log
// entry carries its id, each snapshot the whole window), so a restart keeps it.
//
// Pure logic, no locks: the owner (TrainerService, under its mutex) serialises access.
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_set>

namespace llmd::trainer {

inline constexpr std::size_t kMaxBatchIdBytes = 128;

class BatchIdWindow {
 public:
  explicit BatchIdWindow(std::size_t capacity) : capacity_(capacity) {}
  bool contains(std::string_view id) const;
  // Remembers `id` (no-op when empty or already known), forgetting the oldest beyond capacity.
  void add(const std::string& id);
  const std::deque<std::string>& ids() const { return order_; }  // oldest first
  std::size_t size() const { return order_.size(); }

 private:
  std::size_t capacity_;
  std::deque<std::string> order_;
  std::unordered_set<std::string_view> known_;  // views into order_'s strings
};

}  // namespace llmd::trainer
