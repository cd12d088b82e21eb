#include "epp/extproc/ext_proc_stream.h"

#include "epp/request/transport_policy.h"

#include "common/http/body_budget.h"

#include <algorithm>
#include <cctype>

#include <spdlog/spdlog.h>

namespace llmd::epp::extproc {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kServed[] = "x-gateway-destination-endpoint-served";
constexpr char kLbNamespace[] = "envoy.lb";
constexpr char kSubsetNamespace[] = "envoy.lb.subset_hint";
constexpr char kSubsetKey[] = "x-gateway-destination-endpoint-subset";

std::string value_of(const pb::HeaderValue& h) {
  return h.raw_value().empty() ? h.value() : h.raw_value();
}

// HTTP/2 header names are lowercase (RFC 9113 section 8.2.1); Envoy refuses others.
void set_header(pb::HeaderMutation& m, std::string key, const std::string& value) {
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
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
    out += e.address();
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

FlowOptions flow_options(const ExtProcOptions& o) {
  FlowOptions f;
  f.default_prediction = o.default_prediction;
  f.forward_priority = o.forward_priority;
  f.allow_debug_header = o.allow_debug_header;
  f.url_targets = false;  // the gateway sends to the pool's endpoints only
  f.response_body_limit = o.body_limit;
  return f;
}

constexpr char kOverBudget[] = "Server is at its request-body memory budget, retry";

}  // namespace

ExtProcStream::ExtProcStream(const ExtProcOptions& options, const ExtProcServices& services,
                             Emit emit, Post post)
    : options_(options),
      services_(services),
      flow_options_(flow_options(options)),
      emit_(std::move(emit)),
      post_(std::move(post)) {}

ExtProcStream::~ExtProcStream() {
  cancel();
  drop_body();
}

void ExtProcStream::drop_body() {
  body_ = std::string();
  if (budgeted_ > 0) {
    services_.body_budget->give_back(budgeted_);
    budgeted_ = 0;
  }
}

bool ExtProcStream::on_body_over_budget() {
  if (phase_ != Phase::kRequestBody || !flow_) {
    return false;
  }
  refuse(503, kOverBudget);
  return true;
}

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
      finish_response();
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
  flow_ = RequestFlow::create(flow_options_,
                              FlowServices{services_.scheduler, services_.registry, services_.sink,
                                           services_.gate, nullptr},
                              post_);
  if (const auto* subset = options_.endpoint_subset_filter
                               ? metadata_field(message, kSubsetNamespace, kSubsetKey)
                               : nullptr) {
    std::vector<std::string> hint;
    for (const auto& v : subset->list_value().values()) {
      hint.push_back(v.string_value());
    }
    if (hint.empty()) {
      hint.push_back("");  // an empty hint allows no endpoint: 503 (protocol)
    }
    flow_->set_endpoint_subset(std::move(hint));
  }
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
  const std::size_t n = body.body().size();
  if (services_.body_budget != nullptr) {
    if (!services_.body_budget->try_take(n)) {
      refuse(503, kOverBudget);
      return;
    }
    budgeted_ += n;
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
  if (auto standby = refuse_when_not_serving(*flow_, options_.not_serving)) {
    emit_refusal(*standby);  // the gateway's next try may reach the leader
    return;
  }
  const InboundHeaders inbound =
      read_inbound_headers([this](std::string_view name) -> std::optional<std::string> {
        for (const auto& [k, v] : headers_) {
          if (k == name) {
            return v;
          }
        }
        return std::nullopt;
      });
  // The flow calls back on this strand (or inline); a stream that ended meanwhile ignores it.
  std::weak_ptr<ExtProcStream> weak = weak_from_this();
  auto decided = [weak](const RequestFlow::Verdict& v) {
    if (auto self = weak.lock()) {
      self->on_decided(v);
    }
  };
  if (is_inference_request(method_, path_)) {
    flow_->start(path_, body_, inbound, std::move(decided));
  } else {
    // Anything else on the route (GET /v1/models, ...): any ready pod, no bookkeeping (it is
    // not an inference request: no prediction, no sample).
    flow_->start_passthrough(inbound, std::move(decided));
  }
}

void ExtProcStream::on_decided(const RequestFlow::Verdict& verdict) {
  if (phase_ != Phase::kScheduling) {
    return;
  }
  decision_ = verdict.decision;
  if (verdict.status != 200) {
    emit_refusal(verdict);
    return;
  }
  flow_->dispatch();
  phase_ = Phase::kResponse;
  const std::vector<Endpoint>& ranked = flow_->ranked();
  const std::optional<std::string>& rewritten = flow_->forwarded_body();
  const std::string destination = destination_list(ranked);
  spdlog::debug("ext_proc request {} {} -> {}", flow_->request_id(), path_, destination);
  if (observability_) {
    return;
  }
  pb::HeaderMutation mutation;
  set_header(mutation, kDestinationHeader, destination);
  if (rewritten) {
    set_header(mutation, "content-length", std::to_string(rewritten->size()));
  }
  google::protobuf::Struct metadata;
  (*(*metadata.mutable_fields())[kLbNamespace]
        .mutable_struct_value()
        ->mutable_fields())[kDestinationHeader]
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
    drop_body();
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
  drop_body();
}

void ExtProcStream::refuse(int status, const std::string& detail) {
  emit_refusal(flow_->refuse(status, detail));
}

void ExtProcStream::emit_refusal(const RequestFlow::Verdict& verdict) {
  phase_ = Phase::kDone;
  drop_body();
  if (observability_) {
    return;
  }
  pb::ProcessingResponse r;
  auto* immediate = r.mutable_immediate_response();
  immediate->mutable_status()->set_code(verdict.status);
  RefusalAnswer answer =
      refusal_answer(verdict.status, verdict.detail, flow_->request_id(), decision_);
  for (const auto& [name, value] : answer.headers) {
    set_header(*immediate->mutable_headers(), name, value);
  }
  immediate->set_body(std::move(answer.body));
  immediate->set_details("llmd_epp_" + std::to_string(verdict.status));
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
  if (const auto* served = metadata_field(message, kLbNamespace, kServed)) {
    flow_->served_by(served->string_value());  // the fallback: the primary failed first
  }
  if (!observability_) {
    pb::ProcessingResponse r;
    auto* common = r.mutable_response_headers()->mutable_response();
    const PodAttempt* attempt = flow_->attempt();
    const std::string destination = attempt ? attempt->record().pod.address() : std::string();
    const std::string request_id = attempt ? flow_->request_id() : std::string();
    for (const auto& [name, value] : response_headers(destination, request_id, decision_)) {
      set_header(*common->mutable_header_mutation(), name, value);
    }
    emit_(std::move(r));
  }
  if (message.response_headers().end_of_stream() || response_body_none_) {
    finish_response();  // no body follows, or the gateway will not send it
  }
}

void ExtProcStream::on_response_body(const pb::HttpBody& body) {
  if (phase_ != Phase::kResponse) {
    return;
  }
  std::string_view relayed = body.body();
  if (!response_broken_ && !flow_->response_bytes(body.body())) {
    // The pod broke the protocol: the client's stream ends with the error event, the rest of
    // the pod's bytes are dropped, and the attempt is the pod's failure.
    response_broken_ = true;
    flow_->pod_failed(502, false);
    broken_tail_ = mid_stream_error_event();
    relayed = broken_tail_;
  } else if (response_broken_) {
    relayed = {};
  }
  if (!observability_) {
    pb::ProcessingResponse r;
    auto* common = r.mutable_response_body()->mutable_response();
    if (stream_response_) {
      auto* streamed = common->mutable_body_mutation()->mutable_streamed_response();
      streamed->set_body(std::string(relayed));
      streamed->set_end_of_stream(body.end_of_stream());
    }
    emit_(std::move(r));
  }
  if (body.end_of_stream()) {
    finish_response();
  }
}

void ExtProcStream::finish_response() {
  if (phase_ != Phase::kResponse) {
    return;
  }
  phase_ = Phase::kDone;
  flow_->response_ended(response_status_ == 0 ? 200 : response_status_);
}

void ExtProcStream::cancel() {
  if (phase_ == Phase::kResponse && response_status_ != 0) {
    // The gateway ended the exchange after the pod's response began without showing us its
    // end (a response body mode of NONE, or no end_of_stream): the pod answered.
    finish_response();
  }
  phase_ = Phase::kDone;
  if (flow_) {
    // A queued request leaves the queue; an attempt that did not end lost its client (499).
    flow_->client_gone();
  }
}

}  // namespace llmd::epp::extproc
