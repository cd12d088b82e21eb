#pragma once
// Turns requests into training samples for the trainer (epp.md section 2 step 8) and sends them
// to POST /add_training_data_bulk once per interval from its own thread.
// Streaming mode (default): the TTFT sample (first content chunk - dispatch) is sent when the
// first token arrives, not at completion, so the model learns a load level while it lasts; the
// TPOT sample ((e2e - TTFT) / (tokens - 1), tokens from usage or else the content chunks counted)
// when the stream ends. Non-streaming requests give no sample in this mode: their end-to-end
// time is not a TTFT. E2E mode (`streaming_mode = false`, for pools served without streaming):
// every successful request gives TTFT := end-to-end latency, and no TPOT.
// Both samples use feature_row() on the Endpoint copy the scheduler picked: the same row the
// prediction was made from. Failed or aborted requests give no completion sample.
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
  std::string admin_token;  // sent as "Authorization: Bearer" when the trainer requires one
};

// Pure: the TTFT sample of a request whose first token just arrived (nullopt when it is not a
// sample: e2e mode, a non-streaming request, an upstream URL, no measured TTFT).
std::optional<nlohmann::json> first_token_entry(const CompletedRequest& req, bool streaming_mode);
// Pure: the samples of a finished request (TPOT of a stream; TTFT := e2e in e2e mode).
std::vector<nlohmann::json> completion_entries(const CompletedRequest& done, bool streaming_mode);

class TrainingFeedback : public CompletionSink {
 public:
  explicit TrainingFeedback(FeedbackOptions options);
  ~TrainingFeedback() override;
  void start();
  void stop();  // flushes what is buffered
  void on_first_token(const CompletedRequest& req) override;
  void on_completed(const CompletedRequest& done) override;

  uint64_t sent() const { return sent_.load(); }
  uint64_t dropped() const { return dropped_.load(); }
  uint64_t failed_flushes() const { return failed_flushes_.load(); }

 private:
  void flush();
  void enqueue(nlohmann::json entry);
  FeedbackOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> buffer_;  // guarded by mu_
  bool stopping_ = false;              // guarded by mu_
  std::thread thread_;
  std::atomic<uint64_t> sent_{0}, dropped_{0}, failed_flushes_{0};
};

}  // namespace llmd::epp
