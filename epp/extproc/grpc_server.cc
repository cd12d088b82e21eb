#include "epp/extproc/grpc_server.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/http/body_budget.h"
#include "common/http/io_workers.h"
#include "common/http/listener.h"
#include "epp/extproc/byte_stream.h"
#include "epp/extproc/grpc_framing.h"
#include "epp/extproc/http2_connection.h"

namespace llmd::epp::extproc {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

}  // namespace

struct GrpcServer::Impl : std::enable_shared_from_this<GrpcServer::Impl> {
  Impl(GrpcServerOptions o, http::IoWorkers& w) : options(std::move(o)), workers(w) {}

  // Runs `fn` on `worker` unless the server is gone; the destructor waits for what is queued.
  // On the data path (every prediction's continuation), so no lock: counted first, then the
  // gate read (sequentially consistent), so a post that saw the gate open is one the closing
  // destructor sees in the count.
  void post(std::size_t worker, std::function<void()> fn) {
    queued.fetch_add(1);
    if (!open.load()) {
      queued.fetch_sub(1);
      return;
    }
    net::post(workers.at(worker), [this, fn = std::move(fn)] {
      fn();
      queued.fetch_sub(1);
    });
  }
  // On worker 0: a connection the listener accepted (TLS handshake next, when configured).
  void on_accept(tcp::socket socket, http::ConnectionSlot slot);
  // The connection's bytes are ready (TCP accepted, TLS handshake done): its HTTP/2 session.
  void adopt(std::unique_ptr<ByteStream> stream, http::ConnectionSlot slot);
  // A connection is gone (from its destructor).
  void forget(const Http2Connection* connection);
  struct Tracked {
    std::weak_ptr<Http2Connection> connection;
    std::size_t worker = 0;
  };
  std::vector<std::pair<std::shared_ptr<Http2Connection>, std::size_t>> live_connections();

  const GrpcServerOptions options;
  http::IoWorkers& workers;
  std::map<std::string, Method, std::less<>> methods;  // fixed once started
  std::unique_ptr<http::Listener> listener;            // from start()
  std::atomic<int> calls{0};
  GrpcCounters counters;

  std::mutex mu;
  std::condition_variable cv;
  bool shut_down = false;                                 // guarded by mu
  bool shutdown_over = false;                             // guarded by mu
  std::map<const Http2Connection*, Tracked> connections;  // guarded by mu
  std::atomic<bool> open{true};                           // posts accepted
  std::atomic<std::size_t> queued{0};                     // posts not yet run
};

class GrpcConnection;

// One call: what its handler has sent and how it ends, and the response body its connection
// pulls. Used on its connection's worker; the connection holds it until the HTTP/2 stream
// closes, the handler's continuations may hold it longer (their sends are then dropped).
class CallImpl final : public GrpcCall, public Http2Body {
 public:
  CallImpl(std::weak_ptr<GrpcConnection> connection, int32_t id,
           std::shared_ptr<GrpcServer::Impl> server, std::size_t worker)
      : id_(id), connection_(std::move(connection)), server_(std::move(server)), worker_(worker) {}

  // GrpcCall
  void send(std::string message) override;
  void finish(GrpcStatus status) override;
  bool ended() const override { return ended_; }
  void post(std::function<void()> fn) override { server_->post(worker_, std::move(fn)); }

  // Http2Body
  std::size_t read(uint8_t* out, std::size_t max) override;
  bool complete() const override { return finished_; }
  std::vector<http::Header> trailers() const override { return status_trailers(status_); }

  // The connection's side.
  std::size_t queued() const { return out_.size() - out_pos_; }
  const int32_t id_;
  std::string out_;  // framed messages not yet taken by nghttp2
  std::size_t out_pos_ = 0;
  bool input_paused_ = false;      // queued() went over the stream buffer limit, not yet under half
  bool response_started_ = false;  // response headers submitted
  bool finished_ = false;          // the status is decided: trailers follow the output
  bool ended_ = false;             // nothing more from the handler
  GrpcStatus status_;
  std::unique_ptr<net::steady_timer> deadline_;

