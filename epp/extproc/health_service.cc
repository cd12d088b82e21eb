#include "epp/extproc/health_service.h"

#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "epp/extproc/grpc_server.h"

namespace llmd::epp::extproc {
namespace {

// grpc.health.v1 by hand: HealthCheckRequest is {string service = 1}, HealthCheckResponse is
// {ServingStatus status = 1}; two fields do not need generated code.
enum ServingStatus { kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
constexpr char kHealthCheckPath[] = "/grpc.health.v1.Health/Check";
constexpr char kHealthWatchPath[] = "/grpc.health.v1.Health/Watch";

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

std::string health_response(int status) {
  return {char{0x08}, static_cast<char>(status)};
}

}  // namespace

// The services' statuses and the Watch calls that follow them. Thread-safe.
class HealthService::Statuses : public std::enable_shared_from_this<HealthService::Statuses> {
 public:
  struct Watcher {
    std::shared_ptr<GrpcCall> call;
    std::string service;
    int last = 0;  // on the call's worker
  };
  // nullopt: NOT_FOUND (a service never set, under the kNotFound policy).
  std::optional<int> get(const std::string& service) {
    std::lock_guard lock(mu_);
    auto it = statuses_.find(service);
    if (it != statuses_.end()) {
      return it->second;
    }
    switch (unknown_) {
      case Unknown::kNotFound:
        return std::nullopt;
      case Unknown::kServing:
        return kServing;
      case Unknown::kNotServing:
        return kNotServing;
      case Unknown::kServiceUnknown:
        return kServiceUnknown;
    }
    return std::nullopt;
  }
  void set_unknown(Unknown policy) {
    std::vector<std::shared_ptr<Watcher>> watchers;
    {
      std::lock_guard lock(mu_);
      if (unknown_ == policy) {
        return;  // the app re-states its statuses every 100 ms: only a change wakes watchers
      }
      unknown_ = policy;
      watchers = watchers_;
    }
    notify(watchers, nullptr);
  }
  void set(const std::string& service, bool serving) {
    std::vector<std::shared_ptr<Watcher>> watchers;
    {
      std::lock_guard lock(mu_);
      const int status = serving ? kServing : kNotServing;
      if (auto it = statuses_.find(service); it != statuses_.end() && it->second == status) {
        return;
      }
      statuses_[service] = status;
      watchers = watchers_;
    }
    notify(watchers, &service);
  }
  // Posts an update to every watcher of `service` (null: of every service).
  void notify(const std::vector<std::shared_ptr<Watcher>>& watchers, const std::string* service) {
    for (auto& w : watchers) {
      if (service == nullptr || w->service == *service) {
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
  std::map<std::string, int> statuses_;             // guarded by mu_
  Unknown unknown_ = Unknown::kNotFound;            // guarded by mu_
  std::vector<std::shared_ptr<Watcher>> watchers_;  // guarded by mu_
};

namespace {

// Check (unary; an unknown service is NOT_FOUND) and Watch (the status now, then every change;
// an unknown service is SERVICE_UNKNOWN, as gRPC's own health service answers).
class HealthCall final : public GrpcCallHandler {
 public:
  HealthCall(std::shared_ptr<HealthService::Statuses> statuses, std::shared_ptr<GrpcCall> call,
             bool watch)
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
      watcher_ = std::make_shared<HealthService::Statuses::Watcher>(
          HealthService::Statuses::Watcher{call_, *service, 0});
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
  std::shared_ptr<HealthService::Statuses> statuses_;
  std::shared_ptr<GrpcCall> call_;
  const bool watch_;
  bool got_request_ = false;
  std::string service_;
  std::shared_ptr<HealthService::Statuses::Watcher> watcher_;
};

}  // namespace

HealthService::HealthService() : statuses_(std::make_shared<Statuses>()) {}
HealthService::~HealthService() = default;

void HealthService::set(const std::string& service, bool serving) {
  statuses_->set(service, serving);
}

void HealthService::set_unknown(Unknown policy) {
  statuses_->set_unknown(policy);
}

void HealthService::add_to(GrpcServer& server) {
  for (const bool watch : {false, true}) {
    server.add_method(watch ? kHealthWatchPath : kHealthCheckPath,
                      [statuses = statuses_, watch](std::shared_ptr<GrpcCall> call) {
                        return std::make_unique<HealthCall>(statuses, std::move(call), watch);
                      });
  }
}

}  // namespace llmd::epp::extproc
