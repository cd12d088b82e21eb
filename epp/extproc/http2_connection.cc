#include "epp/extproc/http2_connection.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

namespace llmd::epp::extproc {
namespace {

namespace net = boost::asio;
using error_code = boost::system::error_code;

constexpr std::size_t kWriteBatch = 256 * 1024;  // bytes gathered per socket write at most
constexpr std::size_t kMaxReadBuffer = 64 * 1024;
constexpr int32_t kStreamWindow = 4 * 1024 * 1024;  // a 16-MiB body in a few round trips
constexpr int32_t kConnectionWindow = 16 * 1024 * 1024;
// Between an idle connection's shutdown notice and its last GOAWAY: a round trip on any network
// and the client's reaction (it moves new requests to a new connection).
constexpr std::chrono::milliseconds kDrainNotice{1000};

std::vector<nghttp2_nv> to_nv(const std::vector<http::Header>& headers) {
  // nghttp2 copies names and values on submit (no NO_COPY flags).
  std::vector<nghttp2_nv> nv;
  nv.reserve(headers.size());
  for (const auto& h : headers) {
    nv.push_back({reinterpret_cast<uint8_t*>(const_cast<char*>(h.name.data())),
                  reinterpret_cast<uint8_t*>(const_cast<char*>(h.value.data())), h.name.size(),
                  h.value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  return nv;
}

bool is_request_headers(const nghttp2_frame* f) {
  return f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST;
}

}  // namespace

// nghttp2's C callbacks, translated into Http2Streams calls.
struct Http2Callbacks {
  static Http2Streams& streams(void* self) {
    return *static_cast<Http2Connection*>(self)->streams_;
  }
  static Http2Connection& connection(void* self) { return *static_cast<Http2Connection*>(self); }

  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* f, void* self) {
    Http2Connection& c = connection(self);
    c.header_bytes_ = 0;
    if (is_request_headers(f)) {
      c.active_[f->hd.stream_id] = std::chrono::steady_clock::now();
      c.idle_.cancel();
      streams(self).on_request_begin(f->hd.stream_id);
    }
    return 0;
  }
  static int on_header(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name,
                       std::size_t namelen, const uint8_t* value, std::size_t valuelen, uint8_t,
                       void* self) {
    // RFC 9113 6.5.2's size: what the HPACK decoder expanded, however small its encoding.
    Http2Connection& c = connection(self);
    c.header_bytes_ += namelen + valuelen + 32;
    if (c.header_bytes_ > c.options_.limits.max_header_list_bytes) {
      c.count(&GrpcCounters::header_list_resets);
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // the stream is reset, the rest ignored
    }
    if (is_request_headers(f)) {  // trailers from a client carry nothing a stream uses
      streams(self).on_request_header(
          f->hd.stream_id, std::string_view(reinterpret_cast<const char*>(name), namelen),
          std::string_view(reinterpret_cast<const char*>(value), valuelen));
    }
    return 0;
  }
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* f, void* self) {
    if (f->hd.type == NGHTTP2_SETTINGS && (f->hd.flags & NGHTTP2_FLAG_ACK) == 0) {
      connection(self).heard();  // the preface and its SETTINGS: the handshake is done
    }
    connection(self).touch(f->hd.stream_id);
    if (is_request_headers(f)) {
      streams(self).on_request_headers_end(f->hd.stream_id);
    }
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      streams(self).on_end_stream(f->hd.stream_id);
    }
    return 0;
  }
  static int on_data_chunk(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data,
                           std::size_t len, void* self) {
    // No touch() here: on_frame_recv touches the stream once per DATA frame, after its chunks.
    Http2Connection& c = connection(self);
    c.unconsumed_[id] += len;
    c.unconsumed_connection_ += len;
    streams(self).on_data(id, std::string_view(reinterpret_cast<const char*>(data), len));
    return 0;
  }
  static int on_frame_send(nghttp2_session* session, const nghttp2_frame* f, void* self) {
    connection(self).touch(f->hd.stream_id);
    // A response complete while the client is still sending (a call the server ended early:
    // over budget, a bad message, a deadline): RST_STREAM(NO_ERROR) asks it to stop (RFC 9113
    // 8.1), so neither side keeps the half-open stream. Sent after the END_STREAM frame, so
    // the response arrives whole.
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0 &&
        nghttp2_session_get_stream_remote_close(session, f->hd.stream_id) == 0) {
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
    }
    return 0;
  }
  static int on_stream_close(nghttp2_session*, int32_t id, uint32_t, void* self) {
    Http2Connection& c = connection(self);
    if (c.active_.erase(id) > 0 && c.active_.empty()) {
      c.arm_idle();
    }
    c.unconsumed_.erase(id);  // its window is gone; the connection's is given back as usual
    streams(self).on_stream_close(id);
    return 0;
  }
  // A body's bytes, then (once it is complete) its trailers.
  static ssize_t read_body(nghttp2_session* session, int32_t id, uint8_t* buf, std::size_t length,
                           uint32_t* flags, nghttp2_data_source* source, void*) {
    auto& body = *static_cast<Http2Body*>(source->ptr);
    if (const std::size_t n = body.read(buf, length); n > 0) {
      return static_cast<ssize_t>(n);
    }
    if (!body.complete()) {
      return NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    const auto trailers = body.trailers();
    const auto nv = to_nv(trailers);
    nghttp2_submit_trailer(session, id, nv.data(), nv.size());
    return 0;
  }

  static nghttp2_session_callbacks* get() {
    static nghttp2_session_callbacks* const cbs = [] {
      nghttp2_session_callbacks* c = nullptr;
      nghttp2_session_callbacks_new(&c);
      nghttp2_session_callbacks_set_on_begin_headers_callback(c, &on_begin_headers);
      nghttp2_session_callbacks_set_on_header_callback(c, &on_header);
      nghttp2_session_callbacks_set_on_frame_recv_callback(c, &on_frame_recv);
      nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, &on_data_chunk);
      nghttp2_session_callbacks_set_on_stream_close_callback(c, &on_stream_close);
      nghttp2_session_callbacks_set_on_frame_send_callback(c, &on_frame_send);
      return c;
    }();
    return cbs;
  }
};

