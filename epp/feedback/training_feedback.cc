#include "epp/feedback/training_feedback.h"

#include <algorithm>
#include <random>

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
  // moment of the pod's step, so the step-phase delay the prediction added comes off all three.
  const double phase = req.pod.latency ? req.pod.latency->ttft_phase_ms : 0.0;
  const double actual = req.phase_neutral_ttft_ms();
  if (!(actual > 0)) {
    return std::nullopt;
  }
  Json ttft = features::feature_input_to_json(feature_row(req.request, req.pod));
  ttft["actual_ttft_ms"] = actual;
  ttft["actual_tpot_ms"] = 0.0;
  if (req.pod.latency) {
    ttft["predicted_ttft_ms"] = std::max(0.0, req.pod.latency->predicted_ttft_ms - phase);
    ttft["expected_ttft_ms"] = std::max(0.0, req.pod.latency->expected_ttft_ms - phase);
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

TrainingFeedback::TrainingFeedback(FeedbackOptions options) : options_(std::move(options)) {}

TrainingFeedback::~TrainingFeedback() { stop(); }

void TrainingFeedback::start() {
  if (options_.trainer_url.empty()) {
    spdlog::warn("no training server URL: training feedback is off");
    return;
  }
  thread_ = std::thread([this] {
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
  if (auto e = first_token_entry(req, options_.streaming_mode)) {
    enqueue(std::move(*e));
  }
}

void TrainingFeedback::on_completed(const CompletedRequest& done) {
  if (options_.trainer_url.empty()) {
    return;
  }
  for (auto& e : completion_entries(done, options_.streaming_mode)) {
    enqueue(std::move(e));
  }
}

void TrainingFeedback::enqueue(Json entry) {
  std::lock_guard lock(mu_);
  buffer_.push_back(std::move(entry));
  while (buffer_.size() > options_.max_buffer) {
    buffer_.pop_front();
    ++dropped_;
  }
}

void TrainingFeedback::flush() {
  std::vector<Json> batch;
  {
    std::lock_guard lock(mu_);
    batch.assign(std::make_move_iterator(buffer_.begin()), std::make_move_iterator(buffer_.end()));
    buffer_.clear();
  }
  if (batch.empty()) {
    return;
  }
  if (batch.size() > options_.max_per_flush) {
    // A uniform sample keeps the TTFT/TPOT mix in expectation.
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::shuffle(batch.begin(), batch.end(), rng);
    dropped_ += batch.size() - options_.max_per_flush;
    batch.resize(options_.max_per_flush);
  }
  auto url = http::parse_url(options_.trainer_url);
  if (!url) {
    dropped_ += batch.size();
    return;
  }
  const std::string body = Json{{"entries", batch}}.dump();
  http::HttpClient client(url->host, url->port, std::chrono::seconds(5));
  std::vector<http::Header> headers;
  if (!options_.admin_token.empty()) {
    headers.push_back({"Authorization", "Bearer " + options_.admin_token});
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto r = client.request("POST", url->base_path + "/add_training_data_bulk", body,
                            "application/json", headers);
    if (r.status == 202) {
      sent_ += batch.size();
      return;
    }
    spdlog::warn("training feedback flush failed ({}), attempt {}",
                 r.status == 0 ? r.error : std::to_string(r.status), attempt + 1);
  }
  ++failed_flushes_;
  dropped_ += batch.size();
}

}  // namespace llmd::epp
