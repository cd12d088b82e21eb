#pragma once
// How the predictor client reaches its replicas. A Transport starts exchanges and calls back
// when they end; no thread of the client waits on the network. Tests implement it with a fake;
// production uses HttpTransport (common/http's AsyncHttpClient: one I/O thread, a keep-alive
// connection pool per replica; a call from an I/O worker runs on that worker).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llmd::http {
class AsyncHttpClient;
}

namespace llmd::epp::predictor_client {

struct TransportResponse {
  enum class Outcome { kResponse, kTimeout, kError };
  Outcome outcome = Outcome::kError;
  int status = 0;     // HTTP status when outcome == kResponse
  std::string body;   // response body when outcome == kResponse
  std::string error;  // what went wrong otherwise

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

using ResponseCallback = std::function<void(TransportResponse)>;

class Transport {
 public:
  virtual ~Transport() = default;
  // Starts one request to replica `replica` (an index into the configured URL list); `path` is
  // relative to the replica's base URL. `done` runs exactly once, on a thread of the
  // transport's (or inline), within about `timeout`. Thread-safe; never throws. The caller must
  // not hold a lock that `done` takes.
  virtual void exchange_async(std::size_t replica, std::string_view method, std::string_view path,
                              const std::string& body, std::chrono::milliseconds timeout,
                              ResponseCallback done) = 0;

  // The same, waiting for the answer: for threads that may block (the /readyz prober).
  TransportResponse exchange(std::size_t replica, std::string_view method, std::string_view path,
                             const std::string& body, std::chrono::milliseconds timeout);
};

// HTTP/1.1 over http::AsyncHttpClient. Throws std::invalid_argument for a URL that parse_url
// rejects. Destruction ends the exchanges in flight (their callbacks run first). An exchange
// started on an I/O worker's thread (common/http/io_workers.h) runs and calls back there: its
// workers must outlive the transport.
class HttpTransport final : public Transport {
 public:
  explicit HttpTransport(const std::vector<std::string>& replica_urls);
  ~HttpTransport() override;

  // Transport
  void exchange_async(std::size_t replica, std::string_view method, std::string_view path,
                      const std::string& body, std::chrono::milliseconds timeout,
                      ResponseCallback done) override;

  // Connections opened to `replica` so far (tests: keep-alive reuse).
  std::uint64_t connections_opened(std::size_t replica) const;

 private:
  std::unique_ptr<http::AsyncHttpClient> client_;
};

}  // namespace llmd::epp::predictor_client
