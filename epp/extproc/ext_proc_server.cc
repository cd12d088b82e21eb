#include "epp/extproc/ext_proc_server.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "common/http/descriptor_budget.h"
#include "common/http/io_workers.h"
#include "epp/extproc/grpc_server.h"
#include "epp/extproc/health_service.h"

namespace llmd::epp::extproc {
namespace {

constexpr char kServiceName[] = "envoy.service.ext_proc.v3.ExternalProcessor";
constexpr char kProcessPath[] = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";

// One Process call: the gateway's messages in, the ExtProcStream's answers out. Everything runs
// on the call's worker: the messages, the continuations the stream posts (predictions, router
// queue wake-ups), and its answers.
class ProcessCall final : public GrpcCallHandler {
 public:
  ProcessCall(const ExtProcOptions& options, const ExtProcServices& services,
              std::atomic<int>& active, std::shared_ptr<GrpcCall> call)
      : active_(active), call_(call) {
    ++active_;
    stream_ = std::make_shared<ExtProcStream>(
        options, services, [call](pb::ProcessingResponse r) { call->send(r.SerializeAsString()); },
        [call](std::function<void()> fn) { call->post(std::move(fn)); });
  }
  ~ProcessCall() override { --active_; }

  void on_message(std::string bytes) override {
    pb::ProcessingRequest message;
    if (!message.ParseFromString(bytes) ||
        message.request_case() == pb::ProcessingRequest::REQUEST_NOT_SET) {
      // Nothing this EPP can answer (another protocol or version): an error status, so the
      // gateway applies its failure mode instead of waiting for a response that never comes.
      stream_->cancel();
      call_->finish({GrpcCode::kInvalidArgument,
                     "ProcessingRequest carries no request_headers, request_body, "
                     "response_headers, response_body or trailers"});
      return;
    }
    stream_->on_message(message);
  }
  // The gateway half-closed: the exchange is over. The answers sent so far go out first.
  void on_half_close() override {
    stream_->cancel();
    call_->finish({});
  }
  void on_cancel() override { stream_->cancel(); }
  bool on_message_over_budget(std::size_t) override { return stream_->on_body_over_budget(); }

 private:
  std::atomic<int>& active_;
  std::shared_ptr<GrpcCall> call_;
  std::shared_ptr<ExtProcStream> stream_;
};

}  // namespace

struct ExtProcServer::Impl {
  Impl(ExtProcServerOptions o, ExtProcServices s) : options(std::move(o)), services(s) {
    services.body_budget = options.body_budget.get();
    if (options.workers == nullptr) {
      own_workers = std::make_unique<http::IoWorkers>(std::max(1, options.threads), "epp-extproc");
    }
  }
  ~Impl() {
    server.reset();  // before the workers it runs on
    if (own_workers) {
      own_workers->stop();
    }
  }
  http::IoWorkers& workers() {
    return options.workers != nullptr ? *options.workers : *own_workers;
  }

  ExtProcServerOptions options;
  ExtProcServices services;
  std::unique_ptr<http::IoWorkers> own_workers;
  std::atomic<int> active{0};
  HealthService health;
  std::mutex mu;  // guards `server` (start and shutdown come from different threads)
  std::unique_ptr<GrpcServer> server;
  std::atomic<uint16_t> port{0};
};

ExtProcServer::ExtProcServer(ExtProcServerOptions options, ExtProcServices services)
    : impl_(std::make_unique<Impl>(std::move(options), services)) {}

ExtProcServer::~ExtProcServer() {
  shutdown(std::chrono::milliseconds(0));
}

void ExtProcServer::start() {
  Impl& s = *impl_;
  GrpcServerOptions o;
  o.host = s.options.host;
  o.port = s.options.port;
  // A request body travels in one message in BUFFERED mode: allow the EPP's body limit.
  o.max_message_bytes = s.options.max_message_bytes > 0 ? s.options.max_message_bytes
                                                        : s.options.stream.body_limit + 65536;
  o.tls_context = s.options.tls_context;
  o.message_budget = s.options.body_budget;
  o.limits = s.options.limits;
  o.max_connections =
      s.options.max_connections > 0
          ? s.options.max_connections
          : std::max<std::size_t>(1, http::DescriptorBudget::process().capacity() / 2);
  auto server = std::make_unique<GrpcServer>(o, s.workers());
  server->add_method(kProcessPath, [&s](std::shared_ptr<GrpcCall> call) {
    return std::make_unique<ProcessCall>(s.options.stream, s.services, s.active, std::move(call));
  });
  s.health.add_to(*server);
  s.health.set("liveness", true);
  set_ready(false);
  server->start();
  s.port.store(server->port());
  std::lock_guard lock(s.mu);
  s.server = std::move(server);
}

uint16_t ExtProcServer::port() const {
  return impl_->port.load();
}

void ExtProcServer::set_ready(bool ready) {
  for (const char* service : {"readiness", kServiceName, ""}) {
    impl_->health.set(service, ready);
  }
}

void ExtProcServer::shutdown(std::chrono::milliseconds timeout) {
  set_ready(false);
  GrpcServer* server = nullptr;
  {
    std::lock_guard lock(impl_->mu);
    server = impl_->server.get();  // reset only by ~Impl
  }
  if (server != nullptr) {
    server->shutdown(timeout);  // blocks: not under the lock, port() and readiness go on
  }
}

const GrpcCounters* ExtProcServer::counters() const {
  std::lock_guard lock(impl_->mu);
  return impl_->server ? &impl_->server->counters() : nullptr;
}

int ExtProcServer::active_streams() const {
  return impl_->active.load();
}

}  // namespace llmd::epp::extproc
