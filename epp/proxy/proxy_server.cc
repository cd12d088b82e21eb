#include "epp/proxy/proxy_server.h"

#include <utility>  // Boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "epp/features/feature_row.h"
#include "epp/proxy/admission_gate.h"
#include "epp/proxy/openai_request.h"
#include "epp/proxy/request_context.h"
#include "epp/proxy/sse_scanner.h"

namespace llmd::epp {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
// Boost 1.74 has no as_tuple: errors are redirected into a local error_code instead.
auto redirect(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A stream the pod broke off ends with the same error object as one SSE event.
std::string mid_stream_error_event() {
  return "data: " +
         openai_error_body(502, "The model server failed while streaming the response") + "\n\n";
}

http::response<http::string_body> json_error(int status, const std::string& detail,
                                             unsigned version, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(status), version};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::server, "llmd-epp");
  res.body() = openai_error_body(status, detail);
  if (status == 429 || status == 503) {
    // Without it, SDKs retry at once; a second is the scale of a queue turning over.
    res.set(http::field::retry_after, "1");
  }
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

std::optional<std::string> header_opt(const http::request<http::string_body>& req,
                                      std::string_view name) {
  auto it = req.find(beast::string_view(name.data(), name.size()));
  if (it == req.end()) {
    return std::nullopt;
  }
  return std::string(it->value());
}

std::pair<std::string, std::string> split_address(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return {address, "80"};
  }
  return {address.substr(0, colon), address.substr(colon + 1)};
}

// Headers that describe one connection, not the message (RFC 9110 section 7.6.1).
bool is_hop_by_hop(http::field f) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::proxy_connection:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
      return true;
    default:
      return false;
  }
}

// nginx's code for a request whose client went away before an answer.
constexpr int kClientClosedRequest = 499;

// Awaits a callback-style operation without holding a thread: `start(done)` begins it, and
// done(T), called once on any thread, resumes the coroutine on its own executor.
// `start` is taken by reference and every object is named: GCC 12 destroys non-trivial
// temporaries of a co_await full-expression twice (see handle()).
template <typename T, typename Start>
net::awaitable<T> await_callback(Start& start) {
  auto executor = co_await net::this_coro::executor;
  auto initiation = [executor, &start](auto handler) {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    start([executor, h](T value) {
      net::post(executor, [h, value = std::move(value)]() mutable {
        // The handler owns the coroutine's stack while it runs: move it out, so the copies
        // of `h` that the scheduler may still drop on its own threads hold an empty one.
        auto handler = std::move(*h);
        handler(std::move(value));
      });
    });
  };
  T result = co_await net::async_initiate<const net::use_awaitable_t<>&, void(T)>(
      initiation, net::use_awaitable);
  co_return result;
}

// Continues a scheduling step on the request's strand.
template <typename Executor>
SchedulingPort::Resume resume_on(Executor executor) {
  return [executor](std::function<void()> f) { net::post(executor, std::move(f)); };
}

uint64_t new_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}


}  // namespace

struct ProxyServer::Impl {
  Impl(ProxyOptions o, SchedulingPort& s, PodRegistry& r, CompletionSink& k, AdmissionGate* g)
      : options(std::move(o)), scheduler(s), registry(r), sink(k), gate(g),
        ioc(options.io_threads),
        acceptor(ioc) {}

  ProxyOptions options;
  SchedulingPort& scheduler;
  PodRegistry& registry;
  CompletionSink& sink;
  AdmissionGate* gate;  // null: no router queue
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::atomic<bool> stopped{false};
  std::atomic<bool> draining{false};  // no new requests; those in flight finish
  std::atomic<int> active{0};         // requests between their read and their last byte
  std::atomic<std::size_t> body_bytes{0};  // Content-Length of the requests being served

  // A request's share of the body budget, returned when the request is done.
  struct BodyReservation {
    BodyReservation(std::atomic<std::size_t>& total, std::size_t n) : total_(total), n_(n) {}
    ~BodyReservation() { total_ -= n_; }
    BodyReservation(const BodyReservation&) = delete;
    BodyReservation& operator=(const BodyReservation&) = delete;
    std::atomic<std::size_t>& total_;
    std::size_t n_;
  };
  // Reserves `n` bytes, or nothing when that would pass the budget.
  std::optional<std::size_t> reserve_body(std::size_t n) {
    std::size_t held = body_bytes.load();
    do {
      if (held + n > options.body_budget) {
        return std::nullopt;
      }
    } while (!body_bytes.compare_exchange_weak(held, held + n));
    return n;
  }

