#pragma once
// ClientCore: the project's one HTTP/1.1 client implementation. Every outgoing exchange of
// every binary goes through it: the blocking HttpClient (model sync, training feedback, the
// Kubernetes API client, tests, tools) and the asynchronous AsyncHttpClient (metric scrapes,
// predictor calls) drive it, differing only in who runs the event loop; the EPP's proxy runs
// its exchanges to the pods on its workers (io_workers.h), a core per worker.
//
// - Connections: a keep-alive pool per origin (scheme, host, port; common/http/idle_pool.h); a
//   connection carries one exchange at a time and goes back to the pool once its response was
//   read to the end on a connection the server keeps open. A kept-alive connection the server had
//   closed before a byte of the answer arrived is replaced and the request sent once more.
// - TLS (https origins) with a verified certificate (TlsContext, client.h).
// - Bodies read whole (fetch) or streamed (open): a streamed body is read only when the caller
//   asks for the next piece, so a slow consumer holds the server back through TCP.
// - Timeouts (ClientTimeouts: total, connect, response, first byte, idle) run on one timer per
//   exchange that is re-armed only when a deadline moves earlier; a timeout closes the socket
//   and the failure says so (timed_out).
// - Errors are values: every callback gets a status or an error, and no exception leaves.
//
// Internal to .cc files that run an io_context of their own (it includes Asio's executor), such
// as the EPP's proxy; everything else uses client.h or async_client.h.
//
// Threads: each exchange runs on the executor it is started with (default: the core's own);
// its callbacks run there, never inline in fetch()/open(). The pool and the counters are
// thread-safe (one mutex, never held across I/O), so exchanges on many strands can share one
// core. A ClientCall's methods must be called on its exchange's executor.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include "common/http/client.h"

namespace llmd::http {

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";     // path and query
  std::vector<Header> headers;  // sent as given; Host is added unless given
  std::string content_type;     // "" = no Content-Type header
  std::string body;
  // Instead of `body`: bytes the caller keeps alive until the exchange ends (large prompts are
  // not copied).
  std::string_view borrowed_body;
  bool keep_alive = true;     // false: "Connection: close", the connection is not pooled
  bool want_headers = false;  // fetch(): copy the response headers into the ClientResponse
};

// A piece of a streamed body: `bytes` stay valid until the next read() or the call's end.
struct BodyPiece {
  std::string_view bytes;
  bool end = false;   // the body is complete (bytes may hold its last piece)
  std::string error;  // the body broke off ("" otherwise)
  bool timed_out = false;
};

// A streamed exchange after its header (see ClientCore::open).
class ClientCall {
 public:
  using ReadDone = std::function<void(BodyPiece)>;
  virtual ~ClientCall() = default;
  // Reads the next piece of the body (at least one byte, or the end, or an error); one read at
  // a time. Nothing is read from the server between reads. `done` runs on the call's executor.
  virtual void read(ReadDone done) = 0;
  // Ends the exchange now: a pending operation fails with "cancelled" (a read through its
  // callback; before the header, the open()'s callback). The connection is closed.
  virtual void cancel() = 0;
  // Whether the exchange ran on a kept-alive connection.
  virtual bool reused() const = 0;
  // Whether its last attempt got a connection (a failure before it is the server's address or
  // listener; after it, the server's answer).
  virtual bool connected() const = 0;
};
using ClientCallPtr = std::shared_ptr<ClientCall>;

class ClientCore {
 public:
  struct Options {
    std::size_t max_idle_per_origin = 64;
    std::size_t max_idle = std::numeric_limits<std::size_t>::max();  // over all origins
    // A pooled connection idle this long is closed instead of reused (0 = kept until reused):
    // below a server's keep-alive timeout, so that it rarely closes one as it is reused.
    std::chrono::milliseconds idle_timeout{0};
    // Before reusing a pooled connection, check that the server has not closed it (one
    // non-blocking recv): saves the failed write and resend, costs a syscall per reuse.
    bool probe_idle = false;
    std::uint64_t response_body_limit = 256ull * 1024 * 1024;  // fetch() only
    std::uint32_t header_limit = 64 * 1024;
    TlsContextPtr tls;  // for https origins; null fails them
    // Called (on the exchange's executor) when a connection is opened / a pooled one reused.
    std::function<void()> on_opened;
    std::function<void()> on_reused;
  };
  using Done = std::function<void(ClientResponse)>;
  // The header (status, headers; body empty) and the call to read the body from, or the
  // failure (status 0, `error`) and a null call.
  using HeadDone = std::function<void(ClientResponse head, ClientCallPtr body)>;

  ClientCore(boost::asio::any_io_executor io, Options options);
  ~ClientCore();  // drops the idle connections; exchanges in flight keep what they use
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // One exchange, the response read whole (at most response_body_limit). `done` runs once.
  // The returned call can cancel() it (its read() is not for fetches).
  ClientCallPtr fetch(const Url& origin, ClientRequest request, const ClientTimeouts& timeouts,
                      Done done);
  ClientCallPtr fetch(const Url& origin, ClientRequest request, const ClientTimeouts& timeouts,
                      boost::asio::any_io_executor on, Done done);
  // One exchange whose body the caller reads piece by piece from the ClientCall given to
  // `head_done` (no size bound). Dropping the call before the body's end closes the
  // connection.
  ClientCallPtr open(const Url& origin, ClientRequest request, const ClientTimeouts& timeouts,
                     HeadDone head_done);
  ClientCallPtr open(const Url& origin, ClientRequest request, const ClientTimeouts& timeouts,
                     boost::asio::any_io_executor on, HeadDone head_done);

  // Stops the core: later exchanges fail with "client stopped", the exchanges in flight are
  // cancelled (their callbacks then run on their executors), idle connections are closed.
  // Thread-safe.
  void shutdown();
  // Closes the idle connections. Thread-safe.
  void close_idle();

  std::size_t idle() const;                                   // pooled connections, all origins
  std::uint64_t connections_opened(const Url& origin) const;  // so far, to that origin

  struct State;  // shared with the exchanges (client_core.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace llmd::http
