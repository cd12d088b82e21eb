#include "epp/extproc/grpc_server.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
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
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/http/body_budget.h"
#include "common/http/descriptor_budget.h"
#include "common/http/io_workers.h"
#include "epp/extproc/byte_stream.h"
#include "epp/extproc/http1_probe.h"

namespace llmd::epp::extproc {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

constexpr std::size_t kPrefix = 5;                // compressed flag + 4-byte length
constexpr std::size_t kWriteBatch = 256 * 1024;   // bytes gathered per socket write at most
constexpr int32_t kStreamWindow = 4 * 1024 * 1024;       // a 16-MiB body in a few round trips
constexpr int32_t kConnectionWindow = 16 * 1024 * 1024;

// grpc-timeout: up to 8 digits and a unit (H, M, S, m, u, n).
std::optional<std::chrono::nanoseconds> parse_timeout(std::string_view v) {
  if (v.size() < 2 || v.size() > 9) {
    return std::nullopt;
  }
  int64_t n = 0;
  for (char c : v.substr(0, v.size() - 1)) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    n = n * 10 + (c - '0');
  }
  using namespace std::chrono;
  switch (v.back()) {
    case 'H': return hours(n);
    case 'M': return minutes(n);
    case 'S': return seconds(n);
    case 'm': return milliseconds(n);
    case 'u': return microseconds(n);
    case 'n': return nanoseconds(n);
    default: return std::nullopt;
  }
}

