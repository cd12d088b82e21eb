#include "epp/request/request_flow.h"

#include <random>

#include <spdlog/spdlog.h>

#include "epp/queue/admission_gate.h"
#include "epp/request/transport_policy.h"

namespace llmd::epp {
namespace {

// nginx's code for a request whose client went away before an answer.

uint64_t new_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

RequestFlow::Clock or_steady(RequestFlow::Clock clock) {
  if (clock) {
    return clock;
  }
  return [] { return std::chrono::steady_clock::now(); };
}

}  // namespace

std::shared_ptr<RequestFlow> RequestFlow::create(const FlowOptions& options,
                                                 const FlowServices& services, Post post,
                                                 Clock clock) {
  return std::shared_ptr<RequestFlow>(
      new RequestFlow(options, services, std::move(post), or_steady(std::move(clock))));
}

RequestFlow::RequestFlow(const FlowOptions& options, const FlowServices& services, Post post,
                         Clock clock)
    : options_(options),
      services_(services),
      post_(std::move(post)),
      clock_(std::move(clock)),
      context_(LifecycleServices{services.registry, services.sink, services.gate}, clock_()),
      own_rng_(services.rng != nullptr ? 0 : new_seed()),
      rng_(services.rng != nullptr ? *services.rng : own_rng_) {}

RequestFlow::~RequestFlow() {
  // An attempt nobody ended lost its client; timed on this flow's clock, not the wall clock.
  if (attempt_ && !attempt_->ended()) {
    attempt_->client_gone(now());
  }
}

void RequestFlow::set_endpoint_subset(std::vector<std::string> subset) {
  route_.endpoint_subset = std::move(subset);
}

void RequestFlow::begin(Decided decided) {
  decided_ = std::move(decided);
  config_ = services_.scheduler->generation();
}

void RequestFlow::start(std::string_view path, std::string_view body, const InboundHeaders& headers,
                        Decided decided) {
  begin(std::move(decided));
  inference_ = true;
  RequestDefaults defaults{options_.default_prediction, config_->objectives.get(),
                           options_.allow_debug_header};
  if (auto error = parse_openai_request(path, body, headers, defaults, parsed_)) {
    reject(400, *error);
    return;
  }
  if (parsed_.unknown_objective) {
    spdlog::debug("request {}: unknown objective '{}', using defaults", headers.request_id,
                  parsed_.request.objective);
  }
  parsed_.request.body_bytes = static_cast<int64_t>(body.size());
  std::vector<std::string> subset = std::move(route_.endpoint_subset);
  route_ = services_.scheduler->route(parsed_.request, *config_);
  route_.endpoint_subset = std::move(subset);
  parsed_.request.target_model = target_model(parsed_, route_.override_params);
  if (route_.upstream) {
    if (!options_.url_targets) {
      reject(503, "The model-level routing rule '" + route_.rule_id +
                      "' targets a URL, which gateway mode cannot reach");
      return;
    }
    // Forwarded as is: no queue, no scheduling, no retry target.
    PickResult pick;
    pick.ranked.push_back(*route_.upstream);
    on_picked(std::move(pick));
    return;
  }
  route_and_admit();
}

void RequestFlow::start_scheduled(SchedulingRequest request, int64_t max_tokens, Decided decided) {
  begin(std::move(decided));
  inference_ = true;
  parsed_.request = std::move(request);
  parsed_.request.target_model = parsed_.request.model;
  parsed_.max_tokens = max_tokens;
  route_and_admit();
}

void RequestFlow::start_passthrough(const InboundHeaders& headers, Decided decided) {
  begin(std::move(decided));
  parsed_.request.request_id = headers.request_id;
  parsed_.request.prediction_enabled = false;
  pick();
}

void RequestFlow::route_and_admit() {
  AdmissionTicket& ticket = context_.admission();
  if (!ticket.has_gate()) {
    pick();
    return;
  }
  if (!ticket.needs_service_estimate()) {
    enter_queue(0);
    return;
  }
  auto self = shared_from_this();
  services_.scheduler->estimate_service_ms_async(parsed_.request, parsed_.max_tokens, post_,
                                                 [self](double ms) {
                                                   if (self->gone_) {
                                                     self->decide({kClientClosedRequest, {}, {}});
                                                     return;
                                                   }
                                                   self->enter_queue(ms);
                                                 });
}

void RequestFlow::enter_queue(double service_ms) {
  AdmissionRequest ar;
  ar.pool = route_.pool;
  ar.strict_priority = parsed_.request.strict_priority;
  ar.priority = parsed_.request.priority;
  ar.slo_ttft_ms = parsed_.request.slo_ttft_ms;
  ar.predicted_service_ms = service_ms;
  ar.model = parsed_.request.model;
  ar.target_model = parsed_.request.target_model;
  ar.body_bytes = parsed_.request.body_bytes;
  // The ticket belongs to this flow: a wake-up that comes after the flow is gone finds the
  // ticket's state, not the flow, and gives the slot back itself.
  std::weak_ptr<RequestFlow> weak = weak_from_this();
  context_.admission().enter(ar, now(), post_, [weak](const AdmissionVerdict& v) {
    auto self = weak.lock();
    if (!self) {
      return;
    }
    if (v.status != 200) {
      self->reject(v.status, v.detail);
      return;
    }
    self->pick();
  });
}

void RequestFlow::pick() {
  // The request, route, generation and rng live in this flow, which the callback keeps.
  auto self = shared_from_this();
  services_.scheduler->pick_async(parsed_.request, route_, *config_, rng_, post_,
                                  [self](PickResult r) { self->on_picked(std::move(r)); });
}

void RequestFlow::on_picked(PickResult pick) {
  if (!decided_) {
    return;  // decided already (the client left)
  }
  Verdict verdict;
  if (pick.explanation) {
    verdict.decision = decision_header_value(*pick.explanation, kDecisionHeaderMaxCandidates,
                                             kDecisionHeaderMaxBytes);
  }
  if (gone_) {
    verdict.status = kClientClosedRequest;
    decide(std::move(verdict));
    return;
  }
  if (pick.status != 200 || pick.ranked.empty()) {
    verdict.status = pick.status != 200 ? pick.status : 503;
    verdict.detail = pick.detail.empty() ? "No ready endpoint" : pick.detail;
    context_.rejected(parsed_.request.model, verdict.status);
    decide(std::move(verdict));
    return;
  }
  ranked_ = std::move(pick.ranked);
  predictions_used_ = pick.predictions_used;
  if (inference_ && !parsed_.body.is_null()) {
    forwarded_body_ = upstream_body(parsed_, route_.override_params, options_.forward_priority);
    if (forwarded_body_) {
      parsed_.request.body_bytes = static_cast<int64_t>(forwarded_body_->size());
    }
    // Its last reader was upstream_body(): a long prompt's copy goes before the response.
    parsed_.body = nlohmann::json();
  }
  target_model_ =
      parsed_.request.target_model.empty() ? parsed_.request.model : parsed_.request.target_model;
  decide(std::move(verdict));
}

void RequestFlow::decide(Verdict verdict) {
  if (!decided_) {
    return;
  }
  auto decided = std::move(decided_);
  decided_ = nullptr;
  decided(verdict);
}

void RequestFlow::reject(int status, const std::string& detail) {
  context_.rejected(parsed_.request.model, status);
  decide(Verdict{status, detail, {}});
}

RequestFlow::Verdict RequestFlow::refuse(int status, std::string detail) {
  context_.rejected(parsed_.request.model, status);
  decided_ = nullptr;
  return Verdict{status, std::move(detail), {}};
}

const Endpoint* RequestFlow::next_pod() const {
  if (attempts_ == 0 && !ranked_.empty()) {
    return &ranked_[0];
  }
  if (attempts_ == 1 && retry_due_ && ranked_.size() > 1) {
    return &ranked_[1];
  }
  return nullptr;
}

void RequestFlow::dispatch() {
  const Endpoint* pod = next_pod();
  if (pod == nullptr) {
    return;
  }
  ++attempts_;
  retry_due_ = false;
  if (!inference_) {
    return;
  }
  attempt_.reset();  // the previous attempt ended already (pod_failed)
  response_bytes_ = 0;
  attempt_.emplace(context_.dispatch(parsed_.request, *pod, route_, target_model_,
                                     parsed_.max_tokens, attempts_, now()));
}

void RequestFlow::served_by(const std::string& address) {
  if (attempt_ && attempts_ == 1 && ranked_.size() > 1 && address == ranked_[1].address()) {
    pod_failed(502, true);
    dispatch();
  }
}

bool RequestFlow::response_bytes(std::string_view bytes) {
  if (!attempt_ || attempt_->ended()) {
    return true;
  }
  response_bytes_ += static_cast<int64_t>(bytes.size());
  if (parsed_.request.streaming) {
    scanner_.feed(bytes);
    if (scanner_.overlong()) {
      spdlog::warn("request {}: pod {} sent an SSE line over {} bytes: not an OpenAI stream",
                   request_id(), attempt_->record().pod.name(), SseScanner::kMaxLineBytes);
      return false;
    }
    attempt_->streamed(scanner_.content_chunks(), now());
  } else if (whole_.size() < options_.response_body_limit) {
    whole_.append(bytes);
  }
  return true;
}

void RequestFlow::tokens(int64_t content_chunks, TimePoint at) {
  if (attempt_) {
    attempt_->streamed(content_chunks, at);
  }
}

void RequestFlow::response_ended(int status) {
  if (!attempt_ || attempt_->ended()) {
    return;
  }
  ResponseFacts facts = response_facts(parsed_, scanner_, whole_);
  facts.response_bytes = response_bytes_;
  end_attempt(status, std::move(facts), now());
}

void RequestFlow::response_ended(int status, ResponseFacts facts, TimePoint at) {
  if (!attempt_ || attempt_->ended()) {
    return;
  }
  end_attempt(status, std::move(facts), at);
}

void RequestFlow::end_attempt(int status, ResponseFacts facts, TimePoint at) {
  if (status >= 500) {
    attempt_->pod_failed(status, false, at, std::move(facts));
  } else {
    attempt_->answered(status, at, std::move(facts));
  }
}

void RequestFlow::pod_failed(int status, bool before_response) {
  retry_due_ = before_response;
  if (attempt_) {
    attempt_->pod_failed(status, before_response, now());
  }
}

void RequestFlow::client_gone() {
  gone_ = true;
  if (context_.admission().waiting()) {
    context_.admission().leave();
    decide({kClientClosedRequest, "client disconnected while queued", {}});
    return;
  }
  if (attempt_) {
    attempt_->client_gone(now());
  } else {
    // No dispatch will follow: an admission slot goes back now, not when the scheduler lets
    // go of this flow.
    context_.admission().release();
  }
}

RequestFlow::Verdict RequestFlow::exhausted() {
  return refuse(502, "Upstream model server failed");
}

}  // namespace llmd::epp
