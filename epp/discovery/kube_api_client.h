#pragma once
// The EPP's client of the Kubernetes API server, shared by its control loops (pod discovery,
// leader election): one request per fresh connection, plain http or https, over common/http's
// client (HttpClient's streamed requests on the project's one client core).
//
// - In a cluster (api_url ""): https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the
//   certificate checked against the service account's CA for the name kubernetes.default.svc.
//   `api_url` (http or https) overrides the address, e.g. for `kubectl proxy` or tests.
// - The service account's bearer token is re-read for each request: it rotates.
// - Every step is bounded: connecting (TLS handshake included) by `io`, writing the request and
//   reading the response header by `io`, each wait for more of the body by `body_read` (a
//   watch passes its own, longer bound); on_body decides how much of a body it keeps.
//
// Threading: one request at a time, from the thread that owns the client; interrupt() from any
// thread.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace llmd::epp::discovery {

struct KubeApiOptions {
  std::string api_url;  // "" = in-cluster
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
};

enum class KubeMethod { kGet, kPost, kPut };

struct KubeTimeouts {
  std::chrono::milliseconds io{10000};         // connect + TLS handshake; write + response header
  std::chrono::milliseconds body_read{10000};  // each wait for more of the body
};

// An answer read whole: `status` 0 = no answer (`error` says why); `body` is the parsed JSON
// (null when the body was empty or not JSON).
struct KubeJsonAnswer {
  int status = 0;
  nlohmann::json body;
  std::string error;
};

class KubeApiClient {
 public:
  using OnBody = std::function<bool(std::string_view bytes)>;  // false: stop reading

  // `interrupted` (optional; called on the requesting thread every 100 ms while it waits)
  // cancels the request in progress when it turns true, as interrupt() does, but only while it
  // holds: the next request runs. Throws std::invalid_argument on a bad URL, an unreadable CA
  // file, or no API server (not in a cluster and no api_url).
  explicit KubeApiClient(const KubeApiOptions& options,
                         std::function<bool()> interrupted = nullptr);
  ~KubeApiClient();
  KubeApiClient(const KubeApiClient&) = delete;
  KubeApiClient& operator=(const KubeApiClient&) = delete;

  // One request with an optional JSON `body` ("" = none). Returns the HTTP status, or 0 when no
  // answer came (`error` says why; "interrupted" when cancelled). The body goes to `on_body` as
  // it arrives. `timed_out` (optional) is set to whether one of `timeouts` ended the request (a
  // status with `error` set and `timed_out`: the body stopped coming for `body_read`).
  int request(KubeMethod method, const std::string& target, const std::string& body,
              const KubeTimeouts& timeouts, const OnBody& on_body, std::string& error,
              bool* timed_out = nullptr);
  // A request whose answer (at most `max_body` bytes) is read whole and parsed.
  KubeJsonAnswer request_json(KubeMethod method, const std::string& target, const std::string& body,
                              const KubeTimeouts& timeouts,
                              std::size_t max_body = 16 * 1024 * 1024);

  // Cancels the request in progress (within ~100 ms) and fails every later one at once.
  void interrupt();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The namespace the service account's namespace file names ("" when it cannot be read).
std::string service_account_namespace(const std::string& namespace_file);
// `s` without leading and trailing whitespace (token and namespace files, selector parts).
std::string trimmed(std::string s);

}  // namespace llmd::epp::discovery