 private:
  void output();

  std::weak_ptr<GrpcConnection> connection_;
  std::shared_ptr<GrpcServer::Impl> server_;
  const std::size_t worker_;
};

// The calls of one HTTP/2 connection, on its worker: each stream's request head and messages
// become a call and its handler's events, run in arrival order outside nghttp2 (run_pending).
// Owned by its Http2Connection.
class GrpcConnection final : public Http2Streams {
 public:
  GrpcConnection(std::shared_ptr<GrpcServer::Impl> server, Http2Connection& http2,
                 http::ConnectionSlot slot)
      : server_(std::move(server)), http2_(http2), slot_(std::move(slot)) {}
  ~GrpcConnection() override {
    slot_ = http::ConnectionSlot();  // before the server hears the connection is gone
    server_->forget(&http2_);
  }

  // A call has output (messages or its end) for the peer.
  void output(CallImpl& call);
  // The call's response has `bytes` more waiting for the peer / nghttp2 took `bytes` of it: the
  // watermarks of GrpcLimits::stream_buffer_bytes and connection_buffer_bytes.
  void queued(CallImpl& call, std::size_t bytes);
  void taken(CallImpl& call, std::size_t bytes);

  // Http2Streams
  void on_request_begin(int32_t id) override;
  void on_request_header(int32_t id, std::string_view name, std::string_view value) override;
  void on_request_headers_end(int32_t id) override { record(id, EventKind::kOpen); }
  void on_data(int32_t id, std::string_view bytes) override;
  void on_end_stream(int32_t id) override { record(id, EventKind::kHalfClose); }
  void on_stream_close(int32_t id) override { record(id, EventKind::kClosed); }
  bool has_pending() const override { return !events_.empty(); }
  bool wants_input(int32_t id) const override;
  void run_pending() override;
  void on_close() override;

 private:
  struct Stream {
    explicit Stream(std::size_t max_message_bytes) : decoder(max_message_bytes) {}
    std::shared_ptr<CallImpl> call;  // from the request headers on
    std::unique_ptr<GrpcCallHandler> handler;
    RequestHead head;
    MessageDecoder decoder;
    bool dead = false;         // ended by the server (bad message, deadline): input is dropped
    std::size_t budgeted = 0;  // the message being received holds this of the budget (arrived)
  };
  enum class EventKind { kOpen, kMessage, kOverBudget, kHalfClose, kReject, kClosed };
  struct Event {
    int32_t stream;
    EventKind kind;
    std::string message;  // kMessage: the message; kReject: why
    GrpcCode code = GrpcCode::kOk;
    std::size_t bytes = 0;  // kMessage: its budget share; kOverBudget: its size
  };

  std::weak_ptr<GrpcConnection> weak_self() {
    return std::shared_ptr<GrpcConnection>(http2_.shared_from_this(), this);
  }
  void record(int32_t id, EventKind kind);
  void frame_messages(int32_t id, Stream& s);
  // Grows what the message being received holds of the message budget to the `arrived` bytes
  // of it (prefix included); false when the budget or this connection's share of it is used.
  bool take_budget(Stream& s, std::size_t arrived);
  // The bytes of the budget one connection may hold (GrpcServerOptions::connection_budget_share).
  static std::size_t share_of(const GrpcServerOptions& o);
  void run(Event& e, Stream& s);
  void open(int32_t id, Stream& s);
  void arm_deadline(int32_t id, Stream& s);
  // Ends a call the server gives up on: its status goes out, its handler hears on_cancel().
  void end_call(Stream& s, GrpcStatus status);
  // The stream is gone (closed, or the connection is): a call that had not ended is cancelled
  // for its handler, and the call stops counting.
  void release(Stream& s);
  void give_back(std::size_t bytes);

