#include "epp/proxy/proxy_server.h"

#include <utility>  // Boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <cctype>
#include <condition_variable>
#include <mutex>
#include <limits>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/http/stale_connection.h"
#include "common/http/stream_server.h"
#include "epp/features/feature_row.h"
#include "epp/proxy/admission_gate.h"
#include "epp/proxy/openai_request.h"
#include "epp/request/request_flow.h"
#include "epp/proxy/upstream_pool.h"

namespace llmd::epp {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
// Boost 1.74 has no as_tuple: errors are redirected into a local error_code instead.
auto redirect(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

// A stream the pod broke off ends with the same error object as one SSE event.
std::string mid_stream_error_event() {
  return "data: " +
         openai_error_body(502, "The model server failed while streaming the response") + "\n\n";
}

std::pair<std::string, std::string> split_address(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return {address, "80"};
  }
  return {address.substr(0, colon), address.substr(colon + 1)};
}

// Headers that describe one connection, not the message (RFC 9110 section 7.6.1); names are
// lower-case (http::Request and Beast's name_string() lower-cased by the caller).
bool is_hop_by_hop(std::string_view name) {
  for (const char* h : {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                        "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}) {
    if (name == h) {
      return true;
    }
  }
  return false;
}

// Whether `name` (lower-case) is listed in the message's Connection header: such headers are
// hop-by-hop too and are not forwarded (RFC 9110 section 7.6.1).
bool named_by_connection(const std::vector<llmd::http::Header>& headers, std::string_view name) {
  for (const auto& h : headers) {
    if (h.name != "connection") {
      continue;
    }
    std::string_view list = h.value;
    while (!list.empty()) {
      const auto comma = list.find(',');
      std::string_view token = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) {
        token.remove_prefix(1);
      }
      while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) {
        token.remove_suffix(1);
      }
      if (!token.empty() && llmd::http::to_lower(token) == name) {
        return true;
      }
    }
  }
  return false;
}

// The EPP's own error answer: the OpenAI error object, Retry-After on 429/503.
llmd::http::Response error_response(int status, const std::string& detail,
                                    const std::string& request_id = {},
                                    std::optional<std::string> code = std::nullopt) {
  llmd::http::Response r;
  r.status = status;
  r.body = code ? openai_error_body(status, detail, std::nullopt, code)
                : openai_error_body(status, detail);
  if (status == 429 || status == 503) {
    // Without it, SDKs retry at once; a second is the scale of a queue turning over.
    r.headers.push_back({"Retry-After", "1"});
  }
  if (!request_id.empty()) {
    r.headers.push_back({"x-request-id", request_id});
  }
  return r;
}

// Response bytes held for a slow client before the pod is no longer read, and the level at
// which reading resumes: memory per stream stays bounded whatever the client does.
constexpr std::size_t kClientHighWater = 256 * 1024;
constexpr std::size_t kClientLowWater = 64 * 1024;

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

}  // namespace

struct ProxyServer::Impl {
  Impl(ProxyOptions o, SchedulingPort& s, PodRegistry& r, CompletionSink& k, AdmissionGate* g)
      : options(std::move(o)), scheduler(s), registry(r), sink(k), gate(g),
        ioc(options.io_threads),
        core(core_options(options, k),
             [this](std::size_t, llmd::http::Request&& request,
                    llmd::http::ResponseStreamPtr stream) {
               // One coroutine per request on a strand of its own; the connection's bytes stay
               // with the core (ResponseStream is thread-safe).
               net::co_spawn(net::make_strand(ioc), handle(std::move(request), std::move(stream)),
                             net::detached);
             },
             ioc) {}

