#include "epp/feedback/training_feedback.h"

#include "common/util/thread_name.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include "common/features/feature_json.h"
#include "common/http/client.h"
#include "epp/features/feature_row.h"

namespace llmd::epp {

using Json = nlohmann::json;

std::optional<Json> first_token_entry(const CompletedRequest& req, bool streaming_mode) {
  if (!streaming_mode || !req.request.streaming || req.upstream_url || !req.first_token ||
      !(req.ttft_ms > 0)) {
    return std::nullopt;
  }
  // The model sees no clock: it learns (and is judged on) the TTFT of an arrival at an average
  // moment of the pod's step, so the sample is the phase-neutral TTFT against the unphased
  // predictions.
  const double actual = req.phase_neutral_ttft_ms();
  if (!(actual > 0)) {
    return std::nullopt;
  }
  Json ttft = features::feature_input_to_json(feature_row(req.request, req.pod));
  ttft["actual_ttft_ms"] = actual;
  ttft["actual_tpot_ms"] = 0.0;
  if (req.pod.latency) {
    ttft["predicted_ttft_ms"] = req.pod.latency->unphased_ttft_ms;
    ttft["expected_ttft_ms"] = req.pod.latency->unphased_expected_ttft_ms;
  }
  return ttft;
}

std::vector<Json> completion_entries(const CompletedRequest& done, bool streaming_mode) {
  std::vector<Json> out;
  if (!done.success || done.client_aborted || done.upstream_url) {
    return out;
  }
  features::FeatureInput f = feature_row(done.request, done.pod);
  if (!streaming_mode) {
    if (done.e2e_ms > 0) {
      Json ttft = features::feature_input_to_json(f);
      ttft["actual_ttft_ms"] = done.e2e_ms;
      ttft["actual_tpot_ms"] = 0.0;
      if (done.pod.latency) {
        ttft["predicted_ttft_ms"] = done.pod.latency->predicted_ttft_ms;
        ttft["expected_ttft_ms"] = done.pod.latency->expected_ttft_ms;
      }
      out.push_back(std::move(ttft));
    }
    return out;
  }
  if (auto measured = done.measured_tpot_ms()) {
    f.num_tokens_generated = *done.completion_tokens;
    Json tpot = features::feature_input_to_json(f);
    tpot["actual_ttft_ms"] = 0.0;
    tpot["actual_tpot_ms"] = *measured;
    if (done.pod.latency) {
      tpot["predicted_tpot_ms"] = done.pod.latency->predicted_tpot_ms;
      tpot["expected_tpot_ms"] = done.pod.latency->expected_tpot_ms;
    }
    out.push_back(std::move(tpot));
  }
  return out;
}

struct TrainingFeedback::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : produced(counter(r, "llmd_epp_feedback_samples_produced_total",
                         "Training samples made from requests")
                     .Add({})),
        sent(counter(r, "llmd_epp_feedback_samples_sent_total",
                     "Training samples posted to the trainer (first attempt of each batch)")
                 .Add({})),
        acknowledged(counter(r, "llmd_epp_feedback_samples_acknowledged_total",
                             "Training samples the trainer answered 202 for")
                         .Add({})),
        retried(counter(r, "llmd_epp_feedback_samples_retried_total",
                        "Training samples posted again with their batch's id after no answer")
                    .Add({})),
        dropped_family(counter(r, "llmd_epp_feedback_samples_dropped_total",
                               "Training samples given up, by reason: buffer_full (oldest "
                               "dropped), over_flush_cap (sampled out), send_failed (no 202 "
                               "after max_send_attempts), rejected (4xx)")),
        not_streamed(counter(r, "llmd_epp_feedback_requests_not_sampled_total",
                             "Successful requests that gave no training sample, by reason: "
                             "not_streamed (streamingMode: true trains on streams only)")
                         .Add({{"reason", "not_streamed"}})),
        queue_depth(prometheus::BuildGauge()
                        .Name("llmd_epp_feedback_queue_depth")
                        .Help("Training samples buffered or pending (sent, not yet answered "
                              "202); produced = acknowledged + dropped + this")
                        .Register(r)
                        .Add({})) {}
  static prometheus::Family<prometheus::Counter>& counter(prometheus::Registry& r, const char* name,
                                                          const char* help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r);
  }
  prometheus::Counter& produced;
  prometheus::Counter& sent;
  prometheus::Counter& acknowledged;
  prometheus::Counter& retried;
  prometheus::Family<prometheus::Counter>& dropped_family;
  prometheus::Counter& not_streamed;
  prometheus::Gauge& queue_depth;
  // Mirrors counts_ into the registry (mu_ held by the caller).
  void update(const FeedbackCounts& c, const FeedbackCounts& last) {
    produced.Increment(static_cast<double>(c.produced - last.produced));
    sent.Increment(static_cast<double>(c.sent - last.sent));
    acknowledged.Increment(static_cast<double>(c.acknowledged - last.acknowledged));
    retried.Increment(static_cast<double>(c.retried - last.retried));
    const std::pair<const char*, uint64_t FeedbackCounts::*> reasons[] = {
        {"buffer_full", &FeedbackCounts::dropped_buffer_full},
        {"over_flush_cap", &FeedbackCounts::dropped_over_flush_cap},
        {"send_failed", &FeedbackCounts::dropped_send_failed},
        {"rejected", &FeedbackCounts::dropped_rejected}};
    for (const auto& [name, field] : reasons) {
      if (c.*field != last.*field) {
        dropped_family.Add({{"reason", name}})
            .Increment(static_cast<double>(c.*field - last.*field));
      }
    }
    queue_depth.Set(static_cast<double>(c.queued));
  }
  FeedbackCounts last;  // what update() has exported; mu_ guards it
};

