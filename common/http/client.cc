#include "common/http/client.h"

#include <charconv>
#include <optional>

#include <boost/asio/io_context.hpp>

#include "common/http/client_core.h"

namespace llmd::http {

namespace asio = boost::asio;

std::optional<Url> parse_url(const std::string& url, UrlSchemes schemes) {
  constexpr std::string_view kHttp = "http://";
  constexpr std::string_view kHttps = "https://";
  std::string_view rest(url);
  Url out;
  const auto has_scheme = [&rest](std::string_view scheme) {
    return rest.size() > scheme.size() && to_lower(rest.substr(0, scheme.size())) == scheme;
  };
  if (has_scheme(kHttp)) {
    rest.remove_prefix(kHttp.size());
  } else if (schemes == UrlSchemes::kHttpOrHttps && has_scheme(kHttps)) {
    rest.remove_prefix(kHttps.size());
    out.tls = true;
    out.port = 443;
  } else {
    return std::nullopt;
  }
  if (rest.find_first_of(" \t\r\n?#@") != std::string_view::npos) {
    return std::nullopt;
  }
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
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
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
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

// Drives the core on a private io_context, on the calling thread, until the exchange's
// callback has run. The io_context and the core are made on first use: they need descriptors
// of their own (epoll, eventfd, timerfd), and a process out of descriptors must get a failed
// request it can retry, not an exception from a constructor on a background thread.
struct HttpClient::Impl {
  Impl(Url o, Options opts) : origin(std::move(o)), options(std::move(opts)) {
    origin.base_path.clear();
  }

  bool ensure_io(std::string& error) {
    if (core) {
      return true;
    }
    try {
      ioc.emplace(1);
      ClientCore::Options c;
      c.max_idle_per_origin = 1;  // one kept-alive connection, as the client is sequential
      c.tls = options.tls;
      core.emplace(ioc->get_executor(), std::move(c));
      return true;
    } catch (const std::exception& e) {
      core.reset();
      ioc.reset();
      error = std::string("io: ") + e.what();
      return false;
    }
  }

  // Runs handlers until `done` holds (false: it cannot any more). With an `interrupted`
  // predicate, it is polled every 100 ms and cancels the exchange when it turns true.
  bool wait(const bool& done, ClientCall* call) {
    bool cancelled = false;
    int idle_rounds = 0;
    while (!done) {
      if (options.interrupted && !cancelled && call != nullptr && options.interrupted()) {
        cancelled = true;
        call->cancel();
      }
      if (ioc->stopped()) {
        ioc->restart();
      }
      const std::size_t ran =
          options.interrupted ? ioc->run_one_for(std::chrono::milliseconds(100)) : ioc->run_one();
      // Nothing ran and nothing is pending: the exchange cannot end (it always has an
      // operation or a posted handler while it runs), so stop rather than spin.
      if (ran == 0 && ioc->stopped() && ++idle_rounds > 1) {
        return false;
      }
      if (ran != 0) {
        idle_rounds = 0;
      }
    }
    return true;
  }

  // Runs `exchange` with the core made, as a value whatever happens: no core (out of
  // descriptors) or an exception (out of memory) is a failed request, and the next starts
  // afresh.
  template <typename Exchange>
  ClientResponse guarded(Exchange exchange) {
    ClientResponse failed;
    try {
      if (ensure_io(failed.error)) {
        return exchange();
      }
    } catch (const std::exception& e) {
      core.reset();
      ioc.reset();
      failed.error = std::string("request: ") + e.what();
    }
    return failed;
  }

  ClientRequest make_request(const std::string& method, const std::string& target,
                             const std::string& body, const std::string& content_type,
                             const std::vector<Header>& extra_headers) const {
    ClientRequest req;
    req.method = method;
    req.target = target.empty() ? "/" : target;
    req.headers.push_back({"user-agent", "llmd"});
    for (const auto& h : extra_headers) {  // a caller's header replaces a default of its name
      const auto name = to_lower(h.name);
      bool replaced = false;
      for (auto& mine : req.headers) {
        if (mine.name == name) {
          mine.value = h.value;
          replaced = true;
        }
      }
      if (!replaced) {
        req.headers.push_back({name, h.value});
      }
    }
    req.content_type = content_type;
    req.body = body;
    req.keep_alive = options.keep_alive;
    return req;
  }

  ClientResponse fetch(ClientRequest req) {
    req.want_headers = true;
    ClientTimeouts timeouts;
    timeouts.connect = options.timeout;
    timeouts.response = options.timeout;
    ClientResponse out;
    bool done = false;
    auto call = core->fetch(origin, std::move(req), timeouts, [&](ClientResponse r) {
      out = std::move(r);
      done = true;
    });
    if (!wait(done, call.get())) {
      out.error = "request: the exchange ended without an answer";
    }
    return out;
  }

  ClientResponse stream(ClientRequest req, const ClientTimeouts& timeouts, const OnBody& on_body) {
    ClientResponse head;
    bool done = false;
    ClientCallPtr body;
    auto call =
        core->open(origin, std::move(req), timeouts, [&](ClientResponse h, ClientCallPtr b) {
          head = std::move(h);
          body = std::move(b);
          done = true;
        });
    if (!wait(done, call.get())) {
      head.error = "request: the exchange ended without an answer";
      return head;
    }
    while (body) {  // null: failed before the header
      BodyPiece piece;
      done = false;
      body->read([&](BodyPiece p) {
        piece = std::move(p);
        done = true;
      });
      if (!wait(done, body.get())) {
        head.error = "read: the exchange ended without an answer";
        break;
      }
      if (!piece.error.empty()) {
        head.error = std::move(piece.error);
        head.timed_out = piece.timed_out;
        break;
      }
      if (!piece.bytes.empty() && !on_body(piece.bytes)) {
        body->cancel();  // the rest is not wanted: the connection cannot be reused
        break;
      }
      if (piece.end) {
        break;
      }
    }
    return head;
  }

  Url origin;
  Options options;
  std::optional<asio::io_context> ioc;  // with core, made by ensure_io()
  std::optional<ClientCore> core;       // after ioc: its connections close first
};

namespace {

Url origin_of(std::string host, uint16_t port) {
  Url u;
  u.host = std::move(host);
  u.port = port;
  return u;
}

HttpClient::Options with_timeout(std::chrono::milliseconds timeout) {
  HttpClient::Options o;
  o.timeout = timeout;
  return o;
}

}  // namespace

HttpClient::HttpClient(std::string host, uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>(origin_of(std::move(host), port), with_timeout(timeout))) {}

HttpClient::HttpClient(const Url& origin, Options options)
    : impl_(std::make_unique<Impl>(origin, std::move(options))) {}

HttpClient::~HttpClient() = default;

ClientResponse HttpClient::request(const std::string& method, const std::string& target,
                                   const std::string& body, const std::string& content_type,
                                   const std::vector<Header>& extra_headers) {
  return impl_->guarded([&] {
    const std::string type = body.empty() ? std::string() : content_type;
    return impl_->fetch(impl_->make_request(method, target, body, type, extra_headers));
  });
}

ClientResponse HttpClient::request_streamed(const std::string& method, const std::string& target,
                                            const std::string& body,
                                            const std::string& content_type,
                                            const std::vector<Header>& extra_headers,
                                            const ClientTimeouts& timeouts, const OnBody& on_body) {
  return impl_->guarded([&] {
    return impl_->stream(impl_->make_request(method, target, body, content_type, extra_headers),
                         timeouts, on_body);
  });
}

void HttpClient::set_timeout(std::chrono::milliseconds timeout) {
  impl_->options.timeout = timeout;
}

void HttpClient::close() {
  if (impl_->core) {
    impl_->core->close_idle();
  }
}

}  // namespace llmd::http
