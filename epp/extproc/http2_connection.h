#pragma once
// Http2Connection: one server-side HTTP/2 connection over nghttp2 (cleartext with prior
// knowledge, or TLS with h2 by ALPN under its ByteStream), on one worker. It reads, feeds
// nghttp2, writes what nghttp2 produces, and tells its Http2Streams what each stream's request
// carries; what the streams mean (gRPC calls, grpc_server.cc) is theirs. Internal to the gRPC
// server: only extproc's .cc files include it (nghttp2 stays in http2_connection.cc).
//
// nghttp2 reports from inside its receive and send calls; the Http2Streams record there and
// act in run_pending(), which the connection calls outside nghttp2 after each read and while
// sending (the last frame of a stream closes it), so handlers never run re-entrantly.
//
// Bounds: SETTINGS_MAX_CONCURRENT_STREAMS and SETTINGS_MAX_HEADER_LIST_SIZE from the options
// (a header block over the latter resets its stream); a 4-MiB stream and 16-MiB connection
// receive window, given back to the peer as the streams want more input (wants_input), not as
// bytes arrive, so a peer that does not read its responses can send at most a window more;
// reads of 4 KiB growing to 64 KiB while the peer fills them; writes gathered up to 256 KiB; a
// connection that has not sent its preface and SETTINGS within `handshake_timeout` (or, with
// `http1`, stalls before its first request is complete) is closed; then one with no open stream for
// `idle_timeout` gets a shutdown notice (GOAWAY without a stream limit) and, still idle a moment
// later, the last GOAWAY and is closed, a stream with no frame for `stream_idle_timeout` is reset,
// and one older than `max_connection_age` gets GOAWAY and is closed after the grace; a peer silent
// for `keepalive_interval` gets a PING and is closed when no byte comes back within
// `keepalive_timeout`; bytes that are not
// HTTP/2 close the connection.
//
// Threads: created anywhere, then used on its worker only (start() posted there).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "common/http/message.h"
#include "epp/extproc/byte_stream.h"
#include "epp/extproc/grpc_server.h"
#include "epp/extproc/http1_probe.h"

struct nghttp2_session;

namespace llmd::epp::extproc {

struct Http2Options {
  uint32_t max_concurrent_streams = 10000;
  // Until the client's preface and first SETTINGS (or, with `http1`, its whole request).
  std::chrono::milliseconds handshake_timeout{10000};
  // The timeouts and the header-list size (grpc_server.h; its connection_budget_share is the
  // streams' business, not the connection's).
  GrpcLimits limits;
  GrpcCounters* counters = nullptr;  // outlives the connection; null: not counted
  // Set: a connection that does not open with the HTTP/2 preface is one HTTP/1.1 request,
  // answered by it and closed (http1_probe.h).
  Http1Handler http1;
};

// The streams' side of a connection. The on_* calls come from inside nghttp2: they record what
// arrived and must not call the connection back; run_pending() acts on it.
class Http2Streams {
 public:
  virtual ~Http2Streams() = default;
  // A request's headers begin, arrive one by one, and are complete.
  virtual void on_request_begin(int32_t stream) = 0;
  virtual void on_request_header(int32_t stream, std::string_view name, std::string_view value) = 0;
  virtual void on_request_headers_end(int32_t stream) = 0;
  virtual void on_data(int32_t stream, std::string_view bytes) = 0;
  // The peer sent its last frame on the stream.
  virtual void on_end_stream(int32_t stream) = 0;
  virtual void on_stream_close(int32_t stream) = 0;
  // Outside nghttp2: whether anything was recorded, and acting on it (may respond()).
  virtual bool has_pending() const = 0;
  // Whether the bytes received on `stream` (0: on the connection) may go back to the peer's
  // flow-control window now; false while the responses queued for the peer are over their
  // buffer limit (Envoy's high watermark). When that changes back the streams call
  // Http2Connection::input_wanted().
  virtual bool wants_input(int32_t stream) const = 0;
  virtual void run_pending() = 0;
  // The connection closes: every stream is gone; what is submitted now is not sent.
  virtual void on_close() = 0;
};

// A response body, pulled as the peer's flow-control window allows; trailers end it.
class Http2Body {
 public:
  virtual ~Http2Body() = default;
  // Copies up to `max` bytes to `out` and answers how many; 0 when none is there now.
  virtual std::size_t read(uint8_t* out, std::size_t max) = 0;
  // No byte will follow what read() gave: the trailers go next.
  virtual bool complete() const = 0;
  virtual std::vector<http::Header> trailers() const = 0;
};

class Http2Connection : public std::enable_shared_from_this<Http2Connection> {
 public:
  Http2Connection(std::unique_ptr<ByteStream> stream, Http2Options options,
                  boost::asio::io_context& loop);
  ~Http2Connection();
  Http2Connection(const Http2Connection&) = delete;
  Http2Connection& operator=(const Http2Connection&) = delete;