  const std::shared_ptr<GrpcServer::Impl> server_;
  Http2Connection& http2_;  // the owner
  http::ConnectionSlot slot_;
  std::unordered_map<int32_t, Stream> streams_;
  std::vector<Event> events_;
  const std::size_t connection_share_ = share_of(server_->options);
  std::size_t held_ = 0;       // of the budget, by this connection's streams and events
  std::size_t queued_ = 0;     // response bytes of all its calls waiting for the peer
  bool input_paused_ = false;  // queued_ went over the connection buffer limit, not yet under half
};

void CallImpl::send(std::string message) {
  if (ended_) {
    return;
  }
  const std::size_t before = out_.size();
  if (!append_message(out_, message)) {
    finish({GrpcCode::kInternal, "a message of over 4 GiB cannot be framed"});
    return;
  }
  if (auto c = connection_.lock()) {
    c->queued(*this, out_.size() - before);
  }
  output();
}

void CallImpl::finish(GrpcStatus status) {
  if (ended_) {
    return;
  }
  ended_ = finished_ = true;
  status_ = std::move(status);
  if (deadline_) {
    deadline_->cancel();
  }
  output();
}

void CallImpl::output() {
  if (auto c = connection_.lock()) {
    c->output(*this);
  }
}

std::size_t CallImpl::read(uint8_t* out, std::size_t max) {
  const std::size_t n = std::min(out_.size() - out_pos_, max);
  std::memcpy(out, out_.data() + out_pos_, n);
  out_pos_ += n;
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  }
  if (n > 0) {
    if (auto c = connection_.lock()) {
      c->taken(*this, n);
    }
  }
  return n;
}

void GrpcConnection::queued(CallImpl& call, std::size_t bytes) {
  queued_ += bytes;
  const GrpcLimits& limits = server_->options.limits;
  if (!call.input_paused_ && call.queued() > limits.stream_buffer_bytes) {
    call.input_paused_ = true;
    server_->counters.stream_input_pauses.fetch_add(1);
  }
  if (!input_paused_ && queued_ > limits.connection_buffer_bytes) {
    input_paused_ = true;
    server_->counters.connection_input_pauses.fetch_add(1);
  }
}

void GrpcConnection::taken(CallImpl& call, std::size_t bytes) {
  queued_ -= std::min(bytes, queued_);
  // Resumed at half the limit (Envoy's low watermark), so a peer reading slowly does not
  // toggle the window with every frame.
  const GrpcLimits& limits = server_->options.limits;
  bool resumed = false;
  if (call.input_paused_ && call.queued() <= limits.stream_buffer_bytes / 2) {
    call.input_paused_ = false;
    resumed = true;
  }
  if (input_paused_ && queued_ <= limits.connection_buffer_bytes / 2) {
    input_paused_ = false;
    resumed = true;
  }
  if (resumed) {
    http2_.input_wanted();
  }
}

bool GrpcConnection::wants_input(int32_t id) const {
  if (id == 0) {
    return !input_paused_;
  }
  const auto it = streams_.find(id);
  return it == streams_.end() || !it->second.call || !it->second.call->input_paused_;
}

void GrpcConnection::output(CallImpl& call) {
  if (http2_.closed()) {
    return;
  }
  if (call.response_started_) {
    http2_.resume(call.id_);
    return;
  }
  call.response_started_ = true;
  if (call.finished_ && call.out_.empty()) {
    http2_.respond(call.id_, trailers_only(call.status_), nullptr);
  } else {
    http2_.respond(call.id_, response_headers(), &call);
  }
}

void GrpcConnection::on_request_begin(int32_t id) {
  streams_.try_emplace(id, server_->options.max_message_bytes);
}

void GrpcConnection::on_request_header(int32_t id, std::string_view name, std::string_view value) {
  if (auto it = streams_.find(id); it != streams_.end()) {
    it->second.head.add(name, value);
  }
}

void GrpcConnection::record(int32_t id, EventKind kind) {
  if (streams_.find(id) != streams_.end()) {
    events_.push_back({id, kind, {}});
  }
}

