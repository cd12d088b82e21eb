#include "epp/extproc/ext_proc_server.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "common/http/io_workers.h"
#include "epp/extproc/grpc_server.h"

namespace llmd::epp::extproc {
namespace {

constexpr char kServiceName[] = "envoy.service.ext_proc.v3.ExternalProcessor";
constexpr char kProcessPath[] = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";
constexpr char kHealthCheckPath[] = "/grpc.health.v1.Health/Check";
constexpr char kHealthWatchPath[] = "/grpc.health.v1.Health/Watch";

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
        options, services,
        [call](pb::ProcessingResponse r) { call->send(r.SerializeAsString()); },
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

// grpc.health.v1 by hand: HealthCheckRequest is {string service = 1}, HealthCheckResponse is
// {ServingStatus status = 1}; two fields do not need generated code.
enum ServingStatus { kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

std::optional<std::string> parse_service(const std::string& bytes) {
  std::string service;
  std::size_t i = 0;
  auto varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; i < bytes.size() && shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(bytes[i++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        return true;
      }
    }
    return false;
  };
  while (i < bytes.size()) {
    uint64_t key = 0, v = 0;
    if (!varint(key)) {
      return std::nullopt;
    }
    switch (key & 7) {
      case 0:
        if (!varint(v)) {
          return std::nullopt;
        }
        break;
      case 1:
      case 5:
        i += (key & 7) == 1 ? 8 : 4;
        break;
      case 2:
        if (!varint(v) || v > bytes.size() - i) {
          return std::nullopt;
        }
        if ((key >> 3) == 1) {
          service = bytes.substr(i, v);
        }
        i += v;
        break;
      default:
        return std::nullopt;
    }
  }
  if (i > bytes.size()) {
    return std::nullopt;
  }
  return service;
}

std::string health_response(int status) { return {char{0x08}, static_cast<char>(status)}; }

// The services' statuses and the Watch calls that follow them. Thread-safe.
class HealthStatuses : public std::enable_shared_from_this<HealthStatuses> {
 public:
  struct Watcher {
    std::shared_ptr<GrpcCall> call;
    std::string service;
    int last = 0;  // on the call's worker
  };
  std::optional<int> get(const std::string& service) {
    std::lock_guard lock(mu_);
    auto it = statuses_.find(service);
    return it == statuses_.end() ? std::nullopt : std::optional<int>(it->second);
  }
  void set(const std::string& service, bool serving) {
    std::vector<std::shared_ptr<Watcher>> watchers;
    {
      std::lock_guard lock(mu_);
      statuses_[service] = serving ? kServing : kNotServing;
      watchers = watchers_;
    }
    for (auto& w : watchers) {
      if (w->service == service) {
        w->call->post([self = shared_from_this(), w] { self->update(*w); });
      }
    }
  }
  // On the watcher's worker: sends its service's status when it changed.
  void update(Watcher& w) {
    const int now = get(w.service).value_or(kServiceUnknown);
    if (!w.call->ended() && now != w.last) {
      w.last = now;
      w.call->send(health_response(now));
    }
  }
  void add(std::shared_ptr<Watcher> w) {
    std::lock_guard lock(mu_);
    watchers_.push_back(std::move(w));
  }
  void remove(const Watcher* w) {
    std::lock_guard lock(mu_);
    std::erase_if(watchers_, [w](const auto& x) { return x.get() == w; });
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> statuses_;               // guarded by mu_
  std::vector<std::shared_ptr<Watcher>> watchers_;    // guarded by mu_
};

// Check (unary; an unknown service is NOT_FOUND) and Watch (the status now, then every change;
// an unknown service is SERVICE_UNKNOWN, as gRPC's own health service answers).
class HealthCall final : public GrpcCallHandler {
 public:
  HealthCall(std::shared_ptr<HealthStatuses> statuses, std::shared_ptr<GrpcCall> call, bool watch)
      : statuses_(std::move(statuses)), call_(std::move(call)), watch_(watch) {}
  ~HealthCall() override {
    if (watcher_) {
      statuses_->remove(watcher_.get());
    }
  }
  void on_message(std::string bytes) override {
    const auto service = parse_service(bytes);
    if (!service || got_request_) {
      call_->finish({GrpcCode::kInvalidArgument, "expected one HealthCheckRequest"});
      return;
    }
    got_request_ = true;
    if (watch_) {
      watcher_ = std::make_shared<HealthStatuses::Watcher>(
          HealthStatuses::Watcher{call_, *service, 0});
      statuses_->add(watcher_);
      statuses_->update(*watcher_);
    } else {
      service_ = *service;
    }
  }
  void on_half_close() override {
    if (watch_) {
      return;  // a Watch runs until the client cancels it
    }
    if (!got_request_) {
      call_->finish({GrpcCode::kInvalidArgument, "expected one HealthCheckRequest"});
    } else if (const auto status = statuses_->get(service_)) {
      call_->send(health_response(*status));
      call_->finish({});
    } else {
      call_->finish({GrpcCode::kNotFound, "unknown service " + service_});
    }
  }
  void on_cancel() override {}

 private:
  std::shared_ptr<HealthStatuses> statuses_;
  std::shared_ptr<GrpcCall> call_;
  const bool watch_;
  bool got_request_ = false;
  std::string service_;
  std::shared_ptr<HealthStatuses::Watcher> watcher_;
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
  http::IoWorkers& workers() { return options.workers != nullptr ? *options.workers : *own_workers; }

  ExtProcServerOptions options;
  ExtProcServices services;
  std::unique_ptr<http::IoWorkers> own_workers;
  std::atomic<int> active{0};
  std::shared_ptr<HealthStatuses> health = std::make_shared<HealthStatuses>();
  std::mutex mu;  // guards `server` (start and shutdown come from different threads)
  std::unique_ptr<GrpcServer> server;
  std::atomic<uint16_t> port{0};
};

ExtProcServer::ExtProcServer(ExtProcServerOptions options, ExtProcServices services)
    : impl_(std::make_unique<Impl>(std::move(options), services)) {}

ExtProcServer::~ExtProcServer() { shutdown(std::chrono::milliseconds(0)); }

void ExtProcServer::start() {
  Impl& s = *impl_;
  GrpcServerOptions o;
  o.host = s.options.host;
  o.port = s.options.port;
  // A request body travels in one message in BUFFERED mode: allow the EPP's body limit.
  o.max_message_bytes = s.options.stream.body_limit + 65536;
  o.message_budget = s.options.body_budget;
  auto server = std::make_unique<GrpcServer>(o, s.workers());
  server->add_method(kProcessPath, [&s](std::shared_ptr<GrpcCall> call) {
    return std::make_unique<ProcessCall>(s.options.stream, s.services, s.active, std::move(call));
  });
  for (const bool watch : {false, true}) {
    server->add_method(watch ? kHealthWatchPath : kHealthCheckPath,
                       [health = s.health, watch](std::shared_ptr<GrpcCall> call) {
                         return std::make_unique<HealthCall>(health, std::move(call), watch);
                       });
  }
  s.health->set("liveness", true);
  set_ready(false);
  server->start();
  s.port.store(server->port());
  std::lock_guard lock(s.mu);
  s.server = std::move(server);
}

uint16_t ExtProcServer::port() const { return impl_->port.load(); }

void ExtProcServer::set_ready(bool ready) {
  for (const char* service : {"readiness", kServiceName, ""}) {
    impl_->health->set(service, ready);
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

int ExtProcServer::active_streams() const { return impl_->active.load(); }

}  // namespace llmd::epp::extproc