  // The client side (listener, sessions, limits, drain) is the project's one server core.
  static llmd::http::StreamServerOptions core_options(const ProxyOptions& o, CompletionSink& sink) {
    llmd::http::StreamServerOptions c;
    c.host = o.host;
    c.io_threads = o.io_threads;
    c.body_limit = o.body_limit;
    c.body_budget = o.body_budget;
    c.header_timeout = o.header_timeout;
    c.idle_timeout = o.idle_timeout;
    c.body_timeout = o.idle_timeout;
    c.write_timeout = o.upstream_idle_timeout;  // a client that stops reading a stream
    c.server_name = "llmd-epp";
    c.fresh_connections_idle = true;
    c.descriptors_per_connection = 2;  // the client's and, while proxied, the pod's
    c.error_response = [](int status, const std::string& message) {
      return error_response(status, message);
    };
    // The server's own answers (400, 413, 431, 503 budget) count as client requests.
    c.on_error_answer = [&sink](int status) { sink.on_rejected("", status); };
    return c;
  }

  static FlowOptions make_flow_options(const ProxyOptions& o) {
    FlowOptions f;
    f.default_prediction = o.default_prediction;
    f.forward_priority = o.forward_priority;
    f.allow_debug_header = o.allow_debug_header;
    f.url_targets = true;
    f.response_body_limit = o.body_limit;
    return f;
  }
  FlowServices services() { return {&scheduler, &registry, &sink, gate, nullptr}; }

  ProxyOptions options;
  const FlowOptions flow_options = make_flow_options(options);
  SchedulingPort& scheduler;
  PodRegistry& registry;
  CompletionSink& sink;
  AdmissionGate* gate;  // null: no router queue
  UpstreamPool upstream_pool;
  net::io_context ioc;  // client connections (the core) and upstream connections
  llmd::http::StreamServer core;
  std::atomic<bool> draining{false};  // no new requests; those in flight finish
  std::atomic<int> active{0};         // requests between their read and their last byte
  std::mutex run_mu;
  std::condition_variable run_cv;
  bool running = false;  // guarded by run_mu: core.run() has not returned

  // Counts a request as active for drain() for as long as it lives (RAII in the coroutine).
  struct ActiveRequest {
    explicit ActiveRequest(std::atomic<int>& n) : n_(n) { ++n_; }
    ~ActiveRequest() { --n_; }
    ActiveRequest(const ActiveRequest&) = delete;
    ActiveRequest& operator=(const ActiveRequest&) = delete;
    std::atomic<int>& n_;
  };

  static std::optional<std::string> header_of(const llmd::http::Request& req,
                                              std::string_view name) {
    for (const auto& h : req.headers) {
      if (h.name == name) {
        return h.value;
      }
    }
    return std::nullopt;
  }

  // The client leaves: set by the core (on its strand) when the connection goes before the
  // answer ended; read by the request's coroutine between steps.
  struct ClientWatch {
    std::atomic<bool> gone{false};
    std::function<void()> on_gone;  // set and cleared on the request's strand
  };

  net::awaitable<void> handle(llmd::http::Request req, llmd::http::ResponseStreamPtr client) {
    try {
      co_await serve(std::move(req), client);
    } catch (const std::exception& e) {
      spdlog::error("proxy request error: {}", e.what());
      client->respond(error_response(500, "Internal error in the EPP"));
    }
  }