Http2Connection::Http2Connection(std::unique_ptr<ByteStream> stream, Http2Options options,
                                 net::io_context& loop)
    : options_(std::move(options)),
      stream_(std::move(stream)),
      handshake_(loop),
      idle_(loop),
      age_(loop),
      sweep_(loop),
      keepalive_(loop),
      protocol_(options_.http1 ? Protocol::kUndecided : Protocol::kHttp2) {}

Http2Connection::~Http2Connection() {
  if (session_ != nullptr) {
    nghttp2_session_del(session_);
  }
}

void Http2Connection::set_streams(std::unique_ptr<Http2Streams> streams) {
  streams_ = std::move(streams);
}

void Http2Connection::start() {
  handshake_.expires_after(options_.handshake_timeout);
  handshake_.async_wait([weak = weak_from_this()](error_code ec) {
    if (auto self = weak.lock(); self && !ec && !self->heard_ && !self->closed_) {
      self->count(&GrpcCounters::handshake_timeouts);
      self->close();
    }
  });
  if (protocol_ == Protocol::kHttp2) {
    start_http2();
    flush();
  }
  read();
}

void Http2Connection::start_http2() {
  // The windows open as the streams take what arrived (give_window), not as it arrives.
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  nghttp2_option_set_no_auto_window_update(option, 1);
  nghttp2_session_server_new2(&session_, Http2Callbacks::get(), this, option);
  nghttp2_option_del(option);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, options_.limits.max_header_list_bytes},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

void Http2Connection::heard() {
  if (!heard_) {
    heard_ = true;
    handshake_.cancel();
    if (active_.empty()) {
      arm_idle();
    }
    arm_age();
    arm_sweep();
    arm_keepalive();
  }
}

void Http2Connection::arm_keepalive() {
  if (options_.limits.keepalive_interval.count() <= 0 || closed_) {
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  keepalive_.expires_at(ping_outstanding_ ? now + options_.limits.keepalive_timeout
                                          : last_heard_from_ + options_.limits.keepalive_interval);
  keepalive_.async_wait([weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->closed_) {
      return;
    }
    const auto silent = std::chrono::steady_clock::now() - self->last_heard_from_;
    if (self->ping_outstanding_) {
      self->count(&GrpcCounters::keepalive_timeouts);
      self->close();
      return;
    }
    if (silent >= self->options_.limits.keepalive_interval) {
      self->ping_outstanding_ = true;
      nghttp2_submit_ping(self->session_, NGHTTP2_FLAG_NONE, nullptr);
      self->flush();
    }
    self->arm_keepalive();
  });
}

template <typename F>
void Http2Connection::count(F field) {
  if (options_.counters != nullptr) {
    (options_.counters->*field).fetch_add(1);
  }
}