void GrpcConnection::on_data(int32_t id, std::string_view bytes) {
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second.dead) {
    return;
  }
  it->second.decoder.feed(bytes);
  frame_messages(id, it->second);
}

void GrpcConnection::frame_messages(int32_t id, Stream& s) {
  while (true) {
    const MessageDecoder::Next next = s.decoder.next();
    if (next.state == MessageDecoder::State::kNeedMore) {
      return;
    }
    if (next.state == MessageDecoder::State::kError) {
      s.dead = true;
      events_.push_back({id, EventKind::kReject, next.error.message, next.error.code});
      return;
    }
    const std::size_t whole = kMessagePrefixBytes + next.length;
    if (!take_budget(s, std::min(s.decoder.buffered(), whole))) {
      // Dropped: what is here of it now (its bytes go back), and the rest as it arrives.
      give_back(std::exchange(s.budgeted, 0));
      server_->counters.messages_over_budget.fetch_add(1);
      events_.push_back({id, EventKind::kOverBudget, {}, GrpcCode::kOk, next.length});
      s.decoder.skip();
      continue;
    }
    auto message = s.decoder.take();
    if (!message) {
      return;
    }
    events_.push_back({id, EventKind::kMessage, std::move(*message), GrpcCode::kOk,
                       std::exchange(s.budgeted, 0)});
  }
}

bool GrpcConnection::take_budget(Stream& s, std::size_t arrived) {
  const auto& budget = server_->options.message_budget;
  if (!budget || arrived <= s.budgeted) {
    return true;
  }
  const std::size_t more = arrived - s.budgeted;
  if (more > connection_share_ - held_ || !budget->try_take(more)) {
    return false;
  }
  held_ += more;
  s.budgeted += more;
  return true;
}

void GrpcConnection::run_pending() {
  // Handlers only send and finish: they add no events, so the list is stable while it runs.
  for (Event& e : events_) {
    auto it = streams_.find(e.stream);
    if (it == streams_.end()) {
      give_back(e.kind == EventKind::kMessage ? e.bytes : 0);
      continue;
    }
    run(e, it->second);
    if (e.kind == EventKind::kClosed) {
      streams_.erase(it);
    }
  }
  events_.clear();
}

void GrpcConnection::run(Event& e, Stream& s) {
  switch (e.kind) {
    case EventKind::kOpen:
      open(e.stream, s);
      break;
    case EventKind::kMessage:
      // Given back as the handler gets it: what the handler keeps is its own to count, and
      // the copies it makes while it runs are one message per worker at a time.
      give_back(e.bytes);
      if (s.handler && !s.call->ended_) {
        s.handler->on_message(std::move(e.message));
      }
      break;
    case EventKind::kOverBudget:
      if (s.handler && !s.call->ended_ && !s.handler->on_message_over_budget(e.bytes)) {
        end_call(s, {GrpcCode::kResourceExhausted, "the server's message budget is in use"});
      }
      break;
    case EventKind::kHalfClose:
      if (s.call && !s.call->ended_ && s.decoder.holds_partial()) {
        end_call(s, {GrpcCode::kInternal, "the stream ended inside a message (truncated)"});
      } else if (s.handler && !s.call->ended_) {
        s.handler->on_half_close();
      }
      break;
    case EventKind::kReject:
      end_call(s, {e.code, e.message});
      break;
    case EventKind::kClosed:
      release(s);
      break;
  }
}

void GrpcConnection::open(int32_t id, Stream& s) {
  s.call = std::make_shared<CallImpl>(weak_self(), id, server_, slot_.worker());
  if (const int refusal = http_refusal(s.head); refusal != 0) {
    // Not gRPC: HTTP's own answer.
    s.dead = true;
    s.call->ended_ = s.call->response_started_ = true;
    http2_.respond(id, {{":status", std::to_string(refusal)}}, nullptr);
    return;
  }
  const auto method = server_->methods.find(s.head.path);
  if (auto refused = call_refusal(s.head, method != server_->methods.end())) {
    end_call(s, std::move(*refused));
    return;
  }
  s.handler = method->second(s.call);
  server_->calls.fetch_add(1);
  arm_deadline(id, s);
}