  net::awaitable<void> serve(llmd::http::Request req, llmd::http::ResponseStreamPtr client) {
    ActiveRequest counted(active);
    auto executor = co_await net::this_coro::executor;
    // Owns the request's slots and tickets: whatever path this coroutine leaves by (including
    // its destruction), each is given back once. Parsing, routing, the router queue,
    // scheduling and the attempts' bookkeeping are the flow's; its continuations (predictions,
    // queue wake-ups) are posted back onto this strand.
    auto flow = RequestFlow::create(flow_options, services(), resume_on(executor));
    auto watch = std::make_shared<ClientWatch>();
    client->on_disconnect([watch, executor] {
      watch->gone = true;
      net::post(executor, [watch] {
        if (auto f = std::move(watch->on_gone)) {
          watch->on_gone = nullptr;
          f();
        }
      });
    });
    if (draining) {
      // Arrived on a kept-alive connection after the drain began: send it elsewhere.
      client->respond(error_response(503, flow->refuse(503, "EPP is shutting down").detail));
      co_return;
    }
    if (options.not_serving) {
      if (auto reason = options.not_serving()) {
        // A standby: the leader serves (a load balancer that follows /readyz never sends here).
        client->respond(error_response(503, flow->refuse(503, *reason).detail));
        co_return;
      }
    }
    const std::string& path = req.path;
    if (req.method == "GET" && (path == "/v1/models" || path.starts_with("/v1/models/"))) {
      client->respond(models_response(path));
      co_return;
    }
    if (req.method != "POST" || (path != "/v1/completions" && path != "/v1/chat/completions")) {
      const bool known = path == "/v1/completions" || path == "/v1/chat/completions";
      const RequestFlow::Verdict v =
          flow->refuse(known ? 405 : 404, "Use POST /v1/completions or /v1/chat/completions");
      auto res = error_response(v.status, v.detail);
      if (known) {
        res.headers.push_back({"Allow", "POST"});
      }
      client->respond(std::move(res));
      co_return;
    }
    const InboundHeaders headers =
        read_inbound_headers([&req](std::string_view name) { return header_of(req, name); });
    watch->on_gone = [flow] { flow->client_gone(); };  // runs on this strand (see above)
    if (watch->gone) {
      flow->client_gone();
    }
    auto start_flow = [&flow, &path, &req, &headers](auto done) {
      flow->start(path, req.body, headers, std::move(done));
    };
    const RequestFlow::Verdict verdict = co_await await_callback<RequestFlow::Verdict>(start_flow);
    watch->on_gone = nullptr;
    if (verdict.status == kClientClosedRequest) {
      spdlog::debug("request {}: client disconnected before dispatch", headers.request_id);
      co_return;
    }
    if (verdict.status != 200) {
      auto res = error_response(verdict.status, verdict.detail, headers.request_id);
      if (!verdict.decision.empty()) {
        res.headers.push_back({kDecisionHeader, verdict.decision});
      }
      client->respond(std::move(res));
      co_return;
    }
    if (watch->gone) {
      spdlog::debug("request {}: client gone before dispatch", headers.request_id);
      co_return;
    }
    while (const Endpoint* pod = flow->next_pod()) {
      auto outcome = co_await forward(*client, *watch, req, *flow, *pod, verdict.decision);
      if (outcome != Outcome::kRetryable) {
        co_return;
      }
      spdlog::warn("request {}: {} failed before the first byte (attempt {})",
                   headers.request_id, pod->name, flow->attempts());
    }
    const RequestFlow::Verdict failed = flow->exhausted();
    client->respond(error_response(failed.status, failed.detail, headers.request_id));
  }

  // GET /v1/models (and /v1/models/{id}) in vLLM's shape: the models the ready pods serve, as
  // their metrics name them, so SDKs and benchmark tools can discover what to ask for.
  llmd::http::Response models_response(const std::string& path) {
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
    if (path == "/v1/models") {
      nlohmann::json data = nlohmann::json::array();
      for (const auto& m : models) {
        data.push_back(card(m));
      }
      return llmd::http::Response::json(200, nlohmann::json{{"object", "list"}, {"data", data}});
    }
    // SDKs encode the id as one segment (the Node SDK sends "meta-llama%2FLlama-3.1-8B").
    const std::string raw = path.substr(std::string_view("/v1/models/").size());
    const std::optional<std::string> decoded = llmd::http::percent_decode(raw);
    if (!decoded) {
      return error_response(400, "The model id '" + raw + "' is not validly percent-encoded");
    }
    const std::string& id = *decoded;
    if (models.count(id) == 0) {
      return error_response(404, "The model '" + id + "' does not exist", {}, "model_not_found");
    }
    return llmd::http::Response::json(200, card(id));
  }

  // kAborted: the response started but could not be completed; the connection must close.
  enum class Outcome { kDone, kRetryable, kClientGone, kAborted };

