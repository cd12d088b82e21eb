#pragma once
// The project's HTTP/1.1 client, blocking face: HttpClient runs one exchange at a time on the
// calling thread. It is a thin driver of the one asynchronous core (common/http/client_core.h),
// which does the connecting, TLS, writing, reading, timeouts and keep-alive for every client of
// the project; HttpClient only runs the core's event loop until the answer is in. Beast/Asio
// stay in the .cc files.
//
// Not thread-safe: one owner thread per client. It keeps one keep-alive connection and
// reconnects transparently once when the peer closed a kept-alive connection before answering.
// Errors are values (status 0 and `error`), never exceptions.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/http/message.h"

namespace llmd::http {

struct Url {
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // without trailing '/'
  bool tls = false;       // https
};
enum class UrlSchemes { kHttp, kHttpOrHttps };
// Parses "http://host:port[/base]" (and "https://..." when `schemes` allows it, port 443 by
// default); nullopt for anything else. Callers that cannot speak TLS keep the default, so an
// https URL is refused at start-up rather than spoken to in plain text.
std::optional<Url> parse_url(const std::string& url, UrlSchemes schemes = UrlSchemes::kHttp);

struct ClientResponse {
  int status = 0;  // 0 when the request failed at the transport level
  std::string body;
  std::vector<Header> headers;  // names lower-case
  std::string error;            // transport error message when status == 0
  bool timed_out = false;       // the failure was one of the exchange's timeouts
  std::string_view header(std::string_view name) const;
};

// Bounds of one exchange; 0 = none. Each applies in its phase, and the earliest deadline wins.
struct ClientTimeouts {
  std::chrono::milliseconds total{0};       // the whole exchange, from start to last byte
  std::chrono::milliseconds connect{0};     // resolve, connect and TLS handshake
  std::chrono::milliseconds response{0};    // request written and response read to its end
  std::chrono::milliseconds first_byte{0};  // request written and response header read
  std::chrono::milliseconds idle{0};        // the longest wait for more of a streamed body
};

// A client's TLS settings. Certificates are verified unless `verify` is false, which only the
// EPP's metric scrapes use (upstream's metrics-data-source insecureSkipVerify, its default).
struct TlsOptions {
  std::string ca_file;      // PEM bundle the server's chain must end in; "" = the system's CAs
  std::string server_name;  // name the certificate must carry (also sent as SNI); "" = URL host
  bool verify = true;       // false: any certificate, any name (the connection is still TLS)
};
class TlsContext;  // an OpenSSL client context, defined in client_core.cc
using TlsContextPtr = std::shared_ptr<TlsContext>;
// Throws std::invalid_argument when the CA file cannot be read (a start-up error).
TlsContextPtr make_tls_context(const TlsOptions& options);

class HttpClient {
 public:
  struct Options {
    std::chrono::milliseconds timeout{10000};  // connect, and the response (see request())
    TlsContextPtr tls;                         // for an https origin; null there fails each request
    // false: every request on a fresh connection ("Connection: close").
    bool keep_alive = true;
    // Polled every 100 ms while a request waits (null: not polled); true cancels the request,
    // which fails with error "cancelled".
    std::function<bool()> interrupted;
  };

  HttpClient(std::string host, uint16_t port,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // `origin`: host, port and scheme; its base_path is not applied (targets are complete).
  HttpClient(const Url& origin, Options options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // One request, the answer read whole (at most 256 MiB). Bounded twice by the timeout: once
  // for connecting, once for writing the request and reading the whole response.
  ClientResponse request(const std::string& method, const std::string& target,
                         const std::string& body = {},
                         const std::string& content_type = "application/json",
                         const std::vector<Header>& extra_headers = {});
  ClientResponse get(const std::string& target) { return request("GET", target); }
  ClientResponse post(const std::string& target, const std::string& body) {
    return request("POST", target, body);
  }

  // false from OnBody: stop reading (the connection is closed, not reused).
  using OnBody = std::function<bool(std::string_view bytes)>;
  // One request whose body goes to `on_body` as it arrives, in pieces of at most 16 KiB and of
  // any length (no size bound: on_body decides). Returns status and headers (body empty); when
  // the body broke off, the status with `error` set. A Content-Type goes with a non-empty
  // `content_type`. Bounded by `timeouts` instead of the client's timeout.
  ClientResponse request_streamed(const std::string& method, const std::string& target,
                                  const std::string& body, const std::string& content_type,
                                  const std::vector<Header>& extra_headers,
                                  const ClientTimeouts& timeouts, const OnBody& on_body);

  void set_timeout(std::chrono::milliseconds timeout);
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::http