  // Before start(); the connection owns them for its life.
  void set_streams(std::unique_ptr<Http2Streams> streams);
  void start();

  // The response to `stream`: `headers`, then the body until it is complete and its trailers;
  // no body: the headers end the stream. `body` must live until the stream closes.
  void respond(int32_t stream, const std::vector<http::Header>& headers, Http2Body* body);
  // The body of `stream` has more for read() (or is now complete).
  void resume(int32_t stream);
  // A stream (or the connection) wants input again (Http2Streams::wants_input): the windows
  // held back open with the next write. May be called from inside nghttp2 (a body's read).
  void input_wanted() { recheck_input_ = true; }
  // No new streams (GOAWAY); the connection closes once its streams have.
  void go_away();
  // Closes at once: every stream is gone (Http2Streams::on_close).
  void close();
  bool closed() const { return closed_; }

 private:
  void start_http2();
  void read();
  // Feeds received bytes to nghttp2 and acts on them; false when the connection closed.
  bool receive(const uint8_t* data, std::size_t n);
  // Writes what nghttp2 has; `may_run_streams`: and acts on the streams it closed.
  void flush(bool may_run_streams = true);
  // Gathers what nghttp2 has to send into the write buffer; false on a session error.
  bool gather_output();
  void flush_unless_running();
  // Gives the peer back the window for the bytes the streams want more of (wants_input).
  void give_window();
  void run_streams();
  // Bytes of a connection whose protocol is not known yet, or of an HTTP/1.1 request; false
  // when the connection is done with (answered or closed).
  bool sniff(const uint8_t* data, std::size_t n);
  void heard();
  // The limits' timers (GrpcLimits): armed once the handshake is done.
  void arm_idle();
  void arm_age();
  void arm_sweep();
  void arm_keepalive();
  void sweep_idle_streams();
  void touch(int32_t stream);
  template <typename F>
  void count(F field);

  // nghttp2's callbacks (http2_connection.cc) reach the members through `friend`.
  friend struct Http2Callbacks;

  std::unique_ptr<Http2Streams> streams_;  // first: destroyed last, after the stream
  const Http2Options options_;
  std::unique_ptr<ByteStream> stream_;
  nghttp2_session* session_ = nullptr;
  // 4 KiB, doubled (to 64 KiB) each time a read fills it: a connection that sends little (a
  // probe, a preface-only peer) costs 4 KiB here, not 64.
  std::vector<uint8_t> read_buffer_ = std::vector<uint8_t>(4 * 1024);
  std::string write_buffer_;
  bool writing_ = false;
  bool running_ = false;  // the streams are acting: flush once they are done
  bool closed_ = false;
  boost::asio::steady_timer handshake_;  // closes a connection that sends no preface+SETTINGS
  bool heard_ = false;                   // the peer's preface and SETTINGS have arrived
  boost::asio::steady_timer idle_;       // no open stream since
  boost::asio::steady_timer age_;        // max connection age, then its grace
  boost::asio::steady_timer sweep_;      // looks for idle streams
  bool aged_ = false;                    // GOAWAY for age sent: the grace runs
  boost::asio::steady_timer keepalive_;  // a PING after a silence, then its deadline
  std::chrono::steady_clock::time_point last_heard_from_{};  // the peer's last bytes
  bool ping_outstanding_ = false;
  bool draining_ = false;  // idle: the shutdown notice is sent, the last GOAWAY next
  // Open request streams and when a frame last went either way on each.
  std::unordered_map<int32_t, std::chrono::steady_clock::time_point> active_;
  // Received bytes not yet given back to the peer's window: per stream, and on the connection.
  std::unordered_map<int32_t, std::size_t> unconsumed_;
  std::size_t unconsumed_connection_ = 0;
  bool recheck_input_ = false;    // input_wanted() since the last give_window()
  std::size_t header_bytes_ = 0;  // of the header block being received
  Protocol protocol_;             // kUndecided until the first bytes tell (http1 only)
  std::string sniffed_;           // those first bytes, or the HTTP/1.1 request head
};

}  // namespace llmd::epp::extproc
