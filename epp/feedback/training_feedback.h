#pragma once
// Turns completed requests into training samples for the trainer (epp.md section 2 step 8) and
// sends them to POST /add_training_data_bulk once per interval from its own thread.
// Streaming: one TTFT entry (first content chunk - dispatch) and one TPOT entry
// ((e2e - TTFT) / (completion_tokens - 1)) with the dispatch-time features. Non-streaming:
// TTFT := end-to-end latency, no TPOT. Failed or aborted requests are not samples.
// The buffer is bounded (oldest dropped, counted); above `max_per_flush` a flush keeps a
// random sample that preserves the TTFT/TPOT mix; a failed flush is retried once, then dropped
// and counted.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/proxy/proxy_types.h"

namespace llmd::epp {

struct FeedbackOptions {
  std::string trainer_url;  // empty = feedback off
  std::chrono::milliseconds interval{1000};
  std::size_t max_buffer = 50000;
  std::size_t max_per_flush = 10000;
  bool streaming_mode = true;
};

// Pure: the entries of one completed request (empty when it is not a sample).
std::vector<nlohmann::json> training_entries(const CompletedRequest& done, bool streaming_mode);

class TrainingFeedback : public CompletionSink {
 public:
  explicit TrainingFeedback(FeedbackOptions options);
  ~TrainingFeedback() override;
  void start();
  void stop();  // flushes what is buffered
  void on_completed(const CompletedRequest& done) override;

  uint64_t sent() const { return sent_.load(); }
  uint64_t dropped() const { return dropped_.load(); }
  uint64_t failed_flushes() const { return failed_flushes_.load(); }

 private:
  void flush();
  FeedbackOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> buffer_;  // guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  std::thread thread_;
  std::atomic<uint64_t> sent_{0}, dropped_{0}, failed_flushes_{0};
};

}  // namespace llmd::epp