namespace {

// A random id per process: a restarted EPP starts its sequence again under a new sender.
std::string random_sender_id() {
  std::random_device entropy;
  const uint64_t id = (uint64_t{entropy()} << 32) | entropy();
  return fmt::format("epp-{:016x}", id);
}

}  // namespace

TrainingFeedback::TrainingFeedback(FeedbackOptions options, prometheus::Registry* registry,
                                   FeedbackSender sender)
    : options_(std::move(options)), sender_(std::move(sender)), sender_id_(random_sender_id()) {
  if (registry != nullptr) {
    metrics_ = std::make_unique<Metrics>(*registry);
  }
}

TrainingFeedback::~TrainingFeedback() {
  stop();
}

void TrainingFeedback::start() {
  if (options_.trainer_url.empty()) {
    spdlog::warn("no training server URL: training feedback is off");
    return;
  }
  thread_ = named_thread("epp-feedback", [this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, options_.interval, [this] { return stopping_; })) {
      lock.unlock();
      flush();
      lock.lock();
    }
  });
}

void TrainingFeedback::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      return;
    }
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
    flush();
  }
}

void TrainingFeedback::on_first_token(const CompletedRequest& req) {
  if (options_.trainer_url.empty()) {
    return;
  }
  const auto mode = streaming_mode();
  if (!mode) {
    return;  // no plugin trains this pipeline
  }
  if (auto e = first_token_entry(req, *mode)) {
    enqueue(std::move(*e));
  }
}

void TrainingFeedback::on_completed(const CompletedRequest& done) {
  if (options_.trainer_url.empty()) {
    return;
  }
  const auto mode = streaming_mode();
  if (!mode) {
    return;  // no plugin trains this pipeline
  }
  const bool streaming = *mode;
  if (streaming && !done.request.streaming && done.success && !done.client_aborted &&
      !done.upstream_url) {
    not_streamed();
  }
  for (auto& e : completion_entries(done, streaming)) {
    enqueue(std::move(e));
  }
}

void TrainingFeedback::not_streamed() {
  const uint64_t n = ++not_streamed_;
  if (metrics_) {
    metrics_->not_streamed.Increment();
  }
  // At most one line a minute: the first such request, then a count.
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t next = next_not_streamed_warning_ns_.load();
  if (now >= next && next_not_streamed_warning_ns_.compare_exchange_strong(
                         next, now + std::chrono::nanoseconds(std::chrono::minutes(1)).count())) {
    spdlog::warn(
        "training: {} non-streamed request(s) gave no training sample: the pipeline's "
        "predicted-latency-producer has streamingMode: true, which trains on streams "
        "only; if this pool's clients do not stream, set streamingMode: false (TTFT := "
        "end-to-end latency, upstream's default)",
        n);
  }
}

FeedbackCounts TrainingFeedback::counts() const {
  std::lock_guard lock(mu_);
  FeedbackCounts c = counts_;
  c.queued = buffer_.size() + (pending_ ? pending_->samples : 0);
  return c;
}

