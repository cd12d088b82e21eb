#pragma once
// grpc.health.v1 (Check and Watch) on a GrpcServer: each service name has a status its owner
// sets; a service never set answers the `unknown` policy: NOT_FOUND (gRPC's own health
// service, the ext_proc port) or a status (the health port, as upstream's EPP answers it).
// Thread-safe: set() from any thread; the calls run on their connection's worker.
#include <memory>
#include <string>

namespace llmd::epp::extproc {

class GrpcServer;

class HealthService {
 public:
  // grpc.health.v1.HealthCheckResponse.ServingStatus.
  enum class Status { kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
  // What a service never set answers. kNotFound: Check ends with NOT_FOUND, Watch sends
  // SERVICE_UNKNOWN (gRPC's health service); otherwise that status, from Check and Watch.
  enum class Unknown { kNotFound, kServing, kNotServing, kServiceUnknown };

  HealthService();
  ~HealthService();
  HealthService(const HealthService&) = delete;
  HealthService& operator=(const HealthService&) = delete;

  void set(const std::string& service, bool serving);
  void set_unknown(Unknown policy);
  // Adds /grpc.health.v1.Health/Check and /Watch. Before the server starts.
  void add_to(GrpcServer& server);

  class Statuses;  // health_service.cc's; the calls hold it

 private:
  std::shared_ptr<Statuses> statuses_;
};

}  // namespace llmd::epp::extproc