// grpc-message is percent-encoded outside printable ASCII (and '%' itself).
std::string percent_encode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c > 0x7e || c == '%') {
      out += fmt::format("%{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

nghttp2_nv header(std::string_view name, std::string_view value) {
  // nghttp2 copies names and values on submit (no NO_COPY flags).
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

class Connection;

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
  void accept();
  void accept_later(const std::string& why);
  void adopt(std::unique_ptr<ByteStream> stream, std::size_t worker);
  std::vector<std::shared_ptr<Connection>> live_connections();

  const GrpcServerOptions options;
  http::IoWorkers& workers;
  std::map<std::string, Method, std::less<>> methods;  // fixed once started
  std::unique_ptr<tcp::acceptor> acceptor;             // on worker 0
  std::unique_ptr<net::steady_timer> retry_timer;      // on worker 0: accepting again
  uint16_t bound_port = 0;
  std::atomic<bool> accepting{false};
  std::atomic<int> calls{0};
  std::atomic<std::size_t> open_connections{0};  // accepted and not yet destroyed
  std::atomic<std::size_t> next_worker{0};
  std::chrono::milliseconds backoff{0};  // worker 0's

  std::mutex mu;
  std::condition_variable cv;
  bool shut_down = false;                                   // guarded by mu
  bool shutdown_over = false;                               // guarded by mu
  std::map<const Connection*, std::weak_ptr<Connection>> connections;  // guarded by mu
  std::atomic<bool> open{true};      // posts accepted
  std::atomic<std::size_t> queued{0};  // posts not yet run
};

// One call: what its handler has sent and how it ends. Used on its connection's worker; the
// connection's Stream holds it until the HTTP/2 stream closes, the handler's continuations may
// hold it longer (their sends are then dropped).
class CallImpl final : public GrpcCall {
 public:
  CallImpl(std::weak_ptr<Connection> connection, int32_t id,
           std::shared_ptr<GrpcServer::Impl> server, std::size_t worker)
      : id_(id), connection_(std::move(connection)), server_(std::move(server)), worker_(worker) {}

  void send(std::string message) override;
  void finish(GrpcStatus status) override;
  bool ended() const override { return ended_; }
  void post(std::function<void()> fn) override { server_->post(worker_, std::move(fn)); }

  // The connection's side.
  const int32_t id_;
  std::string out_;  // framed messages not yet taken by nghttp2
  std::size_t out_pos_ = 0;
  bool response_started_ = false;  // response headers submitted
  bool finished_ = false;          // the status is decided: trailers follow the output
  bool ended_ = false;             // nothing more from the handler
  GrpcStatus status_;
  std::unique_ptr<net::steady_timer> deadline_;

 private:
  std::weak_ptr<Connection> connection_;
  std::shared_ptr<GrpcServer::Impl> server_;
  const std::size_t worker_;
};

// One HTTP/2 connection on one worker. nghttp2's callbacks only record what arrived (events);
// the handlers run after each read (dispatch), outside nghttp2, in arrival order.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<GrpcServer::Impl> server, std::unique_ptr<ByteStream> stream,
             std::size_t worker)
      : server_(std::move(server)), stream_(std::move(stream)), worker_(worker),
        handshake_(server_->workers.at(worker)),
        protocol_(server_->options.http1 ? Protocol::kUndecided : Protocol::kHttp2) {}
  ~Connection() {
    if (session_ != nullptr) {
      nghttp2_session_del(session_);
    }
    if (server_->options.take_descriptors) {
      http::DescriptorBudget::process().give_back(1);
    }
    server_->open_connections.fetch_sub(1);
    std::lock_guard lock(server_->mu);
    server_->connections.erase(this);
    server_->cv.notify_all();
  }

  void start();
  std::size_t worker() const { return worker_; }
  // No new calls (GOAWAY); the connection closes once its calls have ended.
  void go_away();
  // Cancels every call and closes.
  void close();
  // A call has output (messages or its end) for nghttp2.
  void output(CallImpl& call);

 private:
  struct Stream {
    std::shared_ptr<CallImpl> call;  // from the request headers on
    std::unique_ptr<GrpcCallHandler> handler;
    std::string method, path, content_type, encoding, timeout;
    std::string in;  // received bytes not yet framed into messages
    std::size_t in_pos = 0;
    bool dead = false;  // ended by the server (bad message, deadline): input is dropped
    std::size_t budgeted = 0;  // the message being received took this from the budget
    std::size_t skip = 0;      // bytes of a message refused by the budget still to drop
  };
  enum class EventKind { kOpen, kMessage, kOverBudget, kHalfClose, kReject, kClosed };
  struct Event {
    int32_t stream;
    EventKind kind;
    std::string message;  // kMessage: the message; kReject: why
    GrpcCode code = GrpcCode::kOk;
    std::size_t bytes = 0;  // kMessage: its budget share; kOverBudget: its size
  };

  static nghttp2_session_callbacks* callbacks();
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* self);
  static int on_header(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                       std::size_t namelen, const uint8_t* value, std::size_t valuelen, uint8_t,
                       void* self);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* self);
  static int on_data_chunk(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data,
                           std::size_t len, void* self);
  static int on_stream_close(nghttp2_session*, int32_t id, uint32_t, void* self);
  static ssize_t read_output(nghttp2_session* s, int32_t id, uint8_t* buf, std::size_t length,
                             uint32_t* flags, nghttp2_data_source* source, void*);

  void frame_messages(int32_t id, Stream& s);
  void dispatch();
  void open(int32_t id, Stream& s);
  // Ends a call the server gives up on: its status goes out, its handler hears on_cancel().
  void end_call(Stream& s, GrpcStatus status);
  // The stream is gone (closed, or the connection is): a call that had not ended is cancelled
  // for its handler, and the call stops counting.
  void release(Stream& s);
  void give_back(std::size_t bytes);
  void read();
  void flush();
  // The HTTP/2 session, once the peer has shown it speaks HTTP/2 (at once without http1).
  void start_http2();
  // Bytes of a connection whose protocol is not known yet, or of an HTTP/1.1 request; false
  // when the connection is done with (answered or closed).
  bool sniff(const uint8_t* data, std::size_t n);

  std::shared_ptr<GrpcServer::Impl> server_;
  std::unique_ptr<ByteStream> stream_;
  const std::size_t worker_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, Stream> streams_;
  std::vector<Event> events_;
  std::vector<uint8_t> read_buffer_ = std::vector<uint8_t>(64 * 1024);
  std::string write_buffer_;
  bool writing_ = false;
  bool dispatching_ = false;  // handlers are running: flush once they are done
  bool closed_ = false;
  net::steady_timer handshake_;  // closes a connection that never sends a byte
  bool heard_ = false;           // the peer has sent something
  Protocol protocol_;            // kUndecided until the first bytes tell (with http1 only)
  std::string sniffed_;          // those first bytes, or the HTTP/1.1 request head
};