  // Reads and drops what a client still sends after an early final answer (bounded), so that
  // closing does not reset the connection and destroy the answer before the client read it.
  net::awaitable<void> linger(beast::tcp_stream& stream) {
    beast::error_code sec;
    stream.socket().shutdown(tcp::socket::shutdown_send, sec);
    stream.expires_after(std::chrono::seconds(5));
    std::size_t drained = 0;
    char scratch[16384];
    while (drained < 4 * options.body_limit) {
      beast::error_code rec;
      drained += co_await stream.async_read_some(net::buffer(scratch), redirect(rec));
      if (rec) {
        break;
      }
    }
  }

  // Counts a request as active for drain() for as long as it lives (RAII in the coroutine).
  struct ActiveRequest {
    explicit ActiveRequest(std::atomic<int>& n) : n_(n) { ++n_; }
    ~ActiveRequest() { --n_; }
    ActiveRequest(const ActiveRequest&) = delete;
    ActiveRequest& operator=(const ActiveRequest&) = delete;
    std::atomic<int>& n_;
  };

  net::awaitable<void> accept_loop() {
    // Out of file descriptors (EMFILE/ENFILE) the pending connection stays in the backlog and
    // the listener stays readable: retrying at once would spin a core. Back off instead,
    // 10 ms doubling to 1 s, until an accept succeeds.
    std::chrono::milliseconds backoff{0};
    net::steady_timer pause(ioc);
    while (!stopped && !draining) {
      beast::error_code ec;
      tcp::socket socket = co_await acceptor.async_accept(net::make_strand(ioc), redirect(ec));
      if (ec) {
        if (stopped || draining || ec == net::error::operation_aborted) {
          co_return;
        }
        backoff = std::clamp(backoff * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
        if (backoff == std::chrono::milliseconds(1000) || backoff == std::chrono::milliseconds(10)) {
          spdlog::warn("proxy accept failed: {}; retrying in {} ms", ec.message(), backoff.count());
        }
        pause.expires_after(backoff);
        beast::error_code tec;
        co_await pause.async_wait(redirect(tec));
        continue;
      }
      backoff = std::chrono::milliseconds(0);
      socket.set_option(tcp::no_delay(true));
      net::co_spawn(socket.get_executor(), session(beast::tcp_stream(std::move(socket))),
                    net::detached);
    }
  }

  // The EPP's own last answer on a connection that then closes (counted as a client request);
  // with `linger`, what the client still uploads is drained first (see linger()).
  // `detail` is a literal or a named string (GCC 12 coroutine temporaries, see handle()).
  net::awaitable<void> answer_and_close(beast::tcp_stream& stream, int status,
                                        std::string_view detail, unsigned version, bool drain) {
    sink.on_rejected("", status);
    auto res = json_error(status, std::string(detail), version, false);
    stream.expires_after(std::chrono::seconds(5));
    beast::error_code wec;
    co_await http::async_write(stream, res, redirect(wec));
    if (drain && !wec) {
      co_await linger(stream);
    }
  }

  // One client connection: requests in order, keep-alive.
  net::awaitable<void> session(beast::tcp_stream stream) {
    beast::flat_buffer buffer;
    try {
      while (!stopped) {
        http::request_parser<http::string_body> parser;
        parser.body_limit(options.body_limit);
        beast::error_code ec;
        if (buffer.size() == 0) {
          // Between requests a kept-alive connection may idle...
          stream.expires_after(options.idle_timeout);
          const std::size_t n =
              co_await stream.async_read_some(buffer.prepare(4096), redirect(ec));
          buffer.commit(n);
          if (ec) {
            break;  // closed, reset or idle: nothing to answer
          }
        }
        // ...but once a request has begun, its headers must arrive within the header timeout
        // (a slow-headers client cannot hold a connection), and the body within the idle one.
        stream.expires_after(options.header_timeout);
        co_await http::async_read_header(stream, buffer, parser, redirect(ec));
        std::optional<BodyReservation> reservation;
        if (!ec) {
          const std::size_t length =
              static_cast<std::size_t>(parser.content_length().value_or(0));
          if (length <= options.body_limit) {  // larger ones get their 413 from the parser
            if (auto n = reserve_body(length)) {
              reservation.emplace(body_bytes, *n);
            } else {
              co_await answer_and_close(stream, 503,
                                        "EPP is at its request-body memory budget, retry",
                                        parser.get().version(), true);
              break;
            }
          }
          stream.expires_after(options.idle_timeout);
          co_await http::async_read(stream, buffer, parser, redirect(ec));
        }
        if (ec == http::error::end_of_stream || ec == net::error::eof) {
          break;
        }
        if (ec == http::error::header_limit) {
          co_await answer_and_close(stream, 431, "Request header fields too large", 11, false);
          break;
        }
        if (ec == http::error::body_limit) {
          // The client is still uploading: SDKs that see a reset instead of the 413 report a
          // broken pipe and upload again.
          co_await answer_and_close(stream, 413, "Request body too large", 11, true);
          break;
        }
        if (ec) {
          if (ec != beast::error::timeout && ec != net::error::operation_aborted) {
            co_await answer_and_close(stream, 400, "Malformed HTTP request", 11, false);
          }
          break;
        }
        if (draining) {
          // Arrived on a kept-alive connection after the drain began: send it elsewhere.
          co_await answer_and_close(stream, 503, "EPP is shutting down", parser.get().version(),
                                    false);
          break;
        }
        bool keep = co_await handle(stream, parser.release());
        if (!keep || draining) {
          break;
        }
      }
    } catch (const std::exception& e) {
      spdlog::error("proxy session error: {}", e.what());
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  // Returns whether the client connection stays open.
  net::awaitable<bool> handle(beast::tcp_stream& client, http::request<http::string_body> req) {
    ActiveRequest counted(active);
    // Owns the request's slots and tickets: whatever path this coroutine leaves by (including
    // its destruction), each is given back once.
    RequestContext request(
        LifecycleServices{&registry, &sink, gate, options.unhealthy_cooldown}, Clock::now());
    const bool keep_alive = req.keep_alive();
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    if (req.method() == http::verb::get &&
        (path == "/v1/models" || path.starts_with("/v1/models/"))) {
      auto res = models_response(path, req.version(), keep_alive);
      beast::error_code ec;
      co_await http::async_write(client, res, redirect(ec));
      co_return !ec && keep_alive;
    }
    if (req.method() != http::verb::post ||
        (path != "/v1/completions" && path != "/v1/chat/completions")) {
      const bool known = path == "/v1/completions" || path == "/v1/chat/completions";
      sink.on_rejected("", known ? 405 : 404);
      auto res = json_error(known ? 405 : 404, "Use POST /v1/completions or /v1/chat/completions",
                            req.version(), keep_alive);
      if (known) {
        res.set(http::field::allow, "POST");
      }
      beast::error_code ec;
      co_await http::async_write(client, res, redirect(ec));
      co_return !ec && keep_alive;
    }
    const InboundHeaders headers =
        read_inbound_headers([&req](std::string_view name) { return header_opt(req, name); });
    // GCC 12 destroys temporaries inside a co_await full-expression twice: callers pass named
    // strings or literals only (string_view keeps the argument trivially destructible).
    ParsedRequest parsed;
    auto reply_error = [&](int status, std::string_view detail) -> net::awaitable<bool> {
      request.rejected(parsed.request.model, status);
      auto res = json_error(status, std::string(detail), req.version(), keep_alive);
      res.set("x-request-id", headers.request_id);
      beast::error_code ec;
      co_await http::async_write(client, res, redirect(ec));
      co_return !ec && keep_alive;
    };
    const SchedulingGenerationPtr config = scheduler.generation();
    const auto& objectives = config->objectives;
    RequestDefaults defaults{options.default_prediction, objectives.get()};
    if (auto error = parse_openai_request(path, req.body(), headers, defaults, parsed)) {
      co_return co_await reply_error(400, *error);
    }
    if (parsed.unknown_objective) {
      spdlog::debug("request {}: unknown objective '{}', using defaults", headers.request_id,
                    parsed.request.objective);
    }
    const Route route = scheduler.route(parsed.request, *config);
    PickResult pick;
    if (route.upstream) {
      pick.ranked.push_back(*route.upstream);  // no scheduling, no retry target
    } else {
      if (gate != nullptr) {
        AdmissionVerdict verdict = co_await admit(client, parsed, route);
        if (verdict.status == kClientClosedRequest) {
          spdlog::debug("request {}: client disconnected while queued", headers.request_id);
          co_return false;
        }
        if (verdict.status != 200) {
          co_return co_await reply_error(verdict.status, verdict.detail);
        }
        request.admitted(route.pool);
      }
      // Scheduling may wait for predictions: the coroutine is suspended meanwhile (no thread
      // waits); the cycle continues on this strand when they arrive.
      Rng rng(new_seed());
      auto executor = co_await net::this_coro::executor;
      auto start_pick = [this, &parsed, &route, &config, &rng, executor](auto done) {
        scheduler.pick_async(parsed.request, route, *config, rng, resume_on(executor),
                             std::move(done));
      };
      pick = co_await await_callback<PickResult>(start_pick);
      if (pick.status != 200 || pick.ranked.empty()) {
        int status = pick.status != 200 ? pick.status : 503;
        if (pick.detail.empty()) {
          pick.detail = "No ready endpoint";
        }
        co_return co_await reply_error(status, pick.detail);
      }
    }
    const std::optional<std::string> body =
        upstream_body(parsed, route.override_params, options.forward_priority);
    const std::string model = target_model(parsed, route.override_params);
    const int max_attempts = pick.ranked.size() > 1 ? 2 : 1;
    for (int attempt = 0; attempt < max_attempts; ++attempt) {
      const Endpoint& pod = pick.ranked[static_cast<std::size_t>(attempt)];
      Upstream up{pod, route, body ? *body : req.body(), model};
      auto outcome = co_await forward(client, req, parsed, up, request, attempt + 1);
      if (outcome == Outcome::kDone) {
        co_return keep_alive && req.version() >= 11;  // HTTP/1.0 bodies end with the connection
      }
      if (outcome == Outcome::kClientGone || outcome == Outcome::kAborted) {
        co_return false;
      }
      spdlog::warn("request {}: {} failed before the first byte (attempt {})",
                   headers.request_id, pod.name, attempt + 1);
    }
    co_return co_await reply_error(502, "Upstream model server failed");
  }

  // GET /v1/models (and /v1/models/{id}) in vLLM's shape: the models the ready pods serve, as
  // their metrics name them, so SDKs and benchmark tools can discover what to ask for.
  http::response<http::string_body> models_response(const std::string& path, unsigned version,
                                                    bool keep_alive) {
    std::set<std::string> models;
    for (const auto& pod : registry.candidates(Clock::now())) {
      models.insert(pod.metrics.models.begin(), pod.metrics.models.end());
    }
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    auto card = [created](const std::string& id) {
      return nlohmann::json{{"id", id},          {"object", "model"}, {"created", created},
                            {"owned_by", "vllm"}, {"root", id},       {"parent", nullptr},
                            {"permission", nlohmann::json::array()}};
    };
    http::response<http::string_body> res{http::status::ok, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::server, "llmd-epp");
    if (path == "/v1/models") {
      nlohmann::json data = nlohmann::json::array();
      for (const auto& m : models) {
        data.push_back(card(m));
      }
      res.body() = nlohmann::json{{"object", "list"}, {"data", data}}.dump();
    } else {
      const std::string id = path.substr(std::string_view("/v1/models/").size());
      if (models.count(id) == 0) {
        res = json_error(404, "The model '" + id + "' does not exist", version, keep_alive);
      } else {
        res.body() = card(id).dump();
      }
    }
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
  }

  // Waits in the router queue when every pod of the route's pool is saturated. A client that
  // disconnects meanwhile leaves the queue (kClientClosedRequest): it is never dispatched.
  net::awaitable<AdmissionVerdict> admit(beast::tcp_stream& client, const ParsedRequest& parsed,
                                         const Route& route) {
    AdmissionRequest ar;
    ar.pool = route.pool;
    ar.strict_priority = parsed.request.strict_priority;
    ar.priority = parsed.request.priority;
    ar.slo_ttft_ms = parsed.request.slo_ttft_ms;
    if (gate->needs_service_estimate()) {
      auto executor = co_await net::this_coro::executor;
      auto start_estimate = [this, &parsed, executor](auto done) {
        scheduler.estimate_service_ms_async(parsed.request, parsed.max_tokens,
                                            resume_on(executor), std::move(done));
      };
      ar.predicted_service_ms = co_await await_callback<double>(start_estimate);
    }
    auto executor = co_await net::this_coro::executor;
    auto timer = std::make_shared<net::steady_timer>(executor);
    auto verdict = std::make_shared<std::optional<AdmissionVerdict>>();
    // The gate wakes us from any thread: hop onto this coroutine's strand first; the timer
    // wait below started before that handler can run (both on the same strand).
    AdmissionGate* g = gate;
    const std::string pool_name = route.pool;
    auto ticket = gate->enter(ar, [executor, timer, verdict, g, pool_name](AdmissionVerdict v) {
      net::post(executor, [timer, verdict, v, g, pool_name] {
        if (verdict->has_value()) {
          // The client left first; an admission that raced with it gives its slot back.
          if (v.status == 200) {
            g->on_scheduled(pool_name);
          }
          return;
        }
        *verdict = v;
        timer->cancel();
      });
    });
    if (!ticket.queued) {
      co_return ticket.verdict;
    }
    // Watch the idle client socket while queued: readable with nothing to read is its FIN.
    // (Bytes of a pipelined next request also make it readable: then stop watching.)
    const uint64_t id = ticket.id;
    client.socket().async_wait(
        tcp::socket::wait_read, [&client, timer, verdict, g, id](beast::error_code wec) {
          if (wec == net::error::operation_aborted || verdict->has_value()) {
            return;
          }
          beast::error_code aec;
          if (!wec && client.socket().available(aec) > 0 && !aec) {
            return;
          }
          g->cancel(id);
          *verdict = AdmissionVerdict{kClientClosedRequest, "client disconnected while queued"};
          timer->cancel();
        });
    timer->expires_after(gate->max_wait() + std::chrono::seconds(1));
    beast::error_code ec;
    co_await timer->async_wait(redirect(ec));
    if (!verdict->has_value()) {
      // Only when the gate never answered (it always does by its own timeout): give up.
      gate->cancel(ticket.id);
      *verdict = AdmissionVerdict{503, "router queue: no answer"};
    }
    if ((*verdict)->status != kClientClosedRequest) {
      // Ends the watch above: its handler sees a verdict and touches nothing.
      beast::error_code cec;
      client.socket().cancel(cec);
    }
    co_return **verdict;
  }

  struct Upstream {
    const Endpoint& pod;
    const Route& route;
    const std::string& body;
    const std::string& model;
  };

  // kAborted: the response started but could not be completed; the connection must close.
  enum class Outcome { kDone, kRetryable, kClientGone, kAborted };

  net::awaitable<Outcome> forward(beast::tcp_stream& client,
                                  const http::request<http::string_body>& req,
                                  const ParsedRequest& parsed, const Upstream& target,
                                  RequestContext& request, int number) {
    const Endpoint& pod = target.pod;
    const std::string& request_id = parsed.request.request_id;
    PodAttempt attempt = request.dispatch(parsed.request, pod, target.route, target.model,
                                          parsed.max_tokens, number, Clock::now());
    CompletedRequest& done = attempt.record();
    auto [host, port] = split_address(pod.address);
    beast::tcp_stream upstream(client.get_executor());
    beast::error_code rec;
    upstream.expires_after(options.upstream_connect_timeout);
    // Pod addresses are usually IPs: skip the resolver (it runs on a helper thread).
    beast::error_code ip_ec;
    auto ip = net::ip::make_address(host, ip_ec);
    if (!ip_ec) {
      co_await upstream.async_connect(tcp::endpoint(ip, static_cast<uint16_t>(std::stoi(port))),
                                      redirect(rec));
    } else {
      tcp::resolver resolver(client.get_executor());
      auto endpoints = co_await resolver.async_resolve(host, port, redirect(rec));
      if (!rec) {
        co_await upstream.async_connect(endpoints, redirect(rec));
      }
    }
    if (rec) {
      spdlog::warn("connect to pod {} ({}) failed: {}", pod.name, pod.address, rec.message());
      attempt.pod_failed(502, true, Clock::now());
      co_return Outcome::kRetryable;
    }
    upstream.socket().set_option(tcp::no_delay(true));
    const std::string path = target.route.base_path + std::string(req.target());
    http::request<http::string_body> up{http::verb::post, path, 11};
    // End-to-end client headers travel on (Authorization for pods started with --api-key,
    // OpenAI-Organization, trace context, ...); hop-by-hop ones and those the EPP sets do not.
    for (const auto& field : req) {
      if (!is_hop_by_hop(field.name()) && field.name() != http::field::host &&
          field.name() != http::field::content_length &&
          field.name() != http::field::content_type && field.name() != http::field::expect &&
          !beast::iequals(field.name_string(), "x-request-id")) {
        up.insert(field.name(), field.name_string(), field.value());
      }
    }
    up.set(http::field::host, pod.address);
    up.set(http::field::content_type, "application/json");
    up.set("x-request-id", request_id);
    up.keep_alive(false);
    up.body() = target.body;
    up.prepare_payload();
    upstream.expires_after(options.upstream_first_byte_timeout);
    beast::error_code wec;
    co_await http::async_write(upstream, up, redirect(wec));
    beast::flat_buffer ubuf;
    http::response_parser<http::buffer_body> rp;
    rp.body_limit(std::numeric_limits<std::uint64_t>::max());
    beast::error_code hec = wec;
    if (!hec) {
      beast::error_code e;
      co_await http::async_read_header(upstream, ubuf, rp, redirect(e));
      hec = e;
    }
    if (hec || rp.get().result_int() >= 500) {
      int status = hec ? 504 : rp.get().result_int();
      spdlog::warn("pod {} ({}) failed: {}", pod.name, pod.address,
                   hec ? hec.message() : "HTTP " + std::to_string(status));
      attempt.pod_failed(status, true, Clock::now());
      co_return Outcome::kRetryable;
    }
    // Headers to the client; the body follows chunked as it arrives.
    http::response<http::empty_body> head{rp.get().result(), req.version()};
    for (const auto& field : rp.get()) {
      // A pod's cookies are not the router's to hand out (they would pin or leak sessions).
      if (field.name() == http::field::content_length || is_hop_by_hop(field.name()) ||
          field.name() == http::field::set_cookie) {
        continue;
      }
      head.insert(field.name(), field.name_string(), field.value());
    }
    head.set("x-gateway-destination-endpoint", pod.address);
    head.set("x-request-id", request_id);
    // HTTP/1.0 has no chunked encoding: the body is sent as it comes and ends with the
    // connection (so a broken-off body is as visible as a missing last chunk).
    const bool chunked = req.version() >= 11;
    head.chunked(chunked);
    head.keep_alive(chunked && req.keep_alive());
    auto send_piece = [&](std::string_view bytes, beast::error_code& wec) -> net::awaitable<void> {
      if (chunked) {
        co_await net::async_write(client, http::make_chunk(net::buffer(bytes)), redirect(wec));
      } else {
        co_await net::async_write(client, net::buffer(bytes), redirect(wec));
      }
    };
    http::response_serializer<http::empty_body> sr{head};
    client.expires_after(options.upstream_idle_timeout);
    beast::error_code hwec;
    co_await http::async_write_header(client, sr, redirect(hwec));
    if (hwec) {
      attempt.client_gone(Clock::now());
      co_return Outcome::kClientGone;
    }
    SseScanner scanner;
    std::string whole;  // non-streaming body, for usage
    char chunk[16384];
    bool ok = true;
    while (!rp.is_done()) {
      rp.get().body().data = chunk;
      rp.get().body().size = sizeof(chunk);
      upstream.expires_after(options.upstream_idle_timeout);
      beast::error_code rec2;
      co_await http::async_read_some(upstream, ubuf, rp, redirect(rec2));
      if (rec2 == http::error::need_buffer) {
        rec2 = {};
      }
      if (rec2) {
        ok = false;
        break;
      }
      std::size_t got = sizeof(chunk) - rp.get().body().size;
      if (got == 0) {
        continue;
      }
      std::string_view piece(chunk, got);
      if (parsed.request.streaming) {
        if (scanner.feed(piece)) {
          attempt.first_token(Clock::now());
        }
      } else if (whole.size() < options.body_limit) {
        whole.append(piece);
      }
      client.expires_after(options.upstream_idle_timeout);
      beast::error_code cwec;
      co_await send_piece(piece, cwec);
      if (cwec) {
        attempt.client_gone(Clock::now());
        co_return Outcome::kClientGone;
      }
    }
    if (!ok) {
      // The pod failed after the response started. A clean end would pass a truncated answer
      // off as complete: a stream gets an error event, and neither kind of body gets its
      // terminating chunk, so every HTTP client reports an incomplete response.
      spdlog::warn("request {}: pod {} ({}) failed mid-response", request_id, pod.name,
                   pod.address);
      if (parsed.request.streaming) {
        const std::string event = mid_stream_error_event();
        beast::error_code eec;
        co_await send_piece(event, eec);
      }
      attempt.pod_failed(502, false, Clock::now());
      co_return Outcome::kAborted;
    }
    beast::error_code lec;
    if (chunked) {
      co_await net::async_write(client, http::make_chunk_last(), redirect(lec));
    }
    done.e2e_ms = std::chrono::duration<double, std::milli>(Clock::now() - attempt.dispatched())
                      .count();
    if (parsed.request.streaming) {
      done.completion_tokens = scanner.completion_tokens();
      if (!done.completion_tokens && scanner.content_chunks() > 0) {
        done.completion_tokens = scanner.content_chunks();  // no usage chunk: count the tokens
      }
      done.cached_tokens = scanner.cached_tokens();
      done.continuation_prompt = continuation_prompt(parsed, scanner.generated_text());
    } else {
      Usage u = parse_usage(whole);
      done.completion_tokens = u.completion_tokens;
      done.cached_tokens = u.cached_tokens;
      done.ttft_ms = done.e2e_ms;
      done.continuation_prompt = continuation_prompt(parsed, u.generated_text);
    }
    const int status = rp.get().result_int();
    attempt.answered(status, Clock::now());
    spdlog::debug("request {} -> {} ({}) status {} ttft {:.1f} ms e2e {:.1f} ms, total {:.1f} ms",
                  request_id, pod.name, pod.address, status, done.ttft_ms, done.e2e_ms,
                  ms_since(request.received()));
    if (lec) {
      co_return Outcome::kClientGone;
    }
    co_return Outcome::kDone;
  }
};

ProxyServer::ProxyServer(ProxyOptions options, SchedulingPort& scheduler, PodRegistry& registry,
                         CompletionSink& sink, AdmissionGate* gate)
    : impl_(std::make_unique<Impl>(std::move(options), scheduler, registry, sink, gate)) {}

ProxyServer::~ProxyServer() { stop(); }

void ProxyServer::start() {
  auto& i = *impl_;
  beast::error_code ec;
  tcp::endpoint ep(net::ip::make_address(i.options.host, ec), i.options.port);
  if (ec) {
    throw std::runtime_error("bad proxy host '" + i.options.host + "'");
  }
  i.acceptor.open(ep.protocol());
  i.acceptor.set_option(net::socket_base::reuse_address(true));
  i.acceptor.bind(ep, ec);
  if (ec) {
    throw std::runtime_error(fmt::format("cannot bind {}:{}: {}", i.options.host, i.options.port,
                                         ec.message()));
  }
  i.acceptor.listen(net::socket_base::max_listen_connections);
  net::co_spawn(i.ioc, i.accept_loop(), net::detached);
}

uint16_t ProxyServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void ProxyServer::run() {
  std::vector<std::thread> threads;
  for (int t = 1; t < impl_->options.io_threads; ++t) {
    threads.emplace_back([this] { impl_->ioc.run(); });
  }
  impl_->ioc.run();
  for (auto& t : threads) {
    t.join();
  }
}

void ProxyServer::drain(std::chrono::milliseconds timeout) {
  auto& i = *impl_;
  if (i.draining.exchange(true)) {
    return;
  }
  net::post(i.ioc, [&i] {
    beast::error_code ec;
    i.acceptor.close(ec);
  });
  if (i.gate != nullptr) {
    i.gate->close("EPP is shutting down");
  }
  const auto deadline = Clock::now() + timeout;
  int last_logged = -1;
  while (i.active > 0 && Clock::now() < deadline) {
    if (i.active != last_logged) {
      last_logged = i.active;
      spdlog::info("draining: {} requests in flight", last_logged);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (i.active > 0) {
    spdlog::warn("drain timeout after {} ms: {} requests cut", timeout.count(), i.active.load());
  } else {
    spdlog::info("drained: no request in flight");
  }
  stop();
}

int ProxyServer::active_requests() const { return impl_->active; }

void ProxyServer::stop() {
  if (impl_->stopped.exchange(true)) {
    return;
  }
  net::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->ioc.stop();
  });
}

}  // namespace llmd::epp
