#pragma once
// Turns requests into training samples for the trainer (epp.md section 2 step 8) and sends them
// to POST /add_training_data_bulk once per interval from its own thread.
// Streaming mode (`streamingMode: true` on the pipeline's predicted-latency-producer): the TTFT
// sample (first content chunk - dispatch) is sent when the first token arrives, not at completion,
// so the model learns a load level while it lasts; the TPOT sample ((e2e - TTFT) / (tokens - 1),
// tokens from usage or else the content chunks counted) when the stream ends. Non-streaming
// requests give no sample in this mode: their end-to-end time is not a TTFT; they are counted
// (llmd_epp_feedback_requests_not_sampled_total{reason= "not_streamed"}) and a warning says so,
// since a pool whose clients never stream then never trains. E2E mode (upstream's default,
// `streamingMode: false`): every successful request gives TTFT := end-to-end latency, and no TPOT.
// Both samples use feature_row() on the Endpoint copy the scheduler picked: the same row the
// prediction was made from. Failed or aborted requests give no completion sample.
// The buffer is bounded (oldest dropped, counted); above `max_per_flush` a flush keeps a
// random sample that preserves the TTFT/TPOT mix.
// Exactly once: each batch carries `"batch_id": "<sender>:<seq>"` (sender = random per process),
// and a batch without a 202 stays pending and is sent again with the same id before anything
// newer; the trainer ingests a known id once and answers 202 again. A 4xx is final (dropped,
// reason "rejected"); a 5xx answer `max_send_attempts` times drops the batch (a body the trainer
// cannot take must not block the ones behind it). No answer at all (connection refused, timeout:
// the trainer is down or restarting) never drops it: the batch waits for the trainer however long
// it is away, and the bounded buffer behind it sheds its oldest samples instead, so an outage
// costs the samples of its middle, not those of its start and end.
// Counters (llmd_epp_feedback_*): produced = acknowledged + dropped (by reason) + queued, where
// queued (the queue-depth gauge) = buffered + pending.
// Threading: on_first_token/on_completed run on proxy threads (enqueue under mu_); sending runs
// on the feedback thread only, which owns pending_.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/request/completed_request.h"

namespace prometheus {
class Registry;
}

namespace llmd::epp {

struct FeedbackOptions {
  std::string trainer_url;  // empty = feedback off
  std::chrono::milliseconds interval{1000};
  std::size_t max_buffer = 50000;
  std::size_t max_per_flush = 10000;
  // The pool's training mode, read for each request (the pipeline's streamingMode; it follows
  // config reloads): true = streams' first tokens, false = end-to-end latency as TTFT. Null or
  // nullopt: the pipeline trains nothing and no sample is sent.
  std::function<std::optional<bool>()> streaming_mode;
  std::string admin_token;    // sent as "Authorization: Bearer" when the trainer requires one
  int max_send_attempts = 4;  // 5xx answers per batch before it is dropped (one per interval)
  std::chrono::milliseconds send_timeout{5000};
};

// Sends one bulk body; returns the HTTP status, 0 when no answer came (error says why).
using FeedbackSender = std::function<int(const std::string& body, std::string& error)>;

// Where every produced sample is: counts since start (see the class comment).
struct FeedbackCounts {
  uint64_t produced = 0, sent = 0, acknowledged = 0, retried = 0;
  uint64_t dropped_buffer_full = 0, dropped_over_flush_cap = 0, dropped_send_failed = 0,
           dropped_rejected = 0;
  uint64_t queued = 0;
  uint64_t dropped() const {
    return dropped_buffer_full + dropped_over_flush_cap + dropped_send_failed + dropped_rejected;
  }
};

// Pure: the TTFT sample of a request whose first token just arrived (nullopt when it is not a
// sample: e2e mode, a non-streaming request, an upstream URL, no measured TTFT).
std::optional<nlohmann::json> first_token_entry(const CompletedRequest& req, bool streaming_mode);
// Pure: the samples of a finished request (TPOT of a stream; TTFT := e2e in e2e mode).
std::vector<nlohmann::json> completion_entries(const CompletedRequest& done, bool streaming_mode);

class TrainingFeedback : public CompletionSink {
 public:
  // `registry` (optional) gets the llmd_epp_feedback_* metrics; `sender` replaces the HTTP POST
  // (tests).
  explicit TrainingFeedback(FeedbackOptions options, prometheus::Registry* registry = nullptr,
                            FeedbackSender sender = nullptr);
  ~TrainingFeedback() override;
  void start();
  void stop();  // flushes what is buffered
  void on_first_token(const CompletedRequest& req) override;
  void on_completed(const CompletedRequest& done) override;

  FeedbackCounts counts() const;
  const std::string& sender_id() const { return sender_id_; }
  // One send round (the feedback thread's tick; tests call it directly, without start()).
  void flush();

 private:
  struct Metrics;
  struct Batch {
    std::string body;
    uint64_t samples = 0;
    int attempts = 0;       // sends so far
    int error_answers = 0;  // of them answered 5xx (no answer does not count)
  };
  void enqueue(nlohmann::json entry);
  std::optional<Batch> next_batch();
  void drop(uint64_t n, uint64_t FeedbackCounts::*reason);
  int send(const std::string& body, std::string& error);
  void export_metrics();  // mirrors counts_ into the registry; mu_ held
  std::optional<bool> streaming_mode() const {
    return options_.streaming_mode ? options_.streaming_mode() : std::nullopt;
  }
  // A successful non-streamed request in streaming mode: counted, and warned about.
  void not_streamed();
  FeedbackOptions options_;
  FeedbackSender sender_;
  std::string sender_id_;
  uint64_t next_seq_ = 1;  // feedback thread only
  std::atomic<uint64_t> not_streamed_{0};
  std::atomic<int64_t> next_not_streamed_warning_ns_{0};
  std::unique_ptr<Metrics> metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> buffer_;  // guarded by mu_
  std::optional<Batch> pending_;       // guarded by mu_ (read by counts())
  FeedbackCounts counts_;              // guarded by mu_; queued computed on read
  bool stopping_ = false;              // guarded by mu_
  std::thread thread_;
};

}  // namespace llmd::epp