void CallImpl::send(std::string message) {
  if (ended_) {
    return;
  }
  const auto n = static_cast<uint32_t>(message.size());
  const char prefix[kPrefix] = {0, static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                                static_cast<char>(n >> 8), static_cast<char>(n)};
  out_.append(prefix, kPrefix);
  out_ += message;
  if (auto c = connection_.lock()) {
    c->output(*this);
  }
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
  if (auto c = connection_.lock()) {
    c->output(*this);
  }
}

nghttp2_session_callbacks* Connection::callbacks() {
  static nghttp2_session_callbacks* const cbs = [] {
    nghttp2_session_callbacks* c = nullptr;
    nghttp2_session_callbacks_new(&c);
    nghttp2_session_callbacks_set_on_begin_headers_callback(c, &on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(c, &on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, &on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, &on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, &on_stream_close);
    return c;
  }();
  return cbs;
}

void Connection::start() {
  handshake_.expires_after(server_->options.handshake_timeout);
  handshake_.async_wait([weak = weak_from_this()](error_code ec) {
    if (auto self = weak.lock(); self && !ec && !self->heard_) {
      self->close();
    }
  });
  if (protocol_ == Protocol::kHttp2) {
    start_http2();
    flush();
  }
  read();
}

void Connection::start_http2() {
  nghttp2_session_server_new(&session_, callbacks(), this);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, server_->options.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

bool Connection::sniff(const uint8_t* data, std::size_t n) {
  sniffed_.append(reinterpret_cast<const char*>(data), n);
  if (protocol_ == Protocol::kUndecided) {
    protocol_ = sniff_protocol(sniffed_);
    if (protocol_ == Protocol::kUndecided) {
      return true;  // a prefix of the preface: more bytes tell
    }
    if (protocol_ == Protocol::kHttp2) {
      heard_ = true;
      handshake_.cancel();
      start_http2();
      const std::string first = std::move(sniffed_);
      sniffed_.clear();
      const ssize_t rv = nghttp2_session_mem_recv(
          session_, reinterpret_cast<const uint8_t*>(first.data()), first.size());
      dispatch();
      if (rv < 0) {
        close();
        return false;
      }
      flush();
      return !closed_;
    }
  }
  auto answer = answer_http1(sniffed_, server_->options.http1);
  if (!answer) {
    return true;
  }
  auto out = std::make_shared<std::string>(std::move(*answer));
  stream_->write(net::buffer(*out), [self = shared_from_this(), out](error_code, std::size_t) {
    self->close();
  });
  return false;
}

void Connection::read() {
  stream_->read_some(
      net::buffer(read_buffer_), [self = shared_from_this()](error_code ec, std::size_t n) {
        if (self->closed_) {
          return;
        }
        if (ec) {
          self->close();
          return;
        }
        if (self->protocol_ != Protocol::kHttp2) {
          // Until the preface is complete (or for the whole HTTP/1.1 request) the handshake
          // timeout still runs: a peer that stalls there is closed by it.
          if (self->sniff(self->read_buffer_.data(), n) && !self->closed_) {
            self->read();
          }
          return;
        }
        if (!self->heard_) {
          self->heard_ = true;
          self->handshake_.cancel();
        }
        const ssize_t rv = nghttp2_session_mem_recv(self->session_, self->read_buffer_.data(), n);
        self->dispatch();
        if (rv < 0) {
          spdlog::debug("grpc: closing a connection: {}", nghttp2_strerror(static_cast<int>(rv)));
          self->close();
          return;
        }
        self->flush();
        if (!self->closed_) {
          self->read();
        }
      });
}

void Connection::flush() {
  if (closed_ || writing_ || session_ == nullptr) {
    return;
  }
  while (true) {
    while (write_buffer_.size() < kWriteBatch) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        close();
        return;
      }
      if (n == 0) {
        break;
      }
      write_buffer_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    // Sending the last frame of a stream closes it (on_stream_close): its handler goes now,
    // not at the connection's next read.
    if (events_.empty() || dispatching_) {
      break;
    }
    dispatch();
  }
  if (write_buffer_.empty()) {
    if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
      close();
    }
    return;
  }
  writing_ = true;
  stream_->write(net::buffer(write_buffer_),
                   [self = shared_from_this()](error_code ec, std::size_t) {
                     self->writing_ = false;
                     self->write_buffer_.clear();
                     if (ec) {
                       self->close();
                       return;
                     }
                     self->flush();
                   });
}