void TrainingFeedback::enqueue(Json entry) {
  std::lock_guard lock(mu_);
  buffer_.push_back(std::move(entry));
  ++counts_.produced;
  while (buffer_.size() > options_.max_buffer) {
    buffer_.pop_front();
    ++counts_.dropped_buffer_full;
  }
  // The registry is updated by the feedback thread (around each send), not per sample.
}

void TrainingFeedback::drop(uint64_t n, uint64_t FeedbackCounts::*reason) {
  std::lock_guard lock(mu_);
  counts_.*reason += n;
}

std::optional<TrainingFeedback::Batch> TrainingFeedback::next_batch() {
  std::vector<Json> batch;
  {
    std::lock_guard lock(mu_);
    batch.assign(std::make_move_iterator(buffer_.begin()), std::make_move_iterator(buffer_.end()));
    buffer_.clear();
  }
  if (batch.empty()) {
    return std::nullopt;
  }
  if (batch.size() > options_.max_per_flush) {
    // A uniform sample keeps the TTFT/TPOT mix in expectation.
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::shuffle(batch.begin(), batch.end(), rng);
    drop(batch.size() - options_.max_per_flush, &FeedbackCounts::dropped_over_flush_cap);
    batch.resize(options_.max_per_flush);
  }
  Batch b;
  b.samples = batch.size();
  b.body =
      Json{{"entries", batch}, {"batch_id", fmt::format("{}:{}", sender_id_, next_seq_++)}}.dump();
  return b;
}

int TrainingFeedback::send(const std::string& body, std::string& error) {
  if (sender_) {
    return sender_(body, error);
  }
  auto url = http::parse_url(options_.trainer_url);
  if (!url) {
    error = "bad trainer URL " + options_.trainer_url;
    return 0;
  }
  http::HttpClient client(url->host, url->port, options_.send_timeout);
  std::vector<http::Header> headers;
  if (!options_.admin_token.empty()) {
    headers.push_back({"Authorization", "Bearer " + options_.admin_token});
  }
  auto r = client.request("POST", url->base_path + "/add_training_data_bulk", body,
                          "application/json", headers);
  error = r.status == 0 ? r.error : r.body.substr(0, 200);
  return r.status;
}

void TrainingFeedback::flush() {
  bool retry = false;
  {
    std::lock_guard lock(mu_);
    retry = pending_.has_value();
  }
  if (!retry) {
    auto b = next_batch();
    std::lock_guard lock(mu_);
    if (b) {
      pending_ = std::move(*b);
    }
  }
  // Only this thread changes pending_, so its body can be read without mu_ while sending.
  std::optional<Batch>& p = pending_;
  if (p) {
    {
      std::lock_guard lock(mu_);
      (p->attempts == 0 ? counts_.sent : counts_.retried) += p->samples;
      ++p->attempts;
      export_metrics();  // visible now: a post to a stalled trainer can take the send timeout
    }
    std::string error;
    const int status = send(p->body, error);
    std::lock_guard lock(mu_);
    if (status == 202) {
      counts_.acknowledged += p->samples;
      pending_.reset();
    } else if (status >= 400 && status < 500) {
      spdlog::warn("training feedback rejected ({}): {}; {} samples dropped", status, error,
                   p->samples);
      counts_.dropped_rejected += p->samples;
      pending_.reset();
    } else if (status != 0 && ++p->error_answers >= options_.max_send_attempts) {
      spdlog::warn("training feedback failed ({}) {} times: {} samples dropped", status,
                   p->error_answers, p->samples);
      counts_.dropped_send_failed += p->samples;
      pending_.reset();
    } else if (status != 0 || p->attempts == 1 || p->attempts % 60 == 0) {
      // An outage logs its start and then once a minute, not once per interval.
      spdlog::warn(
          "training feedback failed ({}), attempt {}: {} samples kept, retried at the "
          "next interval",
          status == 0 ? error : std::to_string(status), p->attempts, p->samples);
    }
  }
  std::lock_guard lock(mu_);
  export_metrics();
}

void TrainingFeedback::export_metrics() {
  if (!metrics_) {
    return;
  }
  FeedbackCounts c = counts_;
  c.queued = buffer_.size() + (pending_ ? pending_->samples : 0);
  metrics_->update(c, metrics_->last);
  metrics_->last = c;
}

}  // namespace llmd::epp