  // A new connection to a pod ("host:port"), bounded by the connect timeout.
  net::awaitable<beast::error_code> connect(beast::tcp_stream& upstream,
                                            const std::string& address) {
    auto [host, port] = split_address(address);
    beast::error_code rec;
    upstream.expires_after(options.upstream_connect_timeout);
    // Pod addresses are usually IPs: skip the resolver (it runs on a helper thread).
    beast::error_code ip_ec;
    auto ip = net::ip::make_address(host, ip_ec);
    if (!ip_ec) {
      co_await upstream.async_connect(tcp::endpoint(ip, static_cast<uint16_t>(std::stoi(port))),
                                      redirect(rec));
    } else {
      auto executor = co_await net::this_coro::executor;
      tcp::resolver resolver(executor);
      auto endpoints = co_await resolver.async_resolve(host, port, redirect(rec));
      if (!rec) {
        co_await upstream.async_connect(endpoints, redirect(rec));
      }
    }
    if (!rec) {
      beast::error_code ignored;
      upstream.socket().set_option(tcp::no_delay(true), ignored);
      if (options.upstream_opened != nullptr) {
        options.upstream_opened->Increment();
      }
    }
    co_return rec;
  }

  // One attempt on `pod` (the flow's next_pod()): bytes both ways; the flow is told what
  // happens and keeps the bookkeeping.
  net::awaitable<Outcome> forward(llmd::http::ResponseStream& client, ClientWatch& watch,
                                  const llmd::http::Request& req, RequestFlow& flow,
                                  const Endpoint& pod, const std::string& decision) {
    const std::string& request_id = flow.request_id();
    flow.dispatch();
    const std::string& body = flow.forwarded_body() ? *flow.forwarded_body() : req.body;
    auto executor = co_await net::this_coro::executor;
    const std::string path = flow.route().base_path + req.target;
    // The body is sent from the caller's buffer (a span, not a copy: prompts run to 16 MiB).
    bhttp::request<bhttp::span_body<const char>> up{bhttp::verb::post, path, 11};
    // End-to-end client headers travel on (Authorization for pods started with --api-key,
    // OpenAI-Organization, trace context, ...); hop-by-hop ones and those the EPP sets do not.
    for (const auto& h : req.headers) {
      if (!is_hop_by_hop(h.name) && h.name != "host" && h.name != "content-length" &&
          h.name != "content-type" && h.name != "expect" && h.name != "x-request-id" &&
          !named_by_connection(req.headers, h.name)) {
        up.insert(h.name, h.value);
      }
    }
    up.set(bhttp::field::host, pod.address);
    up.set(bhttp::field::content_type, "application/json");
    up.set("x-request-id", request_id);
    up.keep_alive(true);
    up.body() = {body.data(), body.size()};
    up.prepare_payload();
    std::optional<beast::tcp_stream> upstream;
    // A client that leaves ends the attempt at once, even while the pod is silent (a hung
    // stream would otherwise hold the pod's in-flight count until the first-byte or idle
    // timeout): the pending operation on the pod is cancelled. on_gone runs on this strand.
    watch.on_gone = [&upstream] {
      if (upstream) {
        beast::error_code ignored;
        upstream->socket().cancel(ignored);
      }
    };
    struct ClearOnGone {
      ClientWatch& w;
      ~ClearOnGone() { w.on_gone = nullptr; }
    } clear_on_gone{watch};
    if (watch.gone) {
      flow.client_gone();
      co_return Outcome::kClientGone;
    }
    beast::flat_buffer ubuf;
    std::optional<bhttp::response_parser<bhttp::buffer_body>> rp;
    beast::error_code hec;
    for (int connection = 0; connection < 2; ++connection) {
      // A kept-alive connection first; if the pod closed it meanwhile (it fails before any
      // byte of an answer), the request goes once more on a fresh one.
      const UpstreamPool::Connection idle =
          connection == 0 ? upstream_pool.take(pod.address, Clock::now())
                          : UpstreamPool::Connection{};
      const bool reused = idle.fd >= 0;
      upstream.emplace(executor);
      beast::error_code rec;
      if (reused) {
        upstream->socket().assign(idle.ipv6 ? tcp::v6() : tcp::v4(), idle.fd, rec);
        if (rec) {
          ::close(idle.fd);  // not taken over by the socket
          continue;
        }
        if (options.upstream_reused != nullptr) {
          options.upstream_reused->Increment();
        }
      } else {
        rec = co_await connect(*upstream, pod.address);
        if (rec && watch.gone) {
          flow.client_gone();
          co_return Outcome::kClientGone;
        }
        if (rec) {
          spdlog::warn("connect to pod {} ({}) failed: {}", pod.name, pod.address, rec.message());
          flow.pod_failed(502, true);
          co_return Outcome::kRetryable;
        }
      }
      upstream->expires_after(options.upstream_first_byte_timeout);
      beast::error_code wec = rec;
      if (!wec) {
        co_await bhttp::async_write(*upstream, up, redirect(wec));
      }
      rp.emplace();
      rp->body_limit(std::numeric_limits<std::uint64_t>::max());
      hec = wec;
      if (!hec) {
        beast::error_code e;
        co_await bhttp::async_read_header(*upstream, ubuf, *rp, redirect(e));
        hec = e;
      }
      if (!(reused && hec && ubuf.size() == 0 && llmd::http::detail::is_stale_connection(hec))) {
        break;
      }
      spdlog::debug("request {}: kept-alive connection to {} was closed ({}); a fresh one",
                    request_id, pod.address, hec.message());
      ubuf.clear();
    }
    if (hec && watch.gone) {
      flow.client_gone();  // cancelled by on_gone, not the pod's failure
      co_return Outcome::kClientGone;
    }
    if (hec || rp->get().result_int() >= 500) {
      int status = hec ? 504 : rp->get().result_int();
      spdlog::warn("pod {} ({}) failed: {}", pod.name, pod.address,
                   hec ? hec.message() : "HTTP " + std::to_string(status));
      flow.pod_failed(status, true);
      co_return Outcome::kRetryable;
    }
    if (watch.gone) {
      flow.client_gone();
      co_return Outcome::kClientGone;
    }
    // Headers to the client; the body follows as it arrives (chunked; HTTP/1.0 clients get it
    // unchunked, ended by the close, so a broken-off body is as visible as a missing chunk).
    std::string content_type = "application/json";
    std::vector<llmd::http::Header> head;
    for (const auto& field : rp->get()) {
      const std::string name = llmd::http::to_lower(std::string_view(field.name_string().data(),
                                                      field.name_string().size()));
      // A pod's cookies are not the router's to hand out (they would pin or leak sessions);
      // length, framing and Server are the EPP's own.
      if (name == "content-length" || is_hop_by_hop(name) || name == "set-cookie" ||
          name == "server" || name == "x-request-id" || name == "x-gateway-destination-endpoint" ||
          name == kDecisionHeader) {
        continue;
      }
      if (name == "content-type") {
        content_type = std::string(field.value());
        continue;
      }
      head.push_back({name, std::string(field.value())});
    }
    head.push_back({"x-gateway-destination-endpoint", pod.address});
    head.push_back({"x-request-id", request_id});
    if (!decision.empty()) {
      head.push_back({kDecisionHeader, decision});
    }
    client.begin_stream(rp->get().result_int(), content_type, std::move(head));
    char chunk[16384];
    bool ok = true;
    while (!rp->is_done()) {
      rp->get().body().data = chunk;
      rp->get().body().size = sizeof(chunk);
      upstream->expires_after(options.upstream_idle_timeout);
      beast::error_code rec2;
      co_await bhttp::async_read_some(*upstream, ubuf, *rp, redirect(rec2));
      if (rec2 == bhttp::error::need_buffer) {
        rec2 = {};
      }
      if (rec2 && watch.gone) {
        flow.client_gone();  // cancelled by on_gone, not the pod's failure
        co_return Outcome::kClientGone;
      }
      if (rec2) {
        ok = false;
        break;
      }
      std::size_t got = sizeof(chunk) - rp->get().body().size;
      if (got == 0) {
        continue;
      }
      std::string_view piece(chunk, got);
      flow.response_bytes(piece);
      if (watch.gone) {
        flow.client_gone();
        co_return Outcome::kClientGone;
      }
      client.write(std::string(piece));
      if (client.buffered() > kClientHighWater) {
        // The client reads slower than the pod writes: stop reading the pod until it catches
        // up (TCP then holds the pod back); the write timeout ends a client that stopped.
        auto drained = [&client](auto done) {
          client.when_drained(kClientLowWater, [done]() mutable { done(true); });
        };
        co_await await_callback<bool>(drained);
        if (watch.gone) {
          flow.client_gone();
          co_return Outcome::kClientGone;
        }
      }
    }
    if (!ok) {
      // The pod failed after the response started. A clean end would pass a truncated answer
      // off as complete: a stream gets an error event, and neither kind of body gets its
      // terminating chunk, so every HTTP client reports an incomplete response.
      spdlog::warn("request {}: pod {} ({}) failed mid-response", request_id, pod.name,
                   pod.address);
      if (flow.streaming()) {
        client.write(mid_stream_error_event());
      }
      client.end_incomplete();
      flow.pod_failed(502, false);
      co_return Outcome::kAborted;
    }
    if (rp->keep_alive()) {
      // Read to its end and kept open by the pod: the next request to this pod may use it.
      beast::error_code ec;
      const bool v6 = upstream->socket().local_endpoint(ec).address().is_v6();
      upstream->expires_never();
      tcp::socket socket = upstream->release_socket();
      const int fd = ec ? -1 : socket.release(ec);
      if (!ec && fd >= 0) {
        upstream_pool.give_back(pod.address, {fd, v6}, Clock::now());
      }
    }
    client.end();
    const int status = rp->get().result_int();
    flow.response_ended(status);
    if (const PodAttempt* done = flow.attempt()) {
      spdlog::debug("request {} -> {} ({}) status {} ttft {:.1f} ms e2e {:.1f} ms, queued and "
                    "scheduled {:.1f} ms",
                    request_id, pod.name, pod.address, status, done->record().ttft_ms,
                    done->record().e2e_ms, done->record().dispatch_delay_ms);
    }
    co_return Outcome::kDone;
  }
};