void Connection::go_away() {
  if (closed_ || session_ == nullptr) {
    return;
  }
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                        NGHTTP2_NO_ERROR, nullptr, 0);
  flush();
}

void Connection::close() {
  if (closed_) {
    return;
  }
  closed_ = true;
  dispatching_ = true;  // the handlers' reactions below write nothing
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
  handshake_.cancel();
  stream_->close();
}

void Connection::output(CallImpl& call) {
  if (closed_) {
    return;
  }
  if (session_ == nullptr) {
    return;
  }
  if (!call.response_started_) {
    call.response_started_ = true;
    if (call.finished_ && call.out_.empty()) {
      // Trailers-only: the call ends before any message.
      const std::string code = std::to_string(static_cast<int>(call.status_.code));
      const std::string message = percent_encode(call.status_.message);
      std::vector<nghttp2_nv> h{header(":status", "200"), header("content-type", "application/grpc"),
                                header("grpc-status", code)};
      if (!message.empty()) {
        h.push_back(header("grpc-message", message));
      }
      nghttp2_submit_response(session_, call.id_, h.data(), h.size(), nullptr);
    } else {
      const nghttp2_nv h[] = {header(":status", "200"), header("content-type", "application/grpc"),
                              header("grpc-accept-encoding", "identity")};
      nghttp2_data_provider provider{};
      provider.source.ptr = &call;
      provider.read_callback = &read_output;
      nghttp2_submit_response(session_, call.id_, h, std::size(h), &provider);
    }
  } else {
    nghttp2_session_resume_data(session_, call.id_);  // an error when not deferred: harmless
  }
  if (!dispatching_) {
    flush();
  }
}

ssize_t Connection::read_output(nghttp2_session* session, int32_t id, uint8_t* buf,
                                std::size_t length, uint32_t* flags, nghttp2_data_source* source,
                                void*) {
  auto& call = *static_cast<CallImpl*>(source->ptr);
  const std::size_t left = call.out_.size() - call.out_pos_;
  if (left > 0) {
    const std::size_t n = std::min(left, length);
    std::memcpy(buf, call.out_.data() + call.out_pos_, n);
    call.out_pos_ += n;
    if (call.out_pos_ == call.out_.size()) {
      call.out_.clear();
      call.out_pos_ = 0;
    }
    return static_cast<ssize_t>(n);
  }
  if (!call.finished_) {
    return NGHTTP2_ERR_DEFERRED;
  }
  *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
  const std::string code = std::to_string(static_cast<int>(call.status_.code));
  const std::string message = percent_encode(call.status_.message);
  std::vector<nghttp2_nv> trailers{header("grpc-status", code)};
  if (!message.empty()) {
    trailers.push_back(header("grpc-message", message));
  }
  nghttp2_submit_trailer(session, id, trailers.data(), trailers.size());
  return 0;
}

int Connection::on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* self) {
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
    static_cast<Connection*>(self)->streams_.try_emplace(f->hd.stream_id);
  }
  return 0;
}

int Connection::on_header(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                          std::size_t namelen, const uint8_t* value, std::size_t valuelen, uint8_t,
                          void* self) {
  auto& streams = static_cast<Connection*>(self)->streams_;
  auto it = streams.find(f->hd.stream_id);
  if (it == streams.end() || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;  // trailers from a client carry nothing gRPC uses
  }
  const std::string_view n(reinterpret_cast<const char*>(name), namelen);
  const std::string v(reinterpret_cast<const char*>(value), valuelen);
  Stream& s = it->second;
  if (n == ":method") {
    s.method = v;
  } else if (n == ":path") {
    s.path = v;
  } else if (n == "content-type") {
    s.content_type = v;
  } else if (n == "grpc-encoding") {
    s.encoding = v;
  } else if (n == "grpc-timeout") {
    s.timeout = v;
  }
  return 0;
}

