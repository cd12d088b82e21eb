#include "epp/discovery/kube_api_client.h"

#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <stdexcept>

#include "common/http/client.h"
#include "common/util/files.h"

namespace llmd::epp::discovery {
namespace {

const char* method_name(KubeMethod m) {
  switch (m) {
    case KubeMethod::kPost:
      return "POST";
    case KubeMethod::kPut:
      return "PUT";
    case KubeMethod::kGet:
      break;
  }
  return "GET";
}

// The API server's address and the name its certificate must carry.
struct ApiServer {
  http::Url url;
  std::string verify_name;
};

ApiServer api_server(const KubeApiOptions& options) {
  ApiServer s;
  if (options.api_url.empty()) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || port == nullptr) {
      throw std::invalid_argument(
          "Kubernetes API: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no "
          "--kube-api-url");
    }
    const std::string_view text(port);
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value == 0 || value > 65535) {
      throw std::invalid_argument("Kubernetes API: bad KUBERNETES_SERVICE_PORT '" +
                                  std::string(text) + "'");
    }
    s.url.host = host;
    s.url.port = static_cast<uint16_t>(value);
    s.url.tls = true;
    // The API server's certificate names this service; the environment gives its IP.
    s.verify_name = "kubernetes.default.svc";
    return s;
  }
  auto url = http::parse_url(options.api_url, http::UrlSchemes::kHttpOrHttps);
  if (!url) {
    throw std::invalid_argument("--kube-api-url: expected http(s)://host[:port], got '" +
                                options.api_url + "'");
  }
  s.url = std::move(*url);
  s.url.base_path.clear();  // targets are absolute API paths
  s.verify_name = s.url.host;
  return s;
}

}  // namespace

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) {
    s.pop_back();
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) {
    s.erase(s.begin());
  }
  return s;
}

std::string service_account_namespace(const std::string& namespace_file) {
  auto ns = util::read_file(namespace_file);
  return ns ? trimmed(*ns) : std::string();
}

// The transport is the project's client core through the blocking HttpClient: TLS, timeouts and
// the streamed body (watches) are its; this adds the API server's address, credentials and
// the interruption.
struct KubeApiClient::Impl {
  Impl(const KubeApiOptions& o, std::function<bool()> pred)
      : options(o), interrupted_by(std::move(pred)) {
    const ApiServer server = api_server(options);
    http::HttpClient::Options c;
    if (server.url.tls) {
      c.tls = http::make_tls_context({options.ca_file, server.verify_name});
    }
    // A request per fresh connection: requests are few (a list, a watch, a lease renewal),
    // and a watch is ended by closing its connection anyway.
    c.keep_alive = false;
    c.interrupted = [this] { return cancelled(); };
    client = std::make_unique<http::HttpClient>(server.url, std::move(c));
  }

  bool cancelled() const { return interrupted || (interrupted_by && interrupted_by()); }

  int request(KubeMethod method, const std::string& target, const std::string& body,
              const KubeTimeouts& timeouts, const OnBody& on_body, std::string& error,
              bool* timed_out) {
    if (timed_out != nullptr) {
      *timed_out = false;
    }
    if (cancelled()) {
      error = "interrupted";
      return 0;
    }
    std::vector<http::Header> headers{{"accept", "application/json"}, {"user-agent", "llmd-epp"}};
    if (auto token = util::read_file(options.token_file)) {  // re-read: it rotates
      headers.push_back({"authorization", "Bearer " + trimmed(*token)});
    }
    const bool has_body = method != KubeMethod::kGet;
    http::ClientTimeouts bounds;
    bounds.connect = timeouts.io;
    bounds.first_byte = timeouts.io;
    bounds.idle = timeouts.body_read;
    const http::ClientResponse r =
        client->request_streamed(method_name(method), target, has_body ? body : std::string(),
                                 has_body ? "application/json" : "", headers, bounds, on_body);
    if (!r.error.empty()) {
      error = cancelled() ? "interrupted" : r.error;
    }
    if (timed_out != nullptr) {
      *timed_out = r.timed_out && !cancelled();
    }
    return r.status;
  }

  KubeApiOptions options;
  std::function<bool()> interrupted_by;  // may be null
  std::atomic<bool> interrupted{false};
  std::unique_ptr<http::HttpClient> client;
};

KubeApiClient::KubeApiClient(const KubeApiOptions& options, std::function<bool()> interrupted)
    : impl_(std::make_unique<Impl>(options, std::move(interrupted))) {}

KubeApiClient::~KubeApiClient() = default;

int KubeApiClient::request(KubeMethod method, const std::string& target, const std::string& body,
                           const KubeTimeouts& timeouts, const OnBody& on_body, std::string& error,
                           bool* timed_out) {
  return impl_->request(method, target, body, timeouts, on_body, error, timed_out);
}

KubeJsonAnswer KubeApiClient::request_json(KubeMethod method, const std::string& target,
                                           const std::string& body, const KubeTimeouts& timeouts,
                                           std::size_t max_body) {
  KubeJsonAnswer answer;
  std::string text;
  answer.status = request(
      method, target, body, timeouts,
      [&](std::string_view b) {
        if (text.size() + b.size() > max_body) {
          answer.error = "answer larger than " + std::to_string(max_body) + " bytes";
          return false;
        }
        text.append(b);
        return true;
      },
      answer.error);
  if (!answer.error.empty() || text.empty()) {
    return answer;
  }
  try {
    answer.body = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    answer.error = std::string("bad JSON: ") + e.what();
  }
  return answer;
}

void KubeApiClient::interrupt() {
  impl_->interrupted = true;
}

}  // namespace llmd::epp::discovery
