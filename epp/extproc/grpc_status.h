#pragma once
// gRPC status: the codes this server ends calls with (grpc/status.h numbering) and a status as
// a call's end carries it. Plain values, no I/O; used on any thread.
#include <string>

namespace llmd::epp::extproc {

enum class GrpcCode : int {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kResourceExhausted = 8,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
};

struct GrpcStatus {
  GrpcCode code = GrpcCode::kOk;
  std::string message;
};

}  // namespace llmd::epp::extproc