int Connection::on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* self) {
  auto& c = *static_cast<Connection*>(self);
  const int32_t id = f->hd.stream_id;
  if (c.streams_.find(id) == c.streams_.end()) {
    return 0;
  }
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
    c.events_.push_back({id, EventKind::kOpen, {}});
  }
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    c.events_.push_back({id, EventKind::kHalfClose, {}});
  }
  return 0;
}

int Connection::on_data_chunk(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data,
                              std::size_t len, void* self) {
  auto& c = *static_cast<Connection*>(self);
  auto it = c.streams_.find(id);
  if (it == c.streams_.end() || it->second.dead) {
    return 0;
  }
  Stream& s = it->second;
  const std::size_t dropped = std::min(s.skip, len);
  s.skip -= dropped;
  if (dropped < len) {
    s.in.append(reinterpret_cast<const char*>(data) + dropped, len - dropped);
    c.frame_messages(id, s);
  }
  return 0;
}

void Connection::frame_messages(int32_t id, Stream& s) {
  while (s.in.size() - s.in_pos >= kPrefix) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.in.data() + s.in_pos);
    const std::size_t length = (std::size_t{p[1]} << 24) | (std::size_t{p[2]} << 16) |
                               (std::size_t{p[3]} << 8) | std::size_t{p[4]};
    if (p[0] != 0) {
      s.dead = true;
      events_.push_back({id, EventKind::kReject, "compressed messages are not supported",
                         GrpcCode::kUnimplemented});
      break;
    }
    if (length > server_->options.max_message_bytes) {
      s.dead = true;
      events_.push_back({id, EventKind::kReject,
                         fmt::format("message of {} bytes is over the limit of {}", length,
                                     server_->options.max_message_bytes),
                         GrpcCode::kResourceExhausted});
      break;
    }
    const auto& budget = server_->options.message_budget;
    if (budget && s.budgeted == 0) {
      if (!budget->try_take(kPrefix + length)) {
        // Dropped unread: what is here of it now, and the rest as it arrives.
        events_.push_back({id, EventKind::kOverBudget, {}, GrpcCode::kOk, length});
        const std::size_t here = std::min(s.in.size() - s.in_pos, kPrefix + length);
        s.skip = kPrefix + length - here;
        s.in_pos += here;
        continue;
      }
      s.budgeted = kPrefix + length;
    }
    if (s.in.size() - s.in_pos < kPrefix + length) {
      s.in.reserve(s.in_pos + kPrefix + length);  // a large message grows the buffer once
      break;
    }
    const std::size_t budgeted = std::exchange(s.budgeted, 0);
    if (s.in_pos == 0 && s.in.size() == kPrefix + length) {
      // The buffer is exactly this message (a BUFFERED body of up to 16 MiB): moved, not copied.
      std::string message = std::move(s.in);
      message.erase(0, kPrefix);
      events_.push_back({id, EventKind::kMessage, std::move(message), GrpcCode::kOk, budgeted});
      s.in = std::string();
      return;
    }
    events_.push_back({id, EventKind::kMessage, s.in.substr(s.in_pos + kPrefix, length),
                       GrpcCode::kOk, budgeted});
    s.in_pos += kPrefix + length;
  }
  if (s.dead || s.in_pos == s.in.size()) {
    s.in = std::string();  // a large message's capacity goes with it
    s.in_pos = 0;
  }
}

int Connection::on_stream_close(nghttp2_session*, int32_t id, uint32_t, void* self) {
  auto& c = *static_cast<Connection*>(self);
  if (c.streams_.find(id) != c.streams_.end()) {
    c.events_.push_back({id, EventKind::kClosed, {}});
  }
  return 0;
}

