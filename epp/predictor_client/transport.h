#pragma once
// How the predictor client reaches its replicas. A Transport is a thread-safe factory of
// Channels; a Channel is owned by exactly one thread (each sender thread and the prober open
// their own) and keeps whatever per-replica connections it needs, so keep-alive connections
// are never shared between threads. Tests implement Transport with a fake; production uses
// HttpTransport (one keep-alive llmd::http::HttpClient per replica per channel).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llmd::epp::predictor_client {

struct TransportResponse {
  enum class Outcome { kResponse, kTimeout, kError };
  Outcome outcome = Outcome::kError;
  int status = 0;       // HTTP status when outcome == kResponse
  std::string body;     // response body when outcome == kResponse
  std::string error;    // what went wrong otherwise

  static TransportResponse ok(int status, std::string body) {
    return {Outcome::kResponse, status, std::move(body), {}};
  }
  static TransportResponse timeout(std::string what = "timeout") {
    return {Outcome::kTimeout, 0, {}, std::move(what)};
  }
  static TransportResponse failure(std::string what) {
    return {Outcome::kError, 0, {}, std::move(what)};
  }
};

class Channel {
 public:
  virtual ~Channel() = default;
  // One request to replica `replica` (an index into the configured URL list); `path` is
  // relative to the replica's base URL. Bounded by `timeout`. Never throws.
  virtual TransportResponse exchange(std::size_t replica, std::string_view method,
                                     std::string_view path, const std::string& body,
                                     std::chrono::milliseconds timeout) = 0;
};
using ChannelPtr = std::unique_ptr<Channel>;

class Transport {
 public:
  virtual ~Transport() = default;
  // Thread-safe. The returned channel belongs to the calling thread and must not outlive the
  // transport.
  virtual ChannelPtr open_channel() = 0;
};

// HTTP/1.1 over llmd::http::HttpClient. Immutable after construction; open_channel() is
// thread-safe. Throws std::invalid_argument for a URL that parse_url rejects.
class HttpTransport final : public Transport {
 public:
  explicit HttpTransport(const std::vector<std::string>& replica_urls);
  ~HttpTransport() override;

  // Transport
  ChannelPtr open_channel() override;

 private:
  struct Target {
    std::string host;
    uint16_t port;
    std::string base_path;
  };
  std::vector<Target> targets_;
  class HttpChannel;
};

}  // namespace llmd::epp::predictor_client
