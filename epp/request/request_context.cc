#include "epp/request/request_context.h"

#include "epp/datastore/pod_registry.h"
#include "epp/features/feature_row.h"
#include "epp/queue/admission_gate.h"
#include "epp/request/transport_policy.h"

namespace llmd::epp {
namespace {

double ms_between(std::chrono::steady_clock::time_point from,
                  std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

RequestContext::RequestContext(const LifecycleServices& services, TimePoint received)
    : services_(services), received_(received), admission_(services.gate) {}

void RequestContext::rejected(const std::string& model, int status) {
  if (services_.sink != nullptr) {
    services_.sink->on_rejected(model, status);
  }
}

PodAttempt RequestContext::dispatch(const SchedulingRequest& request, const Endpoint& pod,
                                    const Route& route, const std::string& target_model,
                                    int64_t max_tokens, int number, TimePoint now) {
  PodAttempt attempt(*this, request, pod, route, target_model, max_tokens, number, now);
  // Only now does the dispatch show in the pod's bookkeeping: the queue's in-transit count
  // covered the request until here, so no slot is counted twice or not at all.
  admission_.release();
  return attempt;
}

PodAttempt::PodAttempt(RequestContext& owner, const SchedulingRequest& request, const Endpoint& pod,
                       const Route& route, const std::string& target_model, int64_t max_tokens,
                       int number, TimePoint now)
    : services_(&owner.services()), pool_(route.pool), max_tokens_(max_tokens), dispatched_(now) {
  done_.request = request;
  done_.prompt_chars = static_cast<int64_t>(request.prompt_text.size());
  // The record does not keep the prompt: its readers want the continuation prompt (the prompt
  // followed by the answer), and a long prompt held for the whole response would be one more
  // copy of up to --max-body-bytes per request.
  std::string().swap(done_.request.prompt_text);  // (assigning "" would keep the capacity)
  done_.pod = pod;
  done_.attempts = number;
  done_.target_model = target_model;
  done_.rule_id = route.rule_id;
  done_.target = route.target;
  done_.upstream_url = route.upstream.has_value();
  done_.dispatch_delay_ms = ms_between(owner.received(), now);
  if (is_pod()) {
    uncached_tokens_ = uncached_prompt_tokens(request, pod);
    if (services_->registry != nullptr && pod.info->live) {
      live_ = pod.info->live;
      live_->on_dispatch(uncached_tokens_);
      // Due at the bound without the lateness already added to it: lateness is measured
      // against the model (with its per-pod corrections), or it would chase itself. A model
      // that could not tell the pods apart (model_ttft_ms 0: e.g. the untrained constant)
      // makes no promise to be late against.
      const bool comparable = pod.latency && pod.latency->model_ttft_ms > 0;
      const double bound_ms =
          comparable ? pod.latency->predicted_ttft_ms - pod.latency->ttft_late_ms : 0.0;
      if (request.streaming && bound_ms > 0) {
        wait_ = live_->first_token_waits().add(
            now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double, std::milli>(bound_ms)));
      }
    }
  }
  if (services_->sink != nullptr) {
    services_->sink->on_dispatched(done_);
  }
}

PodAttempt::PodAttempt(PodAttempt&& other) noexcept
    : services_(other.services_),
      pool_(std::move(other.pool_)),
      done_(std::move(other.done_)),
      uncached_tokens_(other.uncached_tokens_),
      max_tokens_(other.max_tokens_),
      dispatched_(other.dispatched_),
      live_(std::move(other.live_)),
      wait_(other.wait_),
      last_token_(other.last_token_),
      content_chunks_(other.content_chunks_),
      ended_(other.ended_) {
  other.ended_ = true;  // the moved-from ticket owns nothing
}

PodAttempt::~PodAttempt() {
  if (!ended_) {
    client_gone(std::chrono::steady_clock::now());
  }
}

void PodAttempt::stop_waiting() {
  if (wait_) {
    live_->first_token_waits().remove(*wait_);
    wait_.reset();
  }
}

void PodAttempt::first_token(TimePoint now) {
  if (ended_ || done_.first_token) {
    return;
  }
  done_.first_token = true;
  stop_waiting();
  done_.ttft_ms = ms_between(dispatched_, now);
  last_token_ = now;
  if (live_) {
    live_->step_clock().on_tokens(now, std::nullopt, 1);
    live_->on_first_token(uncached_tokens_, max_tokens_);
    if (done_.pod.latency && done_.pod.latency->model_ttft_ms > 0) {
      // The model predicts the average over the step phase: compare it with the TTFT the
      // request would have had arriving at an average moment.
      const auto& l = *done_.pod.latency;
      live_->observe_ttft(l.model_ttft_ms, l.unphased_ttft_ms, done_.phase_neutral_ttft_ms(), now);
    }
  }
  if (services_->sink != nullptr) {
    services_->sink->on_first_token(done_);
  }
  if (is_pod() && services_->gate != nullptr) {
    services_->gate->on_first_token(pool_);
  }
}

void PodAttempt::streamed(int64_t content_chunks, TimePoint now) {
  if (ended_ || content_chunks <= content_chunks_) {
    return;
  }
  int64_t fresh = content_chunks - content_chunks_;
  content_chunks_ = content_chunks;
  if (!done_.first_token) {
    first_token(now);
    --fresh;
  }
  if (fresh > 0 && last_token_) {
    if (live_) {
      live_->step_clock().on_tokens(now, ms_between(*last_token_, now), fresh);
    }
    last_token_ = now;
  }
}

void PodAttempt::answered(int status, TimePoint now, ResponseFacts facts) {
  if (!ended_ && is_pod() && services_->registry != nullptr && status < 500) {
    services_->registry->on_pod_success(done_.pod.name());
  }
  end(status < 400, status, now, std::move(facts));
}

void PodAttempt::pod_failed(int status, bool before_response, TimePoint now, ResponseFacts facts) {
  if (ended_) {
    return;
  }
  done_.before_response = before_response;
  if (is_pod() && services_->registry != nullptr) {
    services_->registry->on_pod_failure(done_.pod.name(), now);
  }
  end(false, status, now, std::move(facts));
}

void PodAttempt::client_gone(TimePoint now) {
  if (ended_) {
    return;
  }
  done_.client_aborted = true;
  end(false, kClientClosedRequest, now, {});
}

void PodAttempt::end(bool success, int status, TimePoint now, ResponseFacts&& facts) {
  if (ended_) {
    return;
  }
  ended_ = true;
  stop_waiting();
  if (live_) {
    live_->on_finished(uncached_tokens_, max_tokens_, done_.first_token);
  }
  // The one place the end-to-end time (and a non-streamed TTFT) is written.
  done_.e2e_ms = facts.exact_e2e_ms.value_or(ms_between(dispatched_, now));
  if (facts.exact_ttft_ms) {
    done_.ttft_ms = *facts.exact_ttft_ms;
  } else if (facts.ttft_is_e2e) {
    done_.ttft_ms = done_.e2e_ms;
  }
  done_.completion_tokens = facts.completion_tokens;
  done_.cached_tokens = facts.cached_tokens;
  done_.prompt_tokens = facts.prompt_tokens;
  done_.response_bytes = facts.response_bytes;
  done_.continuation_prompt = std::move(facts.continuation_prompt);
  done_.success = success;
  done_.status = status;
  if (success && live_ && done_.pod.latency && done_.pod.latency->model_tpot_ms > 0) {
    if (auto tpot = done_.measured_tpot_ms()) {
      live_->observe_tpot(done_.pod.latency->model_tpot_ms, done_.pod.latency->predicted_tpot_ms,
                          *tpot, now);
    }
  }
  if (services_->sink != nullptr) {
    services_->sink->on_completed(done_);
  }
  if (is_pod() && services_->gate != nullptr) {
    services_->gate->on_finished(pool_);
  }
}

}  // namespace llmd::epp