void GrpcConnection::arm_deadline(int32_t id, Stream& s) {
  const auto timeout = parse_grpc_timeout(s.head.timeout);
  if (!timeout) {
    return;
  }
  s.call->deadline_ =
      std::make_unique<net::steady_timer>(server_->workers.at(slot_.worker()), *timeout);
  s.call->deadline_->async_wait([weak = weak_self(), id](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->http2_.closed()) {
      return;
    }
    auto it = self->streams_.find(id);
    if (it != self->streams_.end()) {
      self->end_call(it->second, {GrpcCode::kDeadlineExceeded, "deadline exceeded"});
    }
  });
}

void GrpcConnection::give_back(std::size_t bytes) {
  if (bytes > 0 && server_->options.message_budget) {
    held_ -= bytes;
    server_->options.message_budget->give_back(bytes);
  }
}

std::size_t GrpcConnection::share_of(const GrpcServerOptions& o) {
  if (!o.message_budget) {
    return 0;
  }
  const std::size_t capacity = o.message_budget->capacity();
  const double share = std::clamp(o.limits.connection_budget_share, 0.0, 1.0);
  const auto part = static_cast<std::size_t>(static_cast<double>(capacity) * share);
  const std::size_t one_message = std::min(capacity, kMessagePrefixBytes + o.max_message_bytes);
  return share >= 1.0 ? capacity : std::max(part, one_message);
}

void GrpcConnection::release(Stream& s) {
  give_back(std::exchange(s.budgeted, 0));  // a message that will not arrive whole now
  if (s.call && s.call->queued() > 0) {     // a response the peer reset unread
    const std::size_t unread = s.call->queued();
    s.call->out_.clear();
    s.call->out_pos_ = 0;
    taken(*s.call, unread);  // gone unsent: the connection's watermark counts it no more
  }
  if (s.handler) {
    server_->calls.fetch_sub(1);
    if (!s.call->ended_) {
      s.call->ended_ = true;
      s.handler->on_cancel();
    }
  }
  if (s.call) {
    s.call->deadline_.reset();  // the timer must not outlive the workers with the call
  }
}

void GrpcConnection::end_call(Stream& s, GrpcStatus status) {
  s.dead = true;
  if (!s.call || s.call->ended_) {
    return;
  }
  s.call->finish(std::move(status));
  if (s.handler) {
    s.handler->on_cancel();
  }
}

void GrpcConnection::on_close() {
  for (auto& [id, s] : streams_) {
    release(s);
  }
  streams_.clear();
  for (const Event& e : events_) {
    if (e.kind == EventKind::kMessage) {
      give_back(e.bytes);
    }
  }
  events_.clear();
}

void GrpcServer::Impl::on_accept(tcp::socket socket, http::ConnectionSlot slot) {
  if (!options.tls_context) {
    adopt(plain_stream(std::move(socket)), std::move(slot));
    return;
  }
  auto held = std::make_shared<http::ConnectionSlot>(std::move(slot));
  accept_tls(
      std::move(socket), options.tls_context(), options.handshake_timeout,
      [self = shared_from_this(), held](std::unique_ptr<ByteStream> stream, std::string why) {
        if (!stream) {
          spdlog::debug("grpc: {} on port {}", why, self->listener->port());
          return;  // the slot goes with `held`
        }
        self->adopt(std::move(stream), std::move(*held));
      });
}

void GrpcServer::Impl::adopt(std::unique_ptr<ByteStream> stream, http::ConnectionSlot slot) {
  const std::size_t worker = slot.worker();
  Http2Options ho;
  ho.max_concurrent_streams = options.max_concurrent_streams;
  ho.handshake_timeout = options.handshake_timeout;
  ho.limits = options.limits;
  ho.counters = &counters;
  ho.http1 = options.http1;
  auto connection =
      std::make_shared<Http2Connection>(std::move(stream), std::move(ho), workers.at(worker));
  connection->set_streams(
      std::make_unique<GrpcConnection>(shared_from_this(), *connection, std::move(slot)));
  {
    std::lock_guard lock(mu);
    if (shut_down) {
      return;  // a TLS handshake that ended after the listener closed
    }
    connections.emplace(connection.get(), Tracked{connection, worker});
  }
  net::post(workers.at(worker), [connection] { connection->start(); });
}