void Connection::dispatch() {
  dispatching_ = true;
  // Handlers only send and finish: they add no events, so the list is stable while it runs.
  for (Event& e : events_) {
    auto it = streams_.find(e.stream);
    if (it == streams_.end()) {
      give_back(e.kind == EventKind::kMessage ? e.bytes : 0);
      continue;
    }
    Stream& s = it->second;
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
        if (s.handler && !s.call->ended_) {
          s.handler->on_half_close();
        }
        break;
      case EventKind::kReject:
        end_call(s, {e.code, e.message});
        break;
      case EventKind::kClosed:
        release(s);
        streams_.erase(it);
        break;
    }
  }
  events_.clear();
  dispatching_ = false;
}

void Connection::open(int32_t id, Stream& s) {
  s.call = std::make_shared<CallImpl>(weak_from_this(), id, server_, worker_);
  auto method = server_->methods.find(s.path);
  if (s.method != "POST" || s.content_type.rfind("application/grpc", 0) != 0) {
    // Not gRPC: HTTP's own answer (PROTOCOL-HTTP2.md: 415 for a wrong content type).
    s.dead = true;
    s.call->ended_ = s.call->response_started_ = true;
    const nghttp2_nv h[] = {header(":status", s.method != "POST" ? "405" : "415")};
    nghttp2_submit_response(session_, id, h, std::size(h), nullptr);
    return;
  }
  if (method == server_->methods.end()) {
    end_call(s, {GrpcCode::kUnimplemented, "unknown method " + s.path});
    return;
  }
  if (!s.encoding.empty() && s.encoding != "identity") {
    end_call(s, {GrpcCode::kUnimplemented, "grpc-encoding " + s.encoding + " is not supported"});
    return;
  }
  s.handler = method->second(s.call);
  server_->calls.fetch_add(1);
  if (const auto timeout = parse_timeout(s.timeout)) {
    s.call->deadline_ = std::make_unique<net::steady_timer>(server_->workers.at(worker_), *timeout);
    s.call->deadline_->async_wait([weak = weak_from_this(), id](error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_) {
        return;
      }
      auto it = self->streams_.find(id);
      if (it != self->streams_.end()) {
        self->end_call(it->second, {GrpcCode::kDeadlineExceeded, "deadline exceeded"});
      }
    });
  }
}

void Connection::give_back(std::size_t bytes) {
  if (bytes > 0 && server_->options.message_budget) {
    server_->options.message_budget->give_back(bytes);
  }
}

