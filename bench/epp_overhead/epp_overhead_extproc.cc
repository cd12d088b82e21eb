#include "bench/epp_overhead/epp_overhead_extproc.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "epp/extproc/external_processor.grpc.pb.h"

namespace llmd::bench {
namespace {

namespace pb = envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;

constexpr char kDestination[] = "x-gateway-destination-endpoint";
constexpr char kCompletion[] =
    R"({"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":" a","finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}})";

void add_header(pb::HeaderMap& m, const std::string& k, const std::string& v) {
  auto* h = m.add_headers();
  h->set_key(k);
  h->set_raw_value(v);
}

std::string destination_of(const pb::ProcessingResponse& r) {
  if (!r.has_request_headers()) {
    return {};
  }
  for (const auto& o : r.request_headers().response().header_mutation().set_headers()) {
    if (o.header().key() == kDestination) {
      return o.header().raw_value().empty() ? o.header().value() : o.header().raw_value();
    }
  }
  return {};
}

// One HTTP request through the "gateway". gRPC may run OnReadDone and OnWriteDone at the same
// time on different threads, hence the mutex; it deletes itself in OnDone.
class Exchange final
    : public grpc::ClientBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse> {
 public:
  Exchange(pb::ExternalProcessor::Stub& stub, const std::string& body, LoadDone done,
           std::atomic<int>& open)
      : done_(std::move(done)), open_(open) {
    ++open_;
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    auto& headers = out_[0];
    auto* h = headers.mutable_request_headers();
    add_header(*h->mutable_headers(), ":method", "POST");
    add_header(*h->mutable_headers(), ":path", "/v1/completions");
    add_header(*h->mutable_headers(), ":authority", "gateway.local");
    add_header(*h->mutable_headers(), "content-type", "application/json");
    headers.mutable_protocol_config()->set_request_body_mode(pb::FULL_DUPLEX_STREAMED);
    headers.mutable_protocol_config()->set_response_body_mode(pb::FULL_DUPLEX_STREAMED);
    out_[1].mutable_request_body()->set_body(body);
    out_[1].mutable_request_body()->set_end_of_stream(true);
    stub.async()->Process(&context_, this);
    std::lock_guard lock(mu_);
    sent_ = Clock::now();
    write(0);
    write(1);
    StartRead(&in_);
    StartCall();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    writing_ = false;
    if (!ok) {
      return;  // the stream broke; OnDone reports it
    }
    if (!queued_.empty()) {
      const int next = queued_.front();
      queued_.pop_front();
      write(next);
    } else if (written_last_) {
      close_writes();
    }
  }

  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (!ok) {
      return;
    }
    ++reads_;
    if (reads_ == 1) {
      // The pick: the request_headers answer, held until the body was read and scheduled.
      destination_ = destination_of(in_);
      latency_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - sent_).count();
      if (destination_.empty()) {
        written_last_ = true;  // a refusal (immediate response): nothing more to play
        close_writes();
        return;
      }
    } else if (reads_ == 2) {
      // The body passed on; the "pod" answered: response headers naming the served endpoint.
      auto* rh = out_[2].mutable_response_headers();
      add_header(*rh->mutable_headers(), ":status", "200");
      add_header(*rh->mutable_headers(), "content-type", "application/json");
      auto& ns = (*out_[2].mutable_metadata_context()->mutable_filter_metadata())["envoy.lb"];
      (*ns.mutable_fields())["x-gateway-destination-endpoint-served"].set_string_value(
          destination_.substr(0, destination_.find(',')));
      write(2);
    } else if (reads_ == 3) {
      out_[3].mutable_response_body()->set_body(kCompletion);
      out_[3].mutable_response_body()->set_end_of_stream(true);
      write(3);
      written_last_ = true;
      close_writes();
    }
    if (reads_ < 4) {
      StartRead(&in_);
    }
  }

  void OnDone(const grpc::Status& status) override {
    done_(status.ok() && reads_ == 4 && !destination_.empty(), latency_ms_);
    --open_;
    delete this;
  }

 private:
  void write(int i) {  // mu_ held
    if (writing_) {
      queued_.push_back(i);
      return;
    }
    writing_ = true;
    StartWrite(&out_[i]);
  }

  // One write at a time: the half-close waits for the last write to finish.
  void close_writes() {  // mu_ held
    if (!writing_ && queued_.empty() && !closed_) {
      closed_ = true;
      StartWritesDone();
    }
  }

  LoadDone done_;
  std::atomic<int>& open_;
  grpc::ClientContext context_;
  std::mutex mu_;
  pb::ProcessingRequest out_[4];  // request headers, request body, response headers, body
  pb::ProcessingResponse in_;
  std::deque<int> queued_;
  bool writing_ = false;
  bool written_last_ = false;
  bool closed_ = false;
  int reads_ = 0;
  Clock::time_point sent_;
  std::string destination_;
  double latency_ms_ = 0;
};

}  // namespace

struct ExtProcLoad::Impl {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<pb::ExternalProcessor::Stub>> stubs;
  std::atomic<uint64_t> next{0};
  std::atomic<int> open{0};
};

ExtProcLoad::ExtProcLoad(uint16_t port, int channels) : impl_(std::make_unique<Impl>()) {
  for (int i = 0; i < std::max(1, channels); ++i) {
    grpc::ChannelArguments args;
    // Without it gRPC shares one connection among channels with equal arguments.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto ch = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                        grpc::InsecureChannelCredentials(), args);
    if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      throw std::runtime_error("ext_proc port " + std::to_string(port) + " does not connect");
    }
    impl_->stubs.push_back(pb::ExternalProcessor::NewStub(ch));
    impl_->channels.push_back(std::move(ch));
  }
}

ExtProcLoad::~ExtProcLoad() {
  // Streams end by their 2-s deadline at the latest.
  for (int i = 0; i < 300 && impl_->open.load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void ExtProcLoad::start(const std::string& body, LoadDone done) {
  auto& stub = *impl_->stubs[impl_->next.fetch_add(1) % impl_->stubs.size()];
  new Exchange(stub, body, std::move(done), impl_->open);
}

}  // namespace llmd::bench
