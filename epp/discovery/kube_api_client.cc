#include "epp/discovery/kube_api_client.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "common/util/files.h"

namespace llmd::epp::discovery {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

struct ApiUrl {
  bool tls = false;
  std::string host;
  std::string port;
};

ApiUrl parse_api_url(const std::string& url) {
  ApiUrl u;
  std::string rest;
  if (url.rfind("https://", 0) == 0) {
    u.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    throw std::invalid_argument("--kube-api-url: expected http(s)://host[:port], got '" + url + "'");
  }
  rest = rest.substr(0, rest.find('/'));
  const std::string default_port = u.tls ? "443" : "80";
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    const auto close = rest.find(']');
    if (close == std::string::npos) {
      throw std::invalid_argument("--kube-api-url: bad IPv6 address in '" + url + "'");
    }
    u.host = rest.substr(1, close - 1);
    u.port = close + 2 < rest.size() && rest[close + 1] == ':' ? rest.substr(close + 2)
                                                               : default_port;
  } else if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    u.host = rest.substr(0, colon);
    u.port = rest.substr(colon + 1);
  } else {
    u.host = rest;
    u.port = default_port;
  }
  if (u.host.empty() || u.port.empty()) {
    throw std::invalid_argument("--kube-api-url: no host in '" + url + "'");
  }
  return u;
}