void Connection::release(Stream& s) {
  give_back(std::exchange(s.budgeted, 0));  // a message that will not arrive whole now
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

void Connection::end_call(Stream& s, GrpcStatus status) {
  s.dead = true;
  if (!s.call || s.call->ended_) {
    return;
  }
  s.call->finish(std::move(status));
  if (s.handler) {
    s.handler->on_cancel();
  }
}

std::vector<std::shared_ptr<Connection>> GrpcServer::Impl::live_connections() {
  std::vector<std::shared_ptr<Connection>> live;
  std::lock_guard lock(mu);
  for (auto& [key, weak] : connections) {
    if (auto c = weak.lock()) {
      live.push_back(std::move(c));
    }
  }
  return live;
}

void GrpcServer::Impl::accept_later(const std::string& why) {
  backoff = std::clamp(backoff * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  if (backoff == std::chrono::milliseconds(10) || backoff == std::chrono::milliseconds(1000)) {
    spdlog::warn("grpc: {} on port {}; accepting again in {} ms", why, bound_port, backoff.count());
  }
  retry_timer->expires_after(backoff);
  retry_timer->async_wait([this](error_code ec) {
    if (!ec && accepting.load()) {
      accept();
    }
  });
}

// On worker 0. The connections hold the Impl (their calls post through it).
void GrpcServer::Impl::accept() {
  auto& budget = http::DescriptorBudget::process();
  const bool budgeted = options.take_descriptors;
  if (options.max_connections > 0 && open_connections.load() >= options.max_connections) {
    accept_later("the port's " + std::to_string(options.max_connections) +
                 " connections are open");
    return;
  }
  if (budgeted && !budget.try_take(1)) {
    accept_later("connections hold the descriptors the process gives to clients");
    return;
  }
  const std::size_t worker = next_worker.fetch_add(1) % workers.size();
  acceptor->async_accept(workers.at(worker), [this, &budget, budgeted, worker](error_code ec,
                                                                             tcp::socket socket) {
    if (!accepting.load() || ec) {
      if (budgeted) {
        budget.give_back(1);
      }
      if (ec && accepting.load()) {
        accept_later("accept failed: " + ec.message());
      }
      return;
    }
    backoff = std::chrono::milliseconds(0);
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    open_connections.fetch_add(1);
    if (options.tls_context) {
      accept_tls(std::move(socket), options.tls_context(), options.handshake_timeout,
                 [self = shared_from_this(), worker](std::unique_ptr<ByteStream> stream,
                                                     std::string why) {
                   if (!stream) {
                     spdlog::debug("grpc: {} on port {}", why, self->bound_port);
                     if (self->options.take_descriptors) {
                       http::DescriptorBudget::process().give_back(1);
                     }
                     self->open_connections.fetch_sub(1);
                     return;
                   }
                   self->adopt(std::move(stream), worker);
                 });
    } else {
      adopt(plain_stream(std::move(socket)), worker);
    }
    accept();
  });
}

// On `worker`: the connection's stream is ready (TCP accepted, TLS handshake done).
void GrpcServer::Impl::adopt(std::unique_ptr<ByteStream> stream, std::size_t worker) {
  auto connection = std::make_shared<Connection>(shared_from_this(), std::move(stream), worker);
  {
    std::lock_guard lock(mu);
    connections.emplace(connection.get(), connection);
  }
  net::post(workers.at(worker), [connection] { connection->start(); });
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
  const std::string where = fmt::format("{}:{}", s.options.host, s.options.port);
  try {
    const auto address = net::ip::make_address(s.options.host);
    s.acceptor = std::make_unique<tcp::acceptor>(s.workers.at(0));
    s.retry_timer = std::make_unique<net::steady_timer>(s.workers.at(0));
    const tcp::endpoint endpoint(address, s.options.port);
    s.acceptor->open(endpoint.protocol());
    s.acceptor->set_option(tcp::acceptor::reuse_address(true));
    s.acceptor->bind(endpoint);
    s.acceptor->listen(net::socket_base::max_listen_connections);
    s.bound_port = s.acceptor->local_endpoint().port();
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot serve gRPC on " + where + ": " + e.what());
  }
  s.accepting.store(true);
  net::post(s.workers.at(0), [&s] { s.accept(); });
}

uint16_t GrpcServer::port() const { return impl_->bound_port; }

int GrpcServer::open_calls() const { return impl_->calls.load(); }

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
  if (s.acceptor) {
    s.accepting.store(false);
    std::promise<void> closed;
    net::post(s.workers.at(0), [&s, &closed] {
      error_code ignored;
      s.acceptor->close(ignored);
      s.retry_timer->cancel();
      // The aborted accept's and timer's handlers are queued now: this runs after them, so
      // none of them runs once the server may be gone.
      net::post(s.workers.at(0), [&closed] { closed.set_value(); });
    });
    closed.get_future().wait();
  }
  for (auto& c : s.live_connections()) {
    net::post(s.workers.at(c->worker()), [c] { c->go_away(); });
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  {
    std::unique_lock lock(s.mu);
    while (s.calls.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      s.cv.wait_for(lock, std::chrono::milliseconds(5));
    }
  }
  for (auto& c : s.live_connections()) {
    net::post(s.workers.at(c->worker()), [c] { c->close(); });
  }
  // The connections go once their pending reads and writes have returned (a few ms).
  std::unique_lock lock(s.mu);
  s.cv.wait_for(lock, std::chrono::seconds(10), [&s] { return s.connections.empty(); });
  s.shutdown_over = true;
  s.cv.notify_all();
}

}  // namespace llmd::epp::extproc
