#include "epp/proxy/proxy_server.h"

#include <utility>  // Boost 1.74 awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <optional>
#include <cctype>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/http/client_core.h"
#include "common/http/io_workers.h"
#include "common/http/stream_server.h"
#include "epp/features/feature_row.h"
#include "epp/queue/admission_gate.h"
#include "epp/request/openai_request.h"
#include "epp/request/request_flow.h"
#include "epp/request/transport_policy.h"

namespace llmd::epp {
namespace {

namespace net = boost::asio;
using Clock = std::chrono::steady_clock;

// A pod's "host:port" ("[v6]:port") as the client core's origin; nullopt when it is not one.
std::optional<llmd::http::Url> pod_origin(const std::string& address) {
  return llmd::http::parse_url("http://" + address);
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

// The EPP's own answer (transport_policy.h) as an HTTP/1 response.
llmd::http::Response to_response(RefusalAnswer a) {
  llmd::http::Response r;
  r.status = a.status;
  r.body = std::move(a.body);
  for (auto& [name, value] : a.headers) {
    if (name != "Content-Type") {  // the server writes Content-Type from content_type
      r.headers.push_back({std::move(name), std::move(value)});
    }
  }
  return r;
}

llmd::http::Response error_response(int status, const std::string& detail,
                                    const std::string& request_id = {},
                                    std::optional<std::string> code = std::nullopt) {
  return to_response(refusal_answer(status, detail, request_id, {}, code));
}

// Response bytes held for a slow client before the pod is no longer read, and the level at
// which reading resumes: memory per stream stays bounded whatever the client does.
constexpr std::size_t kClientHighWater = 256 * 1024;
constexpr std::size_t kClientLowWater = 64 * 1024;

// The announced length of a response body small enough to answer whole (within the bytes a
// streamed relay may hold for a slow client anyway); nullopt for event streams, chunked or
// larger bodies.
std::optional<std::size_t> small_body_length(const llmd::http::ClientResponse& res) {
  const std::string_view type = res.header("content-type");
  if (type.find("text/event-stream") != std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view length = res.header("content-length");
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
  if (length.empty() || ec != std::errc() || end != length.data() + length.size() ||
      n > kClientLowWater) {
    return std::nullopt;
  }
  return n;
}

// The request to the pod: end-to-end client headers travel on (Authorization for pods started
// with --api-key, OpenAI-Organization, trace context, ...); hop-by-hop ones and those the EPP
// sets do not. The body is borrowed from `body` (prompts run to 16 MiB), which must outlive
// the write.
llmd::http::ClientRequest upstream_request(const llmd::http::Request& req,
                                           const std::string& base_path, const std::string& pod,
                                           const std::string& request_id, const std::string& body) {
  llmd::http::ClientRequest up;
  up.method = "POST";
  up.target = base_path + req.target;
  for (const auto& h : req.headers) {
    if (!is_hop_by_hop(h.name) && h.name != "host" && h.name != "content-length" &&
        h.name != "content-type" && h.name != "expect" && h.name != "x-request-id" &&
        !named_by_connection(req.headers, h.name)) {
      up.headers.push_back(h);
    }
  }
  up.headers.push_back({"host", pod});
  up.headers.push_back({"x-request-id", request_id});
  up.content_type = "application/json";
  up.borrowed_body = body;
  return up;
}

// The response head the client gets: the pod's headers without its cookies (not the router's
// to hand out: they would pin or leak sessions), framing and Server (the EPP's own) and the
// EPP's response headers (which the EPP sets itself, after).
struct ResponseHead {
  int status = 0;
  std::string content_type = "application/json";
  std::vector<llmd::http::Header> headers;
};

ResponseHead response_head(llmd::http::ClientResponse& res, const std::string& pod,
                           const std::string& request_id, const std::string& decision) {
  ResponseHead head;
  head.status = res.status;
  for (auto& field : res.headers) {  // names lower-case
    const std::string& name = field.name;
    if (name == "content-length" || is_hop_by_hop(name) || name == "set-cookie" ||
        name == "server" || name == "x-request-id" || name == "x-gateway-destination-endpoint" ||
        name == kDecisionHeader) {
      continue;
    }
    if (name == "content-type") {
      head.content_type = std::move(field.value);
      continue;
    }
    head.headers.push_back(std::move(field));
  }
  for (auto& [name, value] : response_headers(pod, request_id, decision)) {
    head.headers.push_back({std::move(name), std::move(value)});
  }
  return head;
}

// One response on its way to the client. A small body of known length (a non-streamed
// completion) is collected and answered in one write with its length: one send instead of
// three (headers, chunk, last chunk) on both sides. Anything else goes out as it arrives
// (chunked; HTTP/1.0 clients get it unchunked, ended by the close, so a broken-off body is as
// visible as a missing chunk). Lives in the attempt's coroutine, on its strand.
class ResponseRelay {
 public:
  ResponseRelay(llmd::http::ResponseStream& client, ResponseHead head,
                std::optional<std::size_t> whole_length)
      : client_(client), head_(std::move(head)), collecting_(whole_length.has_value()) {
    if (collecting_) {
      collected_.reserve(*whole_length);
    } else {
      client_.begin_stream(head_.status, std::move(head_.content_type), std::move(head_.headers));
    }
  }

  void append(std::string_view bytes) {
    if (collecting_) {
      collected_.append(bytes);  // the parser ends the body at its announced length
    } else {
      client_.write(std::string(bytes));
    }
  }

  // The pod failed after the response started. A clean end would pass a truncated answer off
  // as complete: a stream gets an error event, and neither kind of body gets its terminating
  // chunk, so every HTTP client reports an incomplete response.
  void fail(bool event_stream) {
    start_streaming();
    if (event_stream) {
      client_.write(mid_stream_error_event());
    }
    client_.end_incomplete();
  }

  void finish() {
    if (!collecting_) {
      client_.end();
      return;
    }
    llmd::http::Response whole;
    whole.status = head_.status;
    whole.content_type = std::move(head_.content_type);
    whole.headers = std::move(head_.headers);
    whole.body = std::move(collected_);
    client_.respond(std::move(whole));
  }

 private:
  // From collecting to streaming: what was collected goes first.
  void start_streaming() {
    if (!collecting_) {
      return;
    }
    collecting_ = false;
    client_.begin_stream(head_.status, head_.content_type, head_.headers);
    if (!collected_.empty()) {
      client_.write(std::move(collected_));
    }
  }

  llmd::http::ResponseStream& client_;
  ResponseHead head_;
  bool collecting_;
  std::string collected_;  // the body so far while collecting
};

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
  Impl(ProxyOptions o, SchedulingPort& s, PodRegistry& r, CompletionSink& k, AdmissionGate* g,
       llmd::http::IoWorkers* external)
      : options(std::move(o)),
        scheduler(s),
        registry(r),
        sink(k),
        gate(g),
        own_workers(
            external ? nullptr
                     : std::make_unique<llmd::http::IoWorkers>(options.io_threads, "epp-worker")),
        workers(external ? *external : *own_workers),
        core(
            core_options(options, k),
            [this](std::size_t, llmd::http::Request&& request,
                   llmd::http::ResponseStreamPtr stream) {
              // One coroutine per request on its connection's worker, which is its strand;
              // the connection's bytes stay with the core (ResponseStream is thread-safe).
              const std::size_t w = workers.current();
              net::co_spawn(workers.at(w).get_executor(),
                            handle(std::move(request), std::move(stream), *upstream[w]),
                            net::detached);
            },
            workers) {
    for (std::size_t w = 0; w < workers.size(); ++w) {
      upstream.push_back(std::make_unique<llmd::http::ClientCore>(workers.at(w).get_executor(),
                                                                  upstream_options(options)));
    }
  }

  // The client side (listener, sessions, limits, drain) is the project's one server core.
  static llmd::http::StreamServerOptions core_options(const ProxyOptions& o, CompletionSink& sink) {
    llmd::http::StreamServerOptions c;
    c.host = o.host;
    c.io_threads = o.io_threads;
    c.body_limit = o.body_limit;
    c.body_budget = o.body_budget;
    c.shared_body_budget = o.shared_body_budget;
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

  static llmd::http::ClientCore::Options upstream_options(const ProxyOptions& o) {
    llmd::http::ClientCore::Options c;
    c.max_idle_per_origin = 64;
    c.max_idle = 512;  // over all pods: idle descriptors are outside the client budget
    // Below the usual servers' keep-alive timeouts (uvicorn, which serves vLLM's API: 5 s), so
    // a pod rarely closes a connection just as it is reused.
    c.idle_timeout = std::chrono::milliseconds(4000);
    // A pod that closed an idle connection or wrote something unasked: not reused (saves the
    // failed write and the resend on a fresh connection).
    c.probe_idle = true;
    if (auto* opened = o.upstream_opened) {
      c.on_opened = [opened] { opened->Increment(); };
    }
    if (auto* reused = o.upstream_reused) {
      c.on_reused = [reused] { reused->Increment(); };
    }
    return c;
  }

  static llmd::http::ClientTimeouts make_upstream_timeouts(const ProxyOptions& o) {
    llmd::http::ClientTimeouts t;
    t.connect = o.upstream_connect_timeout;
    t.first_byte = o.upstream_first_byte_timeout;  // request written and response header read
    t.idle = o.upstream_idle_timeout;              // each wait for more of the body
    return t;
  }

  ProxyOptions options;
  const FlowOptions flow_options = make_flow_options(options);
  SchedulingPort& scheduler;
  PodRegistry& registry;
  CompletionSink& sink;
  AdmissionGate* gate;  // null: no router queue
  // Client connections (the core) and upstream connections: a request, its connection and its
  // exchanges with the pods share one worker thread.
  std::unique_ptr<llmd::http::IoWorkers> own_workers;  // null: the owner's
  llmd::http::IoWorkers& workers;
  llmd::http::StreamServer core;
  // Connections to the pods: a keep-alive pool per pod on each worker (as Envoy's per-worker
  // connection pools), so that a pooled connection is only ever used on its own thread.
  std::vector<std::unique_ptr<llmd::http::ClientCore>> upstream;
  const llmd::http::ClientTimeouts upstream_timeouts = make_upstream_timeouts(options);
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

  net::awaitable<void> handle(llmd::http::Request req, llmd::http::ResponseStreamPtr client,
                              llmd::http::ClientCore& pods) {
    try {
      co_await serve(std::move(req), client, pods);
    } catch (const std::exception& e) {
      spdlog::error("proxy request error: {}", e.what());
      client->respond(error_response(500, "Internal error in the EPP"));
    }
  }

  net::awaitable<void> serve(llmd::http::Request req, llmd::http::ResponseStreamPtr client,
                             llmd::http::ClientCore& pods) {
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
    if (auto standby = refuse_when_not_serving(*flow, options.not_serving)) {
      client->respond(error_response(503, standby->detail));
      co_return;
    }
    const std::string& path = req.path;
    if (req.method == "GET" && (path == "/v1/models" || path.starts_with("/v1/models/"))) {
      client->respond(models_response(path));
      co_return;
    }
    if (!is_inference_request(req.method, path)) {
      client->respond(to_response(wrong_route_answer(*flow, path)));
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
      auto res = to_response(
          refusal_answer(verdict.status, verdict.detail, headers.request_id, verdict.decision));
      client->respond(std::move(res));
      co_return;
    }
    if (watch->gone) {
      spdlog::debug("request {}: client gone before dispatch", headers.request_id);
      co_return;
    }
    while (const Endpoint* pod = flow->next_pod()) {
      auto outcome = co_await forward(pods, *client, *watch, req, *flow, *pod, verdict.decision);
      if (outcome != Outcome::kRetryable) {
        co_return;
      }
      spdlog::warn("request {}: {} failed before the first byte (attempt {})", headers.request_id,
                   pod->name(), flow->attempts());
    }
    const RequestFlow::Verdict failed = flow->exhausted();
    client->respond(error_response(failed.status, failed.detail, headers.request_id));
  }

  // GET /v1/models (and /v1/models/{id}) in vLLM's shape: the models the ready pods serve, as
  // their metrics name them, so SDKs and benchmark tools can discover what to ask for.
  llmd::http::Response models_response(const std::string& path) {
    std::set<std::string> models;
    for (const auto& pod : registry.candidates(Clock::now())) {
      models.insert(pod.metrics().models.begin(), pod.metrics().models.end());
    }
    const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    auto card = [created](const std::string& id) {
      return nlohmann::json{{"id", id},
                            {"object", "model"},
                            {"created", created},
                            {"owned_by", "vllm"},
                            {"root", id},
                            {"parent", nullptr},
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

  // The one way an attempt ends because the client left: the flow releases what it holds.
  static Outcome client_left(RequestFlow& flow) {
    flow.client_gone();
    return Outcome::kClientGone;
  }

  // A client that leaves ends the attempt at once, even while the pod is silent (a hung stream
  // would otherwise hold the pod's in-flight count until the first-byte or idle timeout): the
  // exchange with the pod is cancelled. Set for the attempt's life; on_gone runs on its strand.
  struct CancelOnGone {
    CancelOnGone(ClientWatch& w, llmd::http::ClientCallPtr& call) : watch(w) {
      watch.on_gone = [&call] {
        if (call) {
          call->cancel();
        }
      };
    }
    ~CancelOnGone() { watch.on_gone = nullptr; }
    CancelOnGone(const CancelOnGone&) = delete;
    CancelOnGone& operator=(const CancelOnGone&) = delete;
    ClientWatch& watch;
  };

  struct Opened {
    llmd::http::ClientResponse head;
    llmd::http::ClientCallPtr body;
  };

  // Sends the request and waits for the response head (a kept-alive connection first; one the
  // pod closed meanwhile is replaced and the request sent once more). `call` is the exchange,
  // for cancelling it.
  net::awaitable<Opened> open_pod(llmd::http::ClientCore& pods, const llmd::http::Url& origin,
                                  llmd::http::ClientRequest& up, llmd::http::ClientCallPtr& call) {
    auto executor = co_await net::this_coro::executor;
    auto open = [this, &pods, &call, &origin, &up, &executor](auto done) {
      call = pods.open(
          origin, std::move(up), upstream_timeouts, executor,
          [done](llmd::http::ClientResponse head, llmd::http::ClientCallPtr body) mutable {
            done(Opened{std::move(head), std::move(body)});
          });
    };
    Opened opened = co_await await_callback<Opened>(open);
    co_return opened;
  }

  // What a response head without a usable answer means for the attempt, or nullopt to relay
  // it: no connection or a 5xx is the pod's failure (retryable); a cancelled one, the client's.
  static std::optional<Outcome> failed_head(const llmd::http::ClientResponse& res,
                                            const llmd::http::ClientCallPtr& call,
                                            const ClientWatch& watch, RequestFlow& flow,
                                            const Endpoint& pod) {
    if (res.status == 0 && watch.gone) {
      return client_left(flow);  // cancelled by on_gone, not the pod's failure
    }
    if (res.status == 0 && !(call && call->connected())) {
      spdlog::warn("connect to pod {} ({}) failed: {}", pod.name(), pod.address(), res.error);
      flow.pod_failed(502, true);
      return Outcome::kRetryable;
    }
    if (res.status == 0 || res.status >= 500) {
      // No answer: 504 when the first-byte timeout ran out, 502 when the pod closed or reset
      // the connection (what the client gets too, as nginx and Envoy count it).
      const int status = res.status != 0 ? res.status : res.timed_out ? 504 : 502;
      spdlog::warn("pod {} ({}) failed: {}", pod.name(), pod.address(),
                   res.status == 0 ? res.error : "HTTP " + std::to_string(status));
      flow.pod_failed(status, true);
      return Outcome::kRetryable;  // dropping the call closes the connection
    }
    if (watch.gone) {
      return client_left(flow);
    }
    return std::nullopt;
  }

  // Relays the body: the pod is read only when this loop asks, so while the client is slow TCP
  // holds the pod back. kDone: read to its end (the connection goes back to the pool);
  // kAborted: the pod failed or broke the protocol mid-response; kClientGone.
  net::awaitable<Outcome> relay_body(const llmd::http::ClientCallPtr& stream, ResponseRelay& relay,
                                     llmd::http::ResponseStream& client, const ClientWatch& watch,
                                     RequestFlow& flow) {
    while (true) {
      auto read = [&stream](auto done) {
        stream->read([done](llmd::http::BodyPiece piece) mutable { done(std::move(piece)); });
      };
      // `bytes` stay valid until the next read.
      const llmd::http::BodyPiece piece = co_await await_callback<llmd::http::BodyPiece>(read);
      if (!piece.error.empty()) {
        co_return watch.gone ? client_left(flow) : Outcome::kAborted;
      }
      if (!piece.bytes.empty()) {
        if (!flow.response_bytes(piece.bytes)) {
          co_return Outcome::kAborted;
        }
        if (watch.gone) {
          co_return client_left(flow);
        }
        relay.append(piece.bytes);
        if (client.buffered() > kClientHighWater) {
          // The client reads slower than the pod writes: stop reading the pod until it
          // catches up; the write timeout ends a client that stopped.
          auto drained = [&client](auto done) {
            client.when_drained(kClientLowWater, [done]() mutable { done(true); });
          };
          co_await await_callback<bool>(drained);
          if (watch.gone) {
            co_return client_left(flow);
          }
        }
      }
      if (piece.end) {
        co_return Outcome::kDone;
      }
    }
  }

  // One attempt on `pod` (the flow's next_pod()); the flow is told what happens and keeps the
  // bookkeeping.
  net::awaitable<Outcome> forward(llmd::http::ClientCore& pods, llmd::http::ResponseStream& client,
                                  ClientWatch& watch, const llmd::http::Request& req,
                                  RequestFlow& flow, const Endpoint& pod,
                                  const std::string& decision) {
    const std::string& request_id = flow.request_id();
    flow.dispatch();
    const std::optional<llmd::http::Url> origin = pod_origin(pod.address());
    if (!origin) {
      spdlog::warn("pod {} has no usable address '{}'", pod.name(), pod.address());
      flow.pod_failed(502, true);
      co_return Outcome::kRetryable;
    }
    const std::string& body = flow.forwarded_body() ? *flow.forwarded_body() : req.body;
    llmd::http::ClientRequest up =
        upstream_request(req, flow.route().base_path, pod.address(), request_id, body);
    llmd::http::ClientCallPtr call;
    const CancelOnGone cancel_on_gone(watch, call);
    if (watch.gone) {
      co_return client_left(flow);
    }
    Opened opened = co_await open_pod(pods, *origin, up, call);
    if (const std::optional<Outcome> failed = failed_head(opened.head, call, watch, flow, pod)) {
      co_return *failed;
    }
    const std::optional<std::size_t> whole_length = small_body_length(opened.head);
    ResponseRelay relay(client, response_head(opened.head, pod.address(), request_id, decision),
                        whole_length);
    const Outcome relayed = co_await relay_body(opened.body, relay, client, watch, flow);
    if (relayed == Outcome::kClientGone) {
      co_return relayed;
    }
    if (relayed == Outcome::kAborted) {
      spdlog::warn("request {}: pod {} ({}) failed mid-response", request_id, pod.name(),
                   pod.address());
      relay.fail(flow.streaming());
      flow.pod_failed(502, false);
      co_return Outcome::kAborted;
    }
    relay.finish();
    const int status = opened.head.status;
    flow.response_ended(status);
    if (const PodAttempt* done = flow.attempt()) {
      spdlog::debug(
          "request {} -> {} ({}) status {} ttft {:.1f} ms e2e {:.1f} ms, queued and "
          "scheduled {:.1f} ms",
          request_id, pod.name(), pod.address(), status, done->record().ttft_ms,
          done->record().e2e_ms, done->record().dispatch_delay_ms);
    }
    co_return Outcome::kDone;
  }
};

ProxyServer::ProxyServer(ProxyOptions options, SchedulingPort& scheduler, PodRegistry& registry,
                         CompletionSink& sink, AdmissionGate* gate, llmd::http::IoWorkers* workers)
    : impl_(std::make_unique<Impl>(std::move(options), scheduler, registry, sink, gate, workers)) {}

ProxyServer::~ProxyServer() {
  stop();
  std::unique_lock lock(impl_->run_mu);
  impl_->run_cv.wait(lock, [this] { return !impl_->running; });
  lock.unlock();
  if (!impl_->own_workers && impl_->workers.running()) {
    // The owner's workers go on: a request cut by the drain still ends there (its client is
    // gone, its prediction or pod exchange calls back within its timeout) and must not find
    // this server gone.
    const auto give_up = Clock::now() + std::chrono::seconds(60);
    while (impl_->active > 0 && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

void ProxyServer::start() {
  try {
    impl_->core.listen(impl_->options.port);
  } catch (const std::exception& e) {
    throw std::runtime_error(
        fmt::format("cannot bind {}:{}: {}", impl_->options.host, impl_->options.port, e.what()));
  }
}

uint16_t ProxyServer::port() const {
  return impl_->core.port(0);
}

std::size_t ProxyServer::idle_upstream_connections() const {
  std::size_t idle = 0;
  for (const auto& pods : impl_->upstream) {
    idle += pods->idle();
  }
  return idle;
}

void ProxyServer::run() {
  {
    std::lock_guard lock(impl_->run_mu);
    impl_->running = true;
  }
  impl_->core.run(false);
  if (impl_->own_workers) {
    impl_->own_workers->stop();  // the drain is over: no handler runs after this
  }
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

int ProxyServer::active_requests() const {
  return impl_->active;
}

void ProxyServer::stop() {
  impl_->core.stop(std::chrono::milliseconds(0));
}

}  // namespace llmd::epp
