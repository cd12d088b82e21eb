#pragma once
// Gateway mode in end-to-end tests: this test plays Envoy. It speaks the ext_proc protocol to
// the real EPP over gRPC (the same message definitions, so the field numbers are Envoy's),
// forwards the request to the pod the EPP picked and streams the pod's answer back through the
// response phase. ExtProcStack starts a Stack with --ext-proc-port.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "epp/extproc/external_processor.grpc.pb.h"
#include "health.grpc.pb.h"
#include "tests/e2e/stack_fixture.h"
#include "tests/epp/extproc/ext_proc_messages.h"

namespace llmd::testing {

namespace pb = envoy::service::ext_proc::v3;

inline std::string lb_metadata(const pb::ProcessingResponse& r, const std::string& key) {
  const auto& ns = r.dynamic_metadata().fields();
  auto it = ns.find("envoy.lb");
  if (it == ns.end()) {
    return {};
  }
  auto f = it->second.struct_value().fields().find(key);
  return f == it->second.struct_value().fields().end() ? std::string{} : f->second.string_value();
}

// One HTTP request through the "gateway": one ext_proc stream.
class GatewayExchange {
 public:
  GatewayExchange(pb::ExternalProcessor::Stub& stub) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stream_ = stub.Process(&context_);
  }
  bool send(const pb::ProcessingRequest& r) { return stream_->Write(r); }
  std::optional<pb::ProcessingResponse> receive() {
    pb::ProcessingResponse r;
    if (!stream_->Read(&r)) {
      return std::nullopt;
    }
    return r;
  }
  grpc::Status finish() {
    stream_->WritesDone();
    pb::ProcessingResponse extra;
    while (stream_->Read(&extra)) {
    }
    return stream_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::ProcessingRequest, pb::ProcessingResponse>> stream_;
};

inline pb::ProcessingRequest request_headers(const std::string& path, bool full_duplex,
                                             bool end_of_stream = false,
                                             std::vector<std::string> subset = {}) {
  pb::ProcessingRequest r;
  auto* h = r.mutable_request_headers();
  *h->mutable_headers()->add_headers() = header(":method", end_of_stream ? "GET" : "POST");
  *h->mutable_headers()->add_headers() = header(":path", path);
  *h->mutable_headers()->add_headers() = header(":authority", "gateway.local");
  *h->mutable_headers()->add_headers() = header("content-type", "application/json");
  h->set_end_of_stream(end_of_stream);
  if (full_duplex) {
    r.mutable_protocol_config()->set_request_body_mode(pb::FULL_DUPLEX_STREAMED);
    r.mutable_protocol_config()->set_response_body_mode(pb::FULL_DUPLEX_STREAMED);
  }
  if (!subset.empty()) {
    auto& ns = (*r.mutable_metadata_context()->mutable_filter_metadata())["envoy.lb.subset_hint"];
    auto* list =
        (*ns.mutable_fields())["x-gateway-destination-endpoint-subset"].mutable_list_value();
    for (const auto& s : subset) {
      list->add_values()->set_string_value(s);
    }
  }
  return r;
}

inline pb::ProcessingRequest body_chunk(const std::string& bytes, bool end, bool response = false) {
  pb::ProcessingRequest r;
  auto* b = response ? r.mutable_response_body() : r.mutable_request_body();
  b->set_body(bytes);
  b->set_end_of_stream(end);
  return r;
}

inline pb::ProcessingRequest response_headers(int status, const std::string& served) {
  pb::ProcessingRequest r;
  *r.mutable_response_headers()->mutable_headers()->add_headers() =
      header(":status", std::to_string(status));
  *r.mutable_response_headers()->mutable_headers()->add_headers() =
      header("content-type", "text/event-stream");
  auto& ns = (*r.mutable_metadata_context()->mutable_filter_metadata())["envoy.lb"];
  (*ns.mutable_fields())["x-gateway-destination-endpoint-served"].set_string_value(served);
  return r;
}

// Splits an SSE body into its events (what the gateway would pass on chunk by chunk).
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    auto end = body.find("\n\n", pos);
    end = end == std::string::npos ? body.size() : end + 2;
    out.push_back(body.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

class ExtProcStack : public StackTest {
 protected:
  void start_gateway_mode(StackOptions o = {}) {
    ext_proc_port_ = free_port();
    o.epp_args.insert(o.epp_args.end(), {"--ext-proc-port", std::to_string(ext_proc_port_)});
    start(std::move(o));
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(ext_proc_port_),
                                   grpc::InsecureChannelCredentials());
    ASSERT_TRUE(
        channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
    stub_ = pb::ExternalProcessor::NewStub(channel_);
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus health(const std::string& service) {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse res;
    auto status = stub->Check(&ctx, req, &res);
    return status.ok() ? res.status() : grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN;
  }

  // Forwards `body` to the picked pod as the gateway would, returning the pod's answer.
  http::ClientResponse forward(const std::string& destination, const std::string& path,
                               const std::string& body) {
    const std::string primary = destination.substr(0, destination.find(','));
    const auto colon = primary.rfind(':');
    http::HttpClient pod(primary.substr(0, colon),
                         static_cast<uint16_t>(std::stoi(primary.substr(colon + 1))),
                         std::chrono::seconds(30));
    return pod.request("POST", path, body, "application/json");
  }

  // One streamed chat request through the full-duplex protocol; returns the destination.
  std::string streamed_chat(const std::string& text) {
    const std::string body =
        Json{{"model", stack_->model},
             {"messages", Json::array({Json{{"role", "user"}, {"content", text}}})},
             {"max_tokens", 6},
             {"stream", true},
             {"stream_options", {{"include_usage", true}}}}
            .dump();
    GatewayExchange x(*stub_);
    EXPECT_TRUE(x.send(request_headers("/v1/chat/completions", true)));
    // The body arrives in two chunks; the headers answer waits for the whole body.
    EXPECT_TRUE(x.send(body_chunk(body.substr(0, body.size() / 2), false)));
    EXPECT_TRUE(x.send(body_chunk(body.substr(body.size() / 2), true)));
    auto headers = x.receive();
    EXPECT_TRUE(headers && headers->has_request_headers())
        << (headers ? headers->DebugString() : "");
    if (!headers || !headers->has_request_headers()) {
      return {};
    }
    const auto& common = headers->request_headers().response();
    const std::string destination =
        mutation_value(common.header_mutation(), "x-gateway-destination-endpoint");
    EXPECT_FALSE(destination.empty());
    EXPECT_EQ(lb_metadata(*headers, "x-gateway-destination-endpoint"), destination)
        << "header and envoy.lb metadata carry the same value";
    EXPECT_TRUE(common.clear_route_cache());
    auto forwarded = x.receive();
    EXPECT_TRUE(forwarded && forwarded->has_request_body());
    const auto& streamed = forwarded->request_body().response().body_mutation().streamed_response();
    EXPECT_TRUE(streamed.end_of_stream());
    EXPECT_NE(streamed.body().find(text), std::string::npos) << "the body goes on to the pod";

    auto answer = forward(destination, "/v1/chat/completions", streamed.body());
    EXPECT_EQ(answer.status, 200) << answer.body;
    const std::string primary = destination.substr(0, destination.find(','));
    EXPECT_TRUE(x.send(response_headers(answer.status, primary)));
    auto rh = x.receive();
    EXPECT_TRUE(rh && rh->has_response_headers());
    const auto events = sse_events(answer.body);
    EXPECT_GE(events.size(), 3u) << answer.body;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const bool last = i + 1 == events.size();
      EXPECT_TRUE(x.send(body_chunk(events[i], last, /*response=*/true)));
      auto echo = x.receive();
      EXPECT_TRUE(echo && echo->has_response_body());
      if (echo) {
        const auto& e = echo->response_body().response().body_mutation().streamed_response();
        EXPECT_EQ(e.body(), events[i]) << "response chunks pass through unchanged";
        EXPECT_EQ(e.end_of_stream(), last);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_TRUE(x.finish().ok());
    return destination;
  }

  uint16_t ext_proc_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::ExternalProcessor::Stub> stub_;
};

// Samples of `target` (ttft, tpot) the stack's trainer has taken in.
inline double trainer_ingested(Stack& s, const std::string& target) {
  const std::string m = s.trainer->get("/metrics").body;
  return metric_sum(m, "llmd_trainer_samples_ingested_total{target=\"" + target + "\"");
}

}  // namespace llmd::testing
