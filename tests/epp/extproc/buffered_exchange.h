#pragma once
// One BUFFERED completion through an ext_proc server, step by step, as a gateway sends it:
// request headers (answered at once), the whole body in one message (answered with the pick),
// then the half-close. For the in-process ext_proc tests (gRPC library client).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "epp/extproc/external_processor.grpc.pb.h"
#include "tests/epp/extproc/ext_proc_messages.h"

namespace llmd::testing {

class BufferedExchange {
 public:
  explicit BufferedExchange(const std::shared_ptr<grpc::Channel>& channel)
      : stub_(envoy::service::ext_proc::v3::ExternalProcessor::NewStub(channel)) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stream_ = stub_->Process(&context_);
  }
  // Sends the request headers; true when they are answered (the call is then open).
  bool headers() {
    envoy::service::ext_proc::v3::ProcessingRequest m;
    auto* h = m.mutable_request_headers()->mutable_headers();
    *h->add_headers() = header(":method", "POST");
    *h->add_headers() = header(":path", "/v1/completions");
    envoy::service::ext_proc::v3::ProcessingResponse answer;
    return stream_->Write(m) && stream_->Read(&answer) && answer.has_request_headers();
  }
  // Sends the body; the destination the answer carries ("" when none came).
  std::string body(const std::string& json = R"({"model":"m","prompt":"hello"})") {
    envoy::service::ext_proc::v3::ProcessingResponse answer;
    if (!send_body(json, answer) || !answer.has_request_body()) {
      return {};
    }
    return mutation_value(answer.request_body().response().header_mutation(),
                          "x-gateway-destination-endpoint");
  }
  // Sends the body and reads its answer, whatever it is.
  bool send_body(const std::string& json,
                 envoy::service::ext_proc::v3::ProcessingResponse& answer) {
    envoy::service::ext_proc::v3::ProcessingRequest m;
    m.mutable_request_body()->set_body(json);
    m.mutable_request_body()->set_end_of_stream(true);
    return stream_->Write(m) && stream_->Read(&answer);
  }
  // Half-closes and reads to the end: the call's status.
  grpc::Status finish() {
    stream_->WritesDone();
    envoy::service::ext_proc::v3::ProcessingResponse answer;
    while (stream_->Read(&answer)) {
    }
    return stream_->Finish();
  }

 private:
  std::unique_ptr<envoy::service::ext_proc::v3::ExternalProcessor::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<envoy::service::ext_proc::v3::ProcessingRequest,
                                           envoy::service::ext_proc::v3::ProcessingResponse>>
      stream_;
};

}  // namespace llmd::testing