bhttp::verb to_verb(KubeMethod m) {
  switch (m) {
    case KubeMethod::kPost:
      return bhttp::verb::post;
    case KubeMethod::kPut:
      return bhttp::verb::put;
    case KubeMethod::kGet:
      break;
  }
  return bhttp::verb::get;
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

struct KubeApiClient::Impl {
  Impl(const KubeApiOptions& o, std::function<bool()> pred)
      : options(o), interrupted_by(std::move(pred)) {
    if (options.api_url.empty()) {
      const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
      const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
      if (host == nullptr || port == nullptr) {
        throw std::invalid_argument(
            "Kubernetes API: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no "
            "--kube-api-url");
      }
      url = ApiUrl{true, host, port};
      // The API server's certificate names this service; the environment gives its IP.
      verify_name = "kubernetes.default.svc";
    } else {
      url = parse_api_url(options.api_url);
      verify_name = url.host;
    }
    if (url.tls) {
      ssl_ctx.set_verify_mode(ssl::verify_peer);
      if (!options.ca_file.empty()) {
        beast::error_code ec;
        ssl_ctx.load_verify_file(options.ca_file, ec);
        if (ec) {
          throw std::invalid_argument("Kubernetes API: cannot read CA " + options.ca_file + ": " +
                                      ec.message());
        }
      }
    }
  }

  bool cancelled() const { return interrupted || (interrupted_by && interrupted_by()); }

  // Runs the io_context until `done`; once cancelled, the connection's operations are cancelled.
  template <typename Stream>
  void pump(Stream& stream, const bool& done) {
    while (!done) {
      if (cancelled()) {
        beast::get_lowest_layer(stream).cancel();
      }
      ioc.run_for(std::chrono::milliseconds(100));
      if (ioc.stopped()) {
        ioc.restart();
      }
    }
  }

  template <typename Stream>
  void connect(Stream& stream, std::chrono::milliseconds timeout, beast::error_code& ec) {
    tcp::resolver resolver(ioc);
    bool done = false;
    tcp::resolver::results_type results;
    resolver.async_resolve(url.host, url.port, [&](beast::error_code e, auto r) {
      ec = e;
      results = r;
      done = true;
    });
    pump(stream, done);
    if (ec) {
      return;
    }
    done = false;
    beast::get_lowest_layer(stream).expires_after(timeout);
    beast::get_lowest_layer(stream).async_connect(results, [&](beast::error_code e, auto) {
      ec = e;
      done = true;
    });
    pump(stream, done);
  }

  // Sends the request and reads the header, then the body chunk by chunk into `on_body`.
  template <typename Stream>
  int exchange(Stream& stream, KubeMethod method, const std::string& target,
               const std::string& body, const KubeTimeouts& timeouts, const OnBody& on_body,
               std::string& error) {
    bhttp::request<bhttp::string_body> req{to_verb(method), target, 11};
    req.set(bhttp::field::host, url.host);
    req.set(bhttp::field::accept, "application/json");
    req.set(bhttp::field::user_agent, "llmd-epp");
    if (auto token = util::read_file(options.token_file)) {
      req.set(bhttp::field::authorization, "Bearer " + trimmed(*token));
    }
    if (method != KubeMethod::kGet) {
      req.set(bhttp::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    req.keep_alive(false);
    beast::error_code ec;
    bool done = false;
    beast::get_lowest_layer(stream).expires_after(timeouts.io);
    bhttp::async_write(stream, req, [&](beast::error_code e, std::size_t) {
      ec = e;
      done = true;
    });
    pump(stream, done);
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::buffer_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    if (!ec) {
      done = false;
      beast::get_lowest_layer(stream).expires_after(timeouts.io);
      bhttp::async_read_header(stream, buffer, parser, [&](beast::error_code e, std::size_t) {
        ec = e;
        done = true;
      });
      pump(stream, done);
    }
    if (ec) {
      error = cancelled() ? "interrupted" : ec.message();
      return 0;
    }
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      done = false;
      beast::get_lowest_layer(stream).expires_after(timeouts.body_read);
      bhttp::async_read_some(stream, buffer, parser, [&](beast::error_code e, std::size_t) {
        ec = e;
        done = true;
      });
      pump(stream, done);
      if (ec == bhttp::error::need_buffer) {
        ec = {};
      }
      if (ec) {
        error = cancelled() ? "interrupted" : ec.message();
        return parser.get().result_int();
      }
      const std::size_t got = sizeof(chunk) - parser.get().body().size;
      if (got > 0 && !on_body(std::string_view(chunk, got))) {
        break;
      }
    }
    return parser.get().result_int();
  }

  int request(KubeMethod method, const std::string& target, const std::string& body,
              const KubeTimeouts& timeouts, const OnBody& on_body, std::string& error) {
    if (cancelled()) {
      error = "interrupted";
      return 0;
    }
    beast::error_code ec;
    if (!url.tls) {
      beast::tcp_stream stream(ioc);
      connect(stream, timeouts.io, ec);
      if (ec) {
        error = cancelled() ? "interrupted" : ec.message();
        return 0;
      }
      const int status = exchange(stream, method, target, body, timeouts, on_body, error);
      beast::error_code ignored;
      stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      return status;
    }
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ssl_ctx);
    if (!SSL_set_tlsext_host_name(stream.native_handle(), verify_name.c_str())) {
      error = "cannot set TLS SNI";
      return 0;
    }
    stream.set_verify_callback(ssl::host_name_verification(verify_name));
    connect(stream, timeouts.io, ec);
    if (!ec) {
      bool done = false;
      beast::get_lowest_layer(stream).expires_after(timeouts.io);
      stream.async_handshake(ssl::stream_base::client, [&](beast::error_code e) {
        ec = e;
        done = true;
      });
      pump(stream, done);
    }
    if (ec) {
      error = cancelled() ? "interrupted" : ec.message();
      return 0;
    }
    const int status = exchange(stream, method, target, body, timeouts, on_body, error);
    beast::error_code ignored;
    beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_both, ignored);
    return status;
  }

  KubeApiOptions options;
  ApiUrl url;
  std::string verify_name;
  net::io_context ioc;
  ssl::context ssl_ctx{ssl::context::tls_client};
  std::function<bool()> interrupted_by;  // may be null
  std::atomic<bool> interrupted{false};
};

KubeApiClient::KubeApiClient(const KubeApiOptions& options, std::function<bool()> interrupted)
    : impl_(std::make_unique<Impl>(options, std::move(interrupted))) {}

KubeApiClient::~KubeApiClient() = default;

int KubeApiClient::request(KubeMethod method, const std::string& target, const std::string& body,
                           const KubeTimeouts& timeouts, const OnBody& on_body,
                           std::string& error) {
  return impl_->request(method, target, body, timeouts, on_body, error);
}

KubeJsonAnswer KubeApiClient::request_json(KubeMethod method, const std::string& target,
                                           const std::string& body, const KubeTimeouts& timeouts,
                                           std::size_t max_body) {
  KubeJsonAnswer answer;
  std::string text;
  answer.status = request(method, target, body, timeouts, [&](std::string_view b) {
    if (text.size() + b.size() > max_body) {
      answer.error = "answer larger than " + std::to_string(max_body) + " bytes";
      return false;
    }
    text.append(b);
    return true;
  }, answer.error);
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

void KubeApiClient::interrupt() { impl_->interrupted = true; }

}  // namespace llmd::epp::discovery