void Http2Connection::touch(int32_t stream) {
  if (options_.limits.stream_idle_timeout.count() > 0 && stream != 0) {
    if (auto it = active_.find(stream); it != active_.end()) {
      it->second = std::chrono::steady_clock::now();
    }
  }
}

void Http2Connection::arm_idle() {
  if (options_.limits.idle_timeout.count() <= 0 || !heard_ || closed_) {
    return;
  }
  // RFC 9113 6.8's graceful close: a GOAWAY naming no stream limit first, so a request the
  // client sends meanwhile is still served, then after a round trip's grace the last GOAWAY.
  // Closing at once would fail a request already on its way.
  idle_.expires_after(draining_ ? std::min(options_.limits.idle_timeout, kDrainNotice)
                                : options_.limits.idle_timeout);
  idle_.async_wait([weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->closed_ || !self->active_.empty()) {
      return;
    }
    if (!self->draining_) {
      self->draining_ = true;
      self->count(&GrpcCounters::idle_closes);
      nghttp2_submit_shutdown_notice(self->session_);
      self->flush();
      self->arm_idle();
      return;
    }
    // Still no stream open: the last GOAWAY, then the connection closes once it is written.
    nghttp2_session_terminate_session2(
        self->session_, nghttp2_session_get_last_proc_stream_id(self->session_), NGHTTP2_NO_ERROR);
    self->flush();
  });
}

void Http2Connection::arm_age() {
  if (options_.limits.max_connection_age.count() <= 0) {
    return;
  }
  age_.expires_after(options_.limits.max_connection_age);
  age_.async_wait([weak = weak_from_this()](error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->closed_) {
      return;
    }
    if (self->aged_) {
      self->close();  // the grace is over
      return;
    }
    self->aged_ = true;
    self->count(&GrpcCounters::age_closes);
    self->go_away();  // its streams finish; it closes once they have, or after the grace
    if (!self->closed_) {
      self->age_.expires_after(self->options_.limits.max_connection_age_grace);
      self->age_.async_wait([weak = self->weak_from_this()](error_code ec) {
        if (auto again = weak.lock(); again && !ec) {
          again->close();
        }
      });
    }
  });
}

void Http2Connection::arm_sweep() {
  if (options_.limits.stream_idle_timeout.count() <= 0 || closed_) {
    return;
  }
  // Every half timeout: a stream is reset between one and one and a half timeouts idle.
  sweep_.expires_after(
      std::max(options_.limits.stream_idle_timeout / 2, std::chrono::milliseconds(1)));
  sweep_.async_wait([weak = weak_from_this()](error_code ec) {
    if (auto self = weak.lock(); self && !ec && !self->closed_) {
      self->sweep_idle_streams();
      self->arm_sweep();
    }
  });
}

void Http2Connection::sweep_idle_streams() {
  const auto stale = std::chrono::steady_clock::now() - options_.limits.stream_idle_timeout;
  bool reset = false;
  for (const auto& [id, last] : active_) {
    if (last <= stale) {
      count(&GrpcCounters::stream_idle_resets);
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
      reset = true;
    }
  }
  if (reset) {
    flush();  // the resets close the streams (on_stream_close) as they are sent
  }
}

bool Http2Connection::sniff(const uint8_t* data, std::size_t n) {
  sniffed_.append(reinterpret_cast<const char*>(data), n);
  if (protocol_ == Protocol::kUndecided) {
    protocol_ = sniff_protocol(sniffed_);
    if (protocol_ == Protocol::kUndecided) {
      return true;  // a prefix of the preface: more bytes tell
    }
    if (protocol_ == Protocol::kHttp2) {
      start_http2();
      const std::string first = std::exchange(sniffed_, std::string());
      return receive(reinterpret_cast<const uint8_t*>(first.data()), first.size());
    }
  }
  auto answer = answer_http1(sniffed_, options_.http1);
  if (!answer) {
    return true;
  }
  auto out = std::make_shared<std::string>(std::move(*answer));
  stream_->write(net::buffer(*out),
                 [self = shared_from_this(), out](error_code, std::size_t) { self->close(); });
  return false;
}

bool Http2Connection::receive(const uint8_t* data, std::size_t n) {
  last_heard_from_ = std::chrono::steady_clock::now();
  ping_outstanding_ = false;  // any byte shows the peer is there, not only the PING's ACK
  const ssize_t rv = nghttp2_session_mem_recv(session_, data, n);
  run_streams();
  if (rv < 0) {
    spdlog::debug("grpc: closing a connection: {}", nghttp2_strerror(static_cast<int>(rv)));
    close();
    return false;
  }
  give_window();
  flush();
  return !closed_;
}

