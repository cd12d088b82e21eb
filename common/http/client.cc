#include "common/http/client.h"

#include <charconv>
#include <optional>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/http/stale_connection.h"

namespace llmd::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::uint64_t kResponseBodyLimit = 256ull * 1024 * 1024;

std::string_view to_sv(beast::string_view s) { return {s.data(), s.size()}; }

ClientResponse failure(const char* stage, const beast::error_code& ec) {
  ClientResponse r;
  r.error = std::string(stage) + ": " + ec.message();
  return r;
}

}  // namespace

std::optional<Url> parse_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  std::string_view rest(url);
  if (rest.size() <= kScheme.size() || to_lower(rest.substr(0, kScheme.size())) != kScheme) {
    return std::nullopt;
  }
  rest.remove_prefix(kScheme.size());
  if (rest.find_first_of(" \t\r\n?#@") != std::string_view::npos) {
    return std::nullopt;
  }
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  Url out;
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {  // IPv6 literal
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return std::nullopt;
    }
    out.host = std::string(authority.substr(1, close - 1));
    const auto after = authority.substr(close + 1);
    if (!after.empty() && (after.front() != ':' || after.size() == 1)) {
      return std::nullopt;
    }
    port_text = after.empty() ? after : after.substr(1);
  } else {
    const auto colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) {
        return std::nullopt;
      }
    }
  }
  if (out.host.empty()) {
    return std::nullopt;
  }
  if (!port_text.empty()) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(),
                                           value);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || value == 0 ||
        value > 65535) {
      return std::nullopt;
    }
    out.port = static_cast<uint16_t>(value);
  }
  while (!path.empty() && path.back() == '/') {
    path.remove_suffix(1);
  }
  out.base_path = std::string(path);
  return out;
}

std::string_view ClientResponse::header(std::string_view name) const {
  const auto key = to_lower(name);
  for (const auto& h : headers) {
    if (h.name == key) {
      return h.value;
    }
  }
  return {};
}

struct HttpClient::Impl {
  Impl(std::string host, uint16_t port, std::chrono::milliseconds timeout)
      : host_(std::move(host)), port_(port), timeout_(timeout) {}

  // Beast's timeouts only apply to async operations, so each step runs the private io_context
  // until the operation completes or tcp_stream's timer closes the socket.
  template <typename Start>
  beast::error_code run(Start start) {
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc_->restart();
    ioc_->run();
    return result;
  }

  // The io_context needs a descriptor of its own (an eventfd): it is made on first use, so that
  // a process out of descriptors gets a failed request it can retry, not an exception from a
  // constructor on a background thread.
  bool ensure_io(std::string& error) {
    if (stream_) {
      return true;
    }
    try {
      ioc_.emplace(1);
      stream_.emplace(*ioc_);
      return true;
    } catch (const std::exception& e) {
      stream_.reset();
      ioc_.reset();
      error = std::string("io: ") + e.what();
      return false;
    }
  }

  beast::error_code connect() {
    beast::error_code ec;
    if (endpoints_.empty()) {
      tcp::resolver resolver(*ioc_);
      endpoints_ = resolver.resolve(host_, std::to_string(port_), ec);
      if (ec) {
        return ec;
      }
    }
    stream_->expires_after(timeout_);
    ec = run([&](auto handler) { stream_->async_connect(endpoints_, handler); });
    if (ec) {
      endpoints_ = {};  // resolve again next time; the service may have moved
      return ec;
    }
    stream_->socket().set_option(tcp::no_delay(true), ec);
    connected_ = true;
    buffer_.clear();
    return {};
  }

  void close() {
    if (stream_) {
      beast::error_code ec;
      stream_->socket().shutdown(tcp::socket::shutdown_both, ec);
      stream_->close();
    }
    connected_ = false;
  }

  ClientResponse exchange(const bhttp::request<bhttp::string_body>& req) {
    if (std::string error; !ensure_io(error)) {
      ClientResponse r;
      r.error = std::move(error);
      return r;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool reused = connected_;
      if (!connected_) {
        if (auto ec = connect()) {
          return failure("connect", ec);
        }
      }
      stream_->expires_after(timeout_);
      auto ec = run([&](auto handler) { bhttp::async_write(*stream_, req, handler); });
      if (ec) {
        close();
        if (reused && attempt == 0 && detail::is_stale_connection(ec)) {
          continue;
        }
        return failure("write", ec);
      }
      bhttp::response_parser<bhttp::string_body> parser;
      parser.header_limit(64 * 1024);
      parser.body_limit(kResponseBodyLimit);
      stream_->expires_after(timeout_);
      ec = run([&](auto handler) { bhttp::async_read(*stream_, buffer_, parser, handler); });
      if (ec) {
        close();
        if (reused && attempt == 0 && detail::is_stale_connection(ec)) {
          continue;
        }
        return failure("read", ec);
      }
      auto msg = parser.release();
      ClientResponse out;
      out.status = static_cast<int>(msg.result_int());
      for (const auto& field : msg) {
        out.headers.push_back({to_lower(to_sv(field.name_string())), std::string(field.value())});
      }
      out.body = std::move(msg.body());
      if (!msg.keep_alive()) {
        close();
      }
      return out;
    }
    return failure("request", asio::error::connection_aborted);
  }

  const std::string host_;
  const uint16_t port_;
  std::chrono::milliseconds timeout_;
  std::optional<asio::io_context> ioc_;  // with stream_, made by ensure_io()
  tcp::resolver::results_type endpoints_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  bool connected_ = false;
};

HttpClient::HttpClient(std::string host, uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>(std::move(host), port, timeout)) {}

HttpClient::~HttpClient() = default;

ClientResponse HttpClient::request(const std::string& method, const std::string& target,
                                   const std::string& body, const std::string& content_type,
                                   const std::vector<Header>& extra_headers) {
  try {
    bhttp::request<bhttp::string_body> req;
    req.method_string(method);
    req.target(target.empty() ? "/" : target);
    req.version(11);
    const bool ipv6 = impl_->host_.find(':') != std::string::npos;
    const auto host = ipv6 ? "[" + impl_->host_ + "]" : impl_->host_;
    req.set(bhttp::field::host, host + ":" + std::to_string(impl_->port_));
    req.set(bhttp::field::user_agent, "llmd");
    if (!body.empty() && !content_type.empty()) {
      req.set(bhttp::field::content_type, content_type);
    }
    for (const auto& h : extra_headers) {
      req.set(h.name, h.value);
    }
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    return impl_->exchange(req);
  } catch (const std::exception& e) {
    impl_->close();
    ClientResponse r;
    r.error = std::string("request: ") + e.what();
    return r;
  }
}

void HttpClient::set_timeout(std::chrono::milliseconds timeout) { impl_->timeout_ = timeout; }

void HttpClient::close() { impl_->close(); }

}  // namespace llmd::http
