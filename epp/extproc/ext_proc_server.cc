#include "epp/extproc/ext_proc_server.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "epp/extproc/external_processor.grpc.pb.h"

namespace llmd::epp::extproc {
namespace {

namespace net = boost::asio;
using Strand = net::strand<net::thread_pool::executor_type>;

constexpr char kServiceName[] = "envoy.service.ext_proc.v3.ExternalProcessor";

// What the stream's strand shares with the reactor (gRPC's threads): the reactor's own state
// and the way out (null once the reactor is gone).
struct StreamLock {
  std::mutex mu;
  class ProcessReactor* reactor = nullptr;  // guarded by mu
};

class ProcessReactor final
    : public grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse> {
 public:
  // The stream lives on `strand`: every call into it is posted there, in arrival order.
  ProcessReactor(const ExtProcOptions& options, const ExtProcServices& services,
                 std::atomic<int>& active, Strand strand)
      : active_(active), lock_(std::make_shared<StreamLock>()), strand_(std::move(strand)) {
    ++active_;
    lock_->reactor = this;
    std::weak_ptr<StreamLock> weak = lock_;
    stream_ = std::make_shared<ExtProcStream>(
        options, services,
        // Called on the strand.
        [weak](pb::ProcessingResponse r) {
          if (auto l = weak.lock()) {
            std::lock_guard guard(l->mu);
            if (l->reactor != nullptr) {
              l->reactor->enqueue(std::move(r));
            }
          }
        },
        [strand = strand_](std::function<void()> fn) { net::post(strand, std::move(fn)); });
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The gateway half-closed (the exchange is over) or the stream broke. Finishing waits
      // for the messages already posted to the strand, whose answers go out first.
      end_reads(grpc::Status::OK);
      return;
    }
    if (incoming_.request_case() == pb::ProcessingRequest::REQUEST_NOT_SET) {
      // Nothing this EPP can answer (bytes that decoded to no known request, e.g. another
      // protocol or version): an error status, so the gateway applies its failure mode
      // instead of waiting for a response that never comes.
      end_reads(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "ProcessingRequest carries no request_headers, request_body, "
                             "response_headers, response_body or trailers"));
      return;
    }
    // Swapped out, not copied: a buffered request body travels in one message.
    auto message = std::make_shared<pb::ProcessingRequest>();
    message->Swap(&incoming_);
    net::post(strand_, [stream = stream_, message] { stream->on_message(*message); });
    StartRead(&incoming_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard guard(lock_->mu);
    writing_ = false;
    if (!ok) {
      outgoing_.clear();
      net::post(strand_, [stream = stream_] { stream->cancel(); });
      reads_done_ = true;
    } else {
      outgoing_.pop_front();
    }
    write_next();
    maybe_finish();
  }

  void OnCancel() override {
    net::post(strand_, [stream = stream_] { stream->cancel(); });
  }

  void OnDone() override {
    {
      std::lock_guard guard(lock_->mu);
      lock_->reactor = nullptr;
    }
    net::post(strand_, [stream = std::move(stream_)] { stream->cancel(); });
    --active_;
    delete this;
  }

  // lock_->mu held.
  void enqueue(pb::ProcessingResponse r) {
    if (finished_) {
      return;
    }
    outgoing_.push_back(std::move(r));
    write_next();
  }

 private:
  void write_next() {
    if (!writing_ && !outgoing_.empty() && !finished_) {
      writing_ = true;
      StartWrite(&outgoing_.front());
    }
  }
  // On the strand, after the messages read before: cancel the stream, then finish the RPC once
  // the answers queued so far are written.
  void end_reads(grpc::Status status) {
    net::post(strand_, [stream = stream_, lock = lock_, status = std::move(status)] {
      stream->cancel();
      std::lock_guard guard(lock->mu);
      if (lock->reactor != nullptr) {
        lock->reactor->reads_done_ = true;
        lock->reactor->error_ = status;
        lock->reactor->maybe_finish();
      }
    });
  }
  void maybe_finish() {
    if (reads_done_ && !writing_ && outgoing_.empty() && !finished_) {
      finished_ = true;
      Finish(error_);
    }
  }

