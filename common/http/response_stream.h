#pragma once
// The answering side of one HTTP request, as seen by request handlers. Transport-free (the
// Beast implementation lives in common/http/stream_server.cc). Every method is thread-safe: calls
// are forwarded to the connection's strand and applied in call order. A request is answered exactly
// once: respond() (a whole response) or begin_stream() + write()* + end() (chunked transfer);
// calls after the answer finished, or after the connection died, are ignored. A handler that
// keeps a stream drops it before the server is destroyed (the connection belongs to one of the
// server's workers).
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/http/message.h"

namespace llmd::http {

class ResponseStream {
 public:
  virtual ~ResponseStream() = default;

  virtual void respond(Response response) = 0;
  // Sends the status line and headers of a chunked response now.
  virtual void begin_stream(int status, std::string content_type, std::vector<Header> headers) = 0;
  virtual void write(std::string data) = 0;  // one chunk (empty data is ignored)
  // Body bytes written but not yet taken by the client's socket (backpressure: a relay stops
  // reading its source while this is high).
  virtual std::size_t buffered() const = 0;
  // `callback` runs once, on the connection's strand, when buffered() is at most `at_most`, or
  // the connection is gone (at once if either holds already). One waiter at a time.
  virtual void when_drained(std::size_t at_most, std::function<void()> callback) = 0;
  virtual void end() = 0;
  // Drops the connection at once, without (further) bytes: the "close" fault.
  virtual void close_connection() = 0;
  // Ends a streamed answer that could not be completed: what was written still goes out, then
  // the connection closes without the terminating chunk, so the client sees an incomplete body
  // rather than a clean end.
  virtual void end_incomplete() = 0;
  // `callback` runs once, on the connection's strand, if the peer goes away before the answer
  // finished (immediately if it already has). Not called after close_connection().
  virtual void on_disconnect(std::function<void()> callback) = 0;
};
using ResponseStreamPtr = std::shared_ptr<ResponseStream>;

}  // namespace llmd::http
