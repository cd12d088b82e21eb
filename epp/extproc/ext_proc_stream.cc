#include "epp/extproc/ext_proc_stream.h"

#include <algorithm>
#include <random>

#include <spdlog/spdlog.h>

#include "epp/proxy/admission_gate.h"

namespace llmd::epp::extproc {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kDestination[] = "x-gateway-destination-endpoint";
constexpr char kServed[] = "x-gateway-destination-endpoint-served";
constexpr char kLbNamespace[] = "envoy.lb";
constexpr char kSubsetNamespace[] = "envoy.lb.subset_hint";
constexpr char kSubsetKey[] = "x-gateway-destination-endpoint-subset";

uint64_t new_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

std::string value_of(const pb::HeaderValue& h) {
  return h.raw_value().empty() ? h.value() : h.raw_value();
}

void set_header(pb::HeaderMutation& m, const std::string& key, const std::string& value) {
  auto* option = m.add_set_headers();
  option->mutable_header()->set_key(key);
  option->mutable_header()->set_raw_value(value);
  option->set_append_action(pb::HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
}

// "primary,fallback": the gateway tries them in order.
std::string destination_list(const std::vector<Endpoint>& ranked) {
  std::string out;
  for (const auto& e : ranked) {
    out += out.empty() ? "" : ",";
    out += e.address;
  }
  return out;
}

const google::protobuf::Value* metadata_field(const pb::ProcessingRequest& message,
                                              const std::string& ns, const std::string& key) {
  if (!message.has_metadata_context()) {
    return nullptr;
  }
  const auto& filters = message.metadata_context().filter_metadata();
  auto it = filters.find(ns);
  if (it == filters.end()) {
    return nullptr;
  }
  auto field = it->second.fields().find(key);
  return field == it->second.fields().end() ? nullptr : &field->second;
}

}  // namespace

ExtProcStream::ExtProcStream(const ExtProcOptions& options, const ExtProcServices& services,
                             Emit emit, Post post)
    : options_(options), services_(services), emit_(std::move(emit)), post_(std::move(post)),
      rng_(new_seed()) {}

ExtProcStream::~ExtProcStream() { cancel(); }

std::string ExtProcStream::header(const std::string& name) const {
  for (const auto& [k, v] : headers_) {
    if (k == name) {
      return v;
    }
  }
  return {};
}

void ExtProcStream::on_message(const pb::ProcessingRequest& message) {
  if (phase_ == Phase::kDone) {
    return;
  }
  if (message.has_protocol_config()) {
    const auto& pc = message.protocol_config();
    hold_headers_ = pc.request_body_mode() == pb::FULL_DUPLEX_STREAMED;
    stream_response_ = pc.response_body_mode() == pb::FULL_DUPLEX_STREAMED;
    response_body_none_ = pc.response_body_mode() == pb::NONE;
  }
  observability_ = message.observability_mode();
  switch (message.request_case()) {
    case pb::ProcessingRequest::kRequestHeaders:
      on_request_headers(message);
      break;
    case pb::ProcessingRequest::kRequestBody:
      on_request_body(message.request_body());
      break;
    case pb::ProcessingRequest::kRequestTrailers: {
      pb::ProcessingResponse r;
      r.mutable_request_trailers();
      emit_(std::move(r));
      if (phase_ == Phase::kRequestBody) {
        start_scheduling();  // trailers end a body that did not say end_of_stream
      }
      break;
    }
    case pb::ProcessingRequest::kResponseHeaders:
      on_response_headers(message);
      break;
    case pb::ProcessingRequest::kResponseBody:
      on_response_body(message.response_body());
      break;
    case pb::ProcessingRequest::kResponseTrailers: {
      pb::ProcessingResponse r;
      r.mutable_response_trailers();
      emit_(std::move(r));
      finish_response(Clock::now());
      break;
    }
    case pb::ProcessingRequest::REQUEST_NOT_SET:
      break;
  }
}

void ExtProcStream::on_request_headers(const pb::ProcessingRequest& message) {
  if (phase_ != Phase::kRequestHeaders) {
    return;
  }
  const auto& h = message.request_headers();
  for (const auto& v : h.headers().headers()) {
    std::string key = v.key();
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    headers_.emplace_back(std::move(key), value_of(v));
  }
  path_ = header(":path");
  path_ = path_.substr(0, path_.find('?'));
  method_ = header(":method");
  if (const auto* subset = metadata_field(message, kSubsetNamespace, kSubsetKey)) {
    for (const auto& v : subset->list_value().values()) {
      subset_.push_back(v.string_value());
    }
    if (subset_.empty()) {
      subset_.push_back("");  // an empty hint allows no endpoint: 503 (protocol)
    }
  }
  context_ = std::make_unique<RequestContext>(
      LifecycleServices{services_.registry, services_.sink, services_.gate},
      Clock::now());
  phase_ = Phase::kRequestBody;
  if (h.end_of_stream()) {
    start_scheduling();  // no body follows
    return;
  }
  if (!hold_headers_ && !observability_) {
    // BUFFERED: the gateway sends the body only after this answer; the pick goes with the
    // answer to the body.
    pb::ProcessingResponse r;
    r.mutable_request_headers();
    emit_(std::move(r));
  }
}

void ExtProcStream::on_request_body(const pb::HttpBody& body) {
  if (phase_ != Phase::kRequestBody) {
    return;
  }
  if (body_.size() + body.body().size() > options_.body_limit) {
    refuse(413, "Request body too large");
    return;
  }
  body_ += body.body();
  if (body.end_of_stream()) {
    start_scheduling();
  } else if (!hold_headers_ && !observability_) {
    pb::ProcessingResponse r;  // STREAMED: every chunk is answered (and passed on)
    r.mutable_request_body();
    emit_(std::move(r));
  }
}

void ExtProcStream::start_scheduling() {
  phase_ = Phase::kScheduling;
  if (options_.not_serving) {
    if (auto reason = options_.not_serving()) {
      refuse(503, *reason);  // a standby: the gateway's next try may reach the leader
      return;
    }
  }
  config_ = services_.scheduler->generation();
  const InboundHeaders inbound = read_inbound_headers(
      [this](std::string_view name) -> std::optional<std::string> {
        for (const auto& [k, v] : headers_) {
          if (k == name) {
            return v;
          }
        }
        return std::nullopt;
      });
  const bool inference =
      method_ == "POST" && (path_ == "/v1/completions" || path_ == "/v1/chat/completions");
  if (!inference) {
    // Anything else on the route (GET /v1/models, ...): any ready pod, no bookkeeping (it is
    // not an inference request: no prediction, no sample).
    parsed_.request.request_id = inbound.request_id;
    parsed_.request.prediction_enabled = false;
    route_.endpoint_subset = subset_;
    pick();
    return;
  }
  RequestDefaults defaults{options_.default_prediction, config_->objectives.get(),
                           options_.allow_debug_header};
  if (auto error = parse_openai_request(path_, body_, inbound, defaults, parsed_)) {
    refuse(400, *error);
    return;
  }
  route_ = services_.scheduler->route(parsed_.request, *config_);
  if (route_.upstream) {
    // The gateway sends the request to the pool's endpoints only.
    refuse(503, "The model-level routing rule '" + route_.rule_id +
                    "' targets a URL, which gateway mode cannot reach");
    return;
  }
  route_.endpoint_subset = subset_;
  admit_then_pick();
}

void ExtProcStream::admit_then_pick() {
  AdmissionGate* gate = services_.gate;
  if (gate == nullptr || !gate->enabled()) {
    pick();
    return;
  }
  std::weak_ptr<ExtProcStream> weak = weak_from_this();
  auto enter = [this, weak, gate](double service_ms) {
    AdmissionRequest ar;
    ar.pool = route_.pool;
    ar.strict_priority = parsed_.request.strict_priority;
    ar.priority = parsed_.request.priority;
    ar.slo_ttft_ms = parsed_.request.slo_ttft_ms;
    ar.predicted_service_ms = service_ms;
    const std::string pool = route_.pool;
    auto ticket = gate->enter(ar, [weak, gate, pool, post = post_](AdmissionVerdict v) {
      post([weak, gate, pool, v] {
        auto self = weak.lock();
        if (!self || self->phase_ != Phase::kScheduling || !self->queue_ticket_) {
          if (v.status == 200) {
            gate->on_scheduled(pool);  // the stream ended first: the slot goes back
          }
          return;
        }
        self->queue_ticket_.reset();
        if (v.status != 200) {
          self->refuse(v.status, v.detail);
          return;
        }
        self->context_->admitted(pool);
        self->pick();
      });
    });
    if (!ticket.queued) {
      if (ticket.verdict.status != 200) {
        refuse(ticket.verdict.status, ticket.verdict.detail);
        return;
      }
      context_->admitted(route_.pool);
      pick();
      return;
    }
    queue_ticket_ = ticket.id;
  };
  if (!gate->needs_service_estimate()) {
    enter(0);
    return;
  }
  services_.scheduler->estimate_service_ms_async(
      parsed_.request, parsed_.max_tokens, post_, [weak, enter](double ms) {
        if (auto self = weak.lock(); self && self->phase_ == Phase::kScheduling) {
          enter(ms);
        }
      });
}

void ExtProcStream::pick() {
  // The request, route, generation and rng live in this stream, which the callback keeps.
  auto self = shared_from_this();
  services_.scheduler->pick_async(parsed_.request, route_, *config_, rng_, post_,
                                  [self](PickResult r) {
                                    if (self->phase_ == Phase::kScheduling) {
                                      self->on_picked(std::move(r));
                                    }
                                  });
}

void ExtProcStream::on_picked(PickResult pick) {
  if (pick.explanation) {
    decision_ = decision_header_value(*pick.explanation, kDecisionHeaderMaxCandidates,
                                      kDecisionHeaderMaxBytes);
  }
  if (pick.status != 200 || pick.ranked.empty()) {
    refuse(pick.status != 200 ? pick.status : 503,
           pick.detail.empty() ? "No ready endpoint" : pick.detail);
    return;
  }
  ranked_ = std::move(pick.ranked);
  const bool inference = !parsed_.body.is_null();
  std::optional<std::string> rewritten;
  if (inference) {
    rewritten = upstream_body(parsed_, route_.override_params, options_.forward_priority);
    attempt_.emplace(context_->dispatch(parsed_.request, ranked_[0], route_,
                                        target_model(parsed_, route_.override_params),
                                        parsed_.max_tokens, 1, Clock::now()));
  }
  phase_ = Phase::kResponse;
  const std::string destination = destination_list(ranked_);
  spdlog::debug("ext_proc request {} {} -> {}", parsed_.request.request_id, path_, destination);
  if (observability_) {
    return;
  }
  pb::HeaderMutation mutation;
  set_header(mutation, kDestination, destination);
  if (rewritten) {
    set_header(mutation, "content-length", std::to_string(rewritten->size()));
  }
  google::protobuf::Struct metadata;
  (*(*metadata.mutable_fields())[kLbNamespace].mutable_struct_value()->mutable_fields())
      [kDestination]
          .set_string_value(destination);
  const std::string& body = rewritten ? *rewritten : body_;
  const bool has_body = !body_.empty();
  if (hold_headers_ || !has_body) {
    // FULL_DUPLEX_STREAMED (or no body): the pick goes with the held headers answer, then the
    // body follows as one streamed chunk.
    pb::ProcessingResponse headers;
    auto* common = headers.mutable_request_headers()->mutable_response();
    *common->mutable_header_mutation() = mutation;
    common->set_clear_route_cache(true);
    *headers.mutable_dynamic_metadata() = metadata;
    emit_(std::move(headers));
    if (has_body && hold_headers_) {
      pb::ProcessingResponse chunk;
      auto* streamed = chunk.mutable_request_body()
                           ->mutable_response()
                           ->mutable_body_mutation()
                           ->mutable_streamed_response();
      streamed->set_body(body);
      streamed->set_end_of_stream(true);
      emit_(std::move(chunk));
    }
    return;
  }
  // BUFFERED: header mutations apply with the body answer.
  pb::ProcessingResponse answer;
  auto* common = answer.mutable_request_body()->mutable_response();
  *common->mutable_header_mutation() = mutation;
  common->set_clear_route_cache(true);
  if (rewritten) {
    common->mutable_body_mutation()->set_body(*rewritten);
  }
  *answer.mutable_dynamic_metadata() = metadata;
  emit_(std::move(answer));
}

void ExtProcStream::refuse(int status, const std::string& detail) {
  if (context_) {
    context_->rejected(parsed_.request.model, status);
  }
  phase_ = Phase::kDone;
  if (observability_) {
    return;
  }
  pb::ProcessingResponse r;
  auto* immediate = r.mutable_immediate_response();
  immediate->mutable_status()->set_code(status);
  set_header(*immediate->mutable_headers(), "content-type", "application/json");
  if (status == 429 || status == 503) {
    set_header(*immediate->mutable_headers(), "retry-after", "1");
  }
  if (!parsed_.request.request_id.empty()) {
    set_header(*immediate->mutable_headers(), "x-request-id", parsed_.request.request_id);
  }
  if (!decision_.empty()) {
    set_header(*immediate->mutable_headers(), kDecisionHeader, decision_);
  }
  immediate->set_body(openai_error_body(status, detail));
  immediate->set_details("llmd_epp_" + std::to_string(status));
  emit_(std::move(r));
}

void ExtProcStream::on_response_headers(const pb::ProcessingRequest& message) {
  if (phase_ != Phase::kResponse) {
    return;
  }
  for (const auto& v : message.response_headers().headers().headers()) {
    if (v.key() == ":status") {
      response_status_ = std::atoi(value_of(v).c_str());
    }
  }
  if (attempt_ && ranked_.size() > 1) {
    const auto* served = metadata_field(message, kLbNamespace, kServed);
    if (served != nullptr && served->string_value() == ranked_[1].address) {
      // The primary failed before answering and the gateway went on to the fallback.
      const auto now = Clock::now();
      attempt_->pod_failed(502, true, now);
      attempt_.emplace(context_->dispatch(parsed_.request, ranked_[1], route_,
                                          attempt_->record().target_model, parsed_.max_tokens, 2,
                                          now));
    }
  }
  if (!observability_) {
    pb::ProcessingResponse r;
    auto* common = r.mutable_response_headers()->mutable_response();
    if (attempt_) {
      set_header(*common->mutable_header_mutation(), kDestination,
                 attempt_->record().pod.address);
      set_header(*common->mutable_header_mutation(), "x-request-id",
                 parsed_.request.request_id);
    }
    if (!decision_.empty()) {
      set_header(*common->mutable_header_mutation(), kDecisionHeader, decision_);
    }
    emit_(std::move(r));
  }
  if (message.response_headers().end_of_stream() || response_body_none_) {
    finish_response(Clock::now());  // no body follows, or the gateway will not send it
  }
}

void ExtProcStream::on_response_body(const pb::HttpBody& body) {
  if (phase_ != Phase::kResponse) {
    return;
  }
  if (attempt_) {
    if (parsed_.request.streaming) {
      scanner_.feed(body.body());
      attempt_->streamed(scanner_.content_chunks(), Clock::now());
    } else if (whole_.size() < options_.body_limit) {
      whole_.append(body.body());
    }
  }
  if (!observability_) {
    pb::ProcessingResponse r;
    auto* common = r.mutable_response_body()->mutable_response();
    if (stream_response_) {
      auto* streamed = common->mutable_body_mutation()->mutable_streamed_response();
      streamed->set_body(body.body());
      streamed->set_end_of_stream(body.end_of_stream());
    }
    emit_(std::move(r));
  }
  if (body.end_of_stream()) {
    finish_response(Clock::now());
  }
}

void ExtProcStream::finish_response(Clock::time_point now) {
  if (phase_ != Phase::kResponse) {
    return;
  }
  phase_ = Phase::kDone;
  if (!attempt_) {
    return;
  }
  CompletedRequest& done = attempt_->record();
  done.e2e_ms = std::chrono::duration<double, std::milli>(now - attempt_->dispatched()).count();
  record_response(done, parsed_, scanner_, whole_);
  if (response_status_ >= 500) {
    attempt_->pod_failed(response_status_, false, now);
  } else {
    attempt_->answered(response_status_ == 0 ? 200 : response_status_, now);
  }
}

void ExtProcStream::cancel() {
  if (phase_ == Phase::kResponse && response_status_ != 0) {
    // The gateway ended the exchange after the pod's response began without showing us its
    // end (a response body mode of NONE, or no end_of_stream): the pod answered.
    finish_response(Clock::now());
  }
  if (queue_ticket_ && services_.gate != nullptr) {
    services_.gate->cancel(*queue_ticket_);
    queue_ticket_.reset();
  }
  phase_ = Phase::kDone;
  attempt_.reset();  // an attempt that did not end: the client went away (499)
  context_.reset();  // an admission slot no dispatch took goes back
}

}  // namespace llmd::epp::extproc