void Http2Connection::read() {
  stream_->read_some(net::buffer(read_buffer_),
                     [self = shared_from_this()](error_code ec, std::size_t n) {
                       if (self->closed_) {
                         return;
                       }
                       if (ec) {
                         self->close();
                         return;
                       }
                       bool more = false;
                       if (self->protocol_ != Protocol::kHttp2) {
                         // Until the preface is complete (or for the whole HTTP/1.1 request) the
                         // handshake timeout still runs: a peer that stalls there is closed by it.
                         more = self->sniff(self->read_buffer_.data(), n);
                       } else {
                         more = self->receive(self->read_buffer_.data(), n);
                       }
                       if (n == self->read_buffer_.size() && n < kMaxReadBuffer) {
                         self->read_buffer_.resize(n * 2);  // the peer sends more than fits
                       }
                       if (more && !self->closed_) {
                         self->read();
                       }
                     });
}

void Http2Connection::run_streams() {
  running_ = true;
  streams_->run_pending();
  running_ = false;
}

bool Http2Connection::gather_output() {
  while (write_buffer_.size() < kWriteBatch) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      return false;
    }
    if (n == 0) {
      break;
    }
    write_buffer_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  return true;
}

void Http2Connection::flush(bool may_run_streams) {
  if (closed_ || writing_ || session_ == nullptr) {
    return;
  }
  while (true) {
    if (!gather_output()) {
      close();
      return;
    }
    if (recheck_input_) {  // the output just taken brought a stream under its buffer limit
      give_window();
      continue;  // its WINDOW_UPDATE goes with this write
    }
    // Sending the last frame of a stream closes it (on_stream_close): its handler goes now
    // (or, after a submit, when the write returns), not at the connection's next read.
    if (!may_run_streams || running_ || !streams_->has_pending()) {
      break;
    }
    run_streams();
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

void Http2Connection::give_window() {
  recheck_input_ = false;
  if (closed_ || session_ == nullptr) {
    return;
  }
  // The connection's window and each stream's are given back separately: a stream whose
  // response is not read holds its own window shut, not its neighbours' (no head-of-line
  // blocking); the connection's shuts when all its responses together are over their limit.
  if (unconsumed_connection_ > 0 && streams_->wants_input(0)) {
    nghttp2_session_consume_connection(session_, std::exchange(unconsumed_connection_, 0));
  }
  for (auto it = unconsumed_.begin(); it != unconsumed_.end();) {
    if (streams_->wants_input(it->first)) {
      nghttp2_session_consume_stream(session_, it->first, it->second);
      it = unconsumed_.erase(it);
    } else {
      ++it;
    }
  }
}

void Http2Connection::flush_unless_running() {
  if (!running_) {
    // A submit from outside run_pending() (a handler's continuation, a deadline): the handler
    // may be on the stack, so the streams it closes are acted on after the write, not here.
    flush(false);
  }
}

void Http2Connection::respond(int32_t stream, const std::vector<http::Header>& headers,
                              Http2Body* body) {
  if (closed_ || session_ == nullptr) {
    return;
  }
  const auto nv = to_nv(headers);
  if (body == nullptr) {
    nghttp2_submit_response(session_, stream, nv.data(), nv.size(), nullptr);
  } else {
    nghttp2_data_provider provider{};
    provider.source.ptr = body;
    provider.read_callback = &Http2Callbacks::read_body;
    nghttp2_submit_response(session_, stream, nv.data(), nv.size(), &provider);
  }
  flush_unless_running();
}

void Http2Connection::resume(int32_t stream) {
  if (closed_ || session_ == nullptr) {
    return;
  }
  nghttp2_session_resume_data(session_, stream);  // an error when not deferred: harmless
  flush_unless_running();
}

void Http2Connection::go_away() {
  if (closed_ || session_ == nullptr) {
    return;
  }
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  flush();
}

void Http2Connection::close() {
  if (closed_) {
    return;
  }
  closed_ = true;
  running_ = true;  // the streams' reactions below write nothing
  streams_->on_close();
  handshake_.cancel();
  idle_.cancel();
  age_.cancel();
  sweep_.cancel();
  keepalive_.cancel();
  stream_->close();
}

}  // namespace llmd::epp::extproc