ProxyServer::ProxyServer(ProxyOptions options, SchedulingPort& scheduler, PodRegistry& registry,
                         CompletionSink& sink, AdmissionGate* gate)
    : impl_(std::make_unique<Impl>(std::move(options), scheduler, registry, sink, gate)) {}

ProxyServer::~ProxyServer() {
  stop();
  std::unique_lock lock(impl_->run_mu);
  impl_->run_cv.wait(lock, [this] { return !impl_->running; });
}

void ProxyServer::start() {
  try {
    impl_->core.listen(impl_->options.port);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot bind {}:{}: {}", impl_->options.host,
                                         impl_->options.port, e.what()));
  }
}

uint16_t ProxyServer::port() const { return impl_->core.port(0); }

std::size_t ProxyServer::idle_upstream_connections() const { return impl_->upstream_pool.idle(); }

void ProxyServer::run() {
  {
    std::lock_guard lock(impl_->run_mu);
    impl_->running = true;
  }
  impl_->core.run(false);
  std::lock_guard lock(impl_->run_mu);
  impl_->running = false;
  impl_->run_cv.notify_all();
}

void ProxyServer::drain(std::chrono::milliseconds timeout) {
  auto& i = *impl_;
  if (i.draining.exchange(true)) {
    return;
  }
  if (i.gate != nullptr) {
    i.gate->close("EPP is shutting down");
  }
  // The core stops accepting, closes idle connections and lets the answers in progress
  // (streams included) finish within the timeout.
  spdlog::info("draining: {} requests in flight", i.active.load());
  i.core.stop(timeout);
  std::unique_lock lock(i.run_mu);
  i.run_cv.wait(lock, [&i] { return !i.running; });
  if (i.active > 0) {
    spdlog::warn("drain timeout after {} ms: {} requests cut", timeout.count(), i.active.load());
  } else {
    spdlog::info("drained: no request in flight");
  }
}

int ProxyServer::active_requests() const { return impl_->active; }

void ProxyServer::stop() { impl_->core.stop(std::chrono::milliseconds(0)); }

}  // namespace llmd::epp