void GrpcServer::Impl::forget(const Http2Connection* connection) {
  std::lock_guard lock(mu);
  connections.erase(connection);
  cv.notify_all();
}

std::vector<std::pair<std::shared_ptr<Http2Connection>, std::size_t>>
GrpcServer::Impl::live_connections() {
  std::vector<std::pair<std::shared_ptr<Http2Connection>, std::size_t>> live;
  std::lock_guard lock(mu);
  for (auto& [key, tracked] : connections) {
    if (auto c = tracked.connection.lock()) {
      live.emplace_back(std::move(c), tracked.worker);
    }
  }
  return live;
}

GrpcServer::GrpcServer(GrpcServerOptions options, http::IoWorkers& workers)
    : impl_(std::make_shared<Impl>(std::move(options), workers)) {}

GrpcServer::~GrpcServer() {
  shutdown(std::chrono::milliseconds(0));
  impl_->open.store(false);
  // Rare and short (what the workers already hold): polled, so the posts need no lock.
  while (impl_->queued.load() != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void GrpcServer::add_method(const std::string& path, Method method) {
  impl_->methods[path] = std::move(method);
}

void GrpcServer::start() {
  Impl& s = *impl_;
  s.workers.start();
  http::ListenerOptions lo;
  lo.host = s.options.host;
  lo.port = s.options.port;
  lo.descriptors_per_connection = s.options.take_descriptors ? 1 : 0;
  lo.log_name = "grpc";
  try {
    s.listener = std::make_unique<http::Listener>(
        std::move(lo), s.workers,
        std::make_shared<http::ConnectionCounts>(s.workers.size(), s.options.max_connections));
  } catch (const std::exception& e) {
    throw std::runtime_error(
        fmt::format("cannot serve gRPC on {}:{}: {}", s.options.host, s.options.port, e.what()));
  }
  // The listener is closed (shutdown) before the Impl can go.
  s.listener->start([&s](tcp::socket socket, http::ConnectionSlot slot) {
    s.on_accept(std::move(socket), std::move(slot));
  });
}

uint16_t GrpcServer::port() const {
  return impl_->listener ? impl_->listener->port() : 0;
}

int GrpcServer::open_calls() const {
  return impl_->calls.load();
}

const GrpcCounters& GrpcServer::counters() const {
  return impl_->counters;
}

void GrpcServer::shutdown(std::chrono::milliseconds timeout) {
  Impl& s = *impl_;
  {
    std::unique_lock lock(s.mu);
    if (s.shut_down) {
      // Another thread's shutdown is under way: this one returns once it is over.
      s.cv.wait(lock, [&s] { return s.shutdown_over; });
      return;
    }
    s.shut_down = true;
  }
  if (s.listener) {
    s.listener->close();
  }
  for (auto& [c, worker] : s.live_connections()) {
    net::post(s.workers.at(worker), [c = c] { c->go_away(); });
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  {
    std::unique_lock lock(s.mu);
    while (s.calls.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      s.cv.wait_for(lock, std::chrono::milliseconds(5));
    }
  }
  for (auto& [c, worker] : s.live_connections()) {
    net::post(s.workers.at(worker), [c = c] { c->close(); });
  }
  // The connections go once their pending reads and writes have returned (a few ms).
  std::unique_lock lock(s.mu);
  s.cv.wait_for(lock, std::chrono::seconds(10), [&s] { return s.connections.empty(); });
  s.shutdown_over = true;
  s.cv.notify_all();
}

}  // namespace llmd::epp::extproc