  std::atomic<int>& active_;
  std::shared_ptr<StreamLock> lock_;
  Strand strand_;
  std::shared_ptr<ExtProcStream> stream_;  // used on strand_ only
  pb::ProcessingRequest incoming_;         // gRPC's read buffer (reads are sequential)
  std::deque<pb::ProcessingResponse> outgoing_;  // guarded by lock_->mu; front() is on the wire
  bool writing_ = false;                         // guarded by lock_->mu
  bool reads_done_ = false;                      // guarded by lock_->mu
  bool finished_ = false;                        // guarded by lock_->mu
  grpc::Status error_ = grpc::Status::OK;        // guarded by lock_->mu; the stream's status
};

class Service final : public pb::ExternalProcessor::CallbackService {
 public:
  Service(const ExtProcOptions& options, const ExtProcServices& services,
          std::atomic<int>& active, net::thread_pool& pool)
      : options_(options), services_(services), active_(active), pool_(pool) {}

  grpc::ServerBidiReactor<pb::ProcessingRequest, pb::ProcessingResponse>* Process(
      grpc::CallbackServerContext*) override {
    return new ProcessReactor(options_, services_, active_, net::make_strand(pool_.executor()));
  }

 private:
  ExtProcOptions options_;
  ExtProcServices services_;
  std::atomic<int>& active_;
  net::thread_pool& pool_;
};

}  // namespace

struct ExtProcServer::Impl {
  Impl(ExtProcServerOptions o, ExtProcServices s)
      : options(std::move(o)), pool(static_cast<std::size_t>(std::max(1, options.threads))),
        service(options.stream, s, active, pool) {}
  ExtProcServerOptions options;
  std::atomic<int> active{0};
  // The streams' strands; destroyed after the service and the server (joins its threads).
  net::thread_pool pool;
  Service service;
  std::mutex mu;  // guards `server` (readiness and shutdown come from different threads)
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

ExtProcServer::ExtProcServer(ExtProcServerOptions options, ExtProcServices services)
    : impl_(std::make_unique<Impl>(std::move(options), services)) {}

ExtProcServer::~ExtProcServer() { shutdown(std::chrono::milliseconds(0)); }

void ExtProcServer::start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string address = fmt::format("{}:{}", impl_->options.host, impl_->options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(&impl_->service);
  // A request body travels in one message in BUFFERED mode: allow the EPP's body limit.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<std::size_t>(impl_->options.stream.body_limit + 65536,
                                             std::numeric_limits<int>::max())));
  auto server = builder.BuildAndStart();
  if (!server || impl_->port == 0) {
    throw std::runtime_error("cannot serve ext_proc on " + address);
  }
  server->GetHealthCheckService()->SetServingStatus("liveness", true);
  {
    std::lock_guard lock(impl_->mu);
    impl_->server = std::move(server);
  }
  set_ready(false);
}

uint16_t ExtProcServer::port() const { return static_cast<uint16_t>(impl_->port); }

void ExtProcServer::set_ready(bool ready) {
  std::lock_guard lock(impl_->mu);
  if (!impl_->server) {
    return;
  }
  auto* health = impl_->server->GetHealthCheckService();
  health->SetServingStatus("readiness", ready);
  health->SetServingStatus(kServiceName, ready);
  health->SetServingStatus("", ready);
}

void ExtProcServer::shutdown(std::chrono::milliseconds timeout) {
  set_ready(false);
  std::unique_ptr<grpc::Server> server;
  {
    std::lock_guard lock(impl_->mu);
    server = std::move(impl_->server);
  }
  if (!server) {
    return;
  }
  server->Shutdown(std::chrono::system_clock::now() + timeout);
  server->Wait();
}

int ExtProcServer::active_streams() const { return impl_->active.load(); }

}  // namespace llmd::epp::extproc
