#pragma once
// A kubelet's gRPC probe: grpc.health.v1 Check of `service` through the gRPC library's client
// (health.proto is generated for the e2e tests). UNKNOWN when the call itself failed.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "health.grpc.pb.h"

namespace llmd::testing {

inline grpc::health::v1::HealthCheckResponse::ServingStatus grpc_health(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse res;
  return stub->Check(&ctx, req, &res).ok() ? res.status()
                                           : grpc::health::v1::HealthCheckResponse::UNKNOWN;
}

inline grpc::health::v1::HealthCheckResponse::ServingStatus grpc_health(
    uint16_t port, const std::string& service) {
  return grpc_health(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()),
      service);
}

}  // namespace llmd::testing
