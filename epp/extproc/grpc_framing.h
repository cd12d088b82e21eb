#pragma once
// gRPC over HTTP/2 as bytes and header fields (PROTOCOL-HTTP2.md), without sockets, nghttp2 or
// Asio: the length-prefixed messages both ways, the request head a call starts from, the
// grpc-timeout value and the status a call ends with (trailers, or trailers-only).
//
// Bounds: a message's bytes are buffered only after its 5-byte prefix has been checked (flag,
// length against the configured maximum), and grow with the bytes that arrive, so a prefix
// announcing 4 GiB costs nothing; a
// grpc-timeout is at most 8 digits and its value is clamped to kMaxGrpcTimeout.
// Threads: plain values and functions; a MessageDecoder is used by one thread at a time (its
// stream's worker).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/http/message.h"
#include "epp/extproc/grpc_status.h"

namespace llmd::epp::extproc {

// Compressed-Flag (1 byte) + Message-Length (4 bytes, big-endian).
inline constexpr std::size_t kMessagePrefixBytes = 5;
// The largest length a prefix can carry.
inline constexpr std::size_t kMaxFramedMessageBytes = 0xFFFFFFFFu;

// Appends `message` with its prefix (not compressed). False, and nothing appended, when it is
// longer than a prefix can say (kMaxFramedMessageBytes).
bool append_message(std::string& out, std::string_view message);

// One stream's incoming DATA bytes as messages, fed as they arrive.
class MessageDecoder {
 public:
  enum class State {
    kNeedMore,  // fewer than 5 bytes of the next prefix are here
    kPrefix,    // the next message's prefix is here and acceptable: take() or skip() it
    kError,     // the call ends with `error`; what is fed from now on is dropped
  };
  struct Next {
    State state = State::kNeedMore;
    std::size_t length = 0;  // kPrefix: the message's length (its bytes may still be arriving)
    GrpcStatus error;        // kError
  };

  explicit MessageDecoder(std::size_t max_message_bytes) : max_message_bytes_(max_message_bytes) {}

  // Appends received bytes; the bytes of a skipped message are dropped here.
  void feed(std::string_view bytes);
  // What the bytes fed so far hold next. Repeated calls answer the same until take() or skip().
  // A compressed flag (this server negotiates no compression) and any flag other than 0 or 1
  // give INTERNAL, as gRPC's own servers answer; a length over the maximum RESOURCE_EXHAUSTED.
  Next next();
  // After kPrefix: the whole message, or nullopt while its bytes are arriving (the buffer
  // then grows with them, doubling, to hold exactly it at most).
  std::optional<std::string> take();
  // After kPrefix: drops that message, what is here of it and the rest as it arrives.
  void skip();
  // Frees the buffer and drops everything fed from now on (the call ended).
  void stop();
  // Bytes of a message (or of its prefix) have arrived without the rest: at the end of the
  // stream that is a truncated message, which gRPC ends with INTERNAL.
  bool holds_partial() const { return !stopped_ && (available() > 0 || skip_ > 0); }
  // Bytes fed and not yet taken or skipped (the next message's prefix and what is here of it,
  // and any bytes after it).
  std::size_t buffered() const { return available(); }
  // The buffer's allocation now.
  std::size_t capacity() const { return in_.capacity(); }

 private:
  std::size_t available() const { return in_.size() - pos_; }
  std::size_t prefixed_length() const;  // of the prefix at pos_ (5 bytes are there)
  void release_if_consumed();

  const std::size_t max_message_bytes_;
  std::string in_;        // received bytes not yet taken
  std::size_t pos_ = 0;   // in_[0, pos_) has been taken
  std::size_t skip_ = 0;  // bytes of a skipped message still to come
  bool stopped_ = false;
};

// grpc-timeout longer than this means no practical deadline; the clamp keeps
// `now + timeout` representable on a steady clock.
inline constexpr std::chrono::nanoseconds kMaxGrpcTimeout = std::chrono::hours(24 * 365 * 100);

// TimeoutValue (1 to 8 ASCII digits) followed by TimeoutUnit (H, M, S, m, u, n); nullopt when
// `value` is not that. Values past kMaxGrpcTimeout are clamped to it, never overflowed.
std::optional<std::chrono::nanoseconds> parse_grpc_timeout(std::string_view value);

// grpc-message's Percent-Encoded form: bytes outside 0x20-0x7E, and '%', as %XX.
std::string percent_encode_grpc_message(std::string_view message);

// The request header fields a call needs; the others are ignored.
struct RequestHead {
  std::string method;        // :method
  std::string path;          // :path, "/package.Service/Method"
  std::string content_type;  // content-type
  std::string encoding;      // grpc-encoding
  std::string timeout;       // grpc-timeout, unparsed
  void add(std::string_view name, std::string_view value);
};

// A request that is not gRPC gets HTTP's answer: 405 for a method other than POST, 415 for a
// content type other than application/grpc[+...] (PROTOCOL-HTTP2.md); 0 for a gRPC request.
int http_refusal(const RequestHead& head);
// A gRPC request this server does not serve ends with UNIMPLEMENTED: an unknown method, or a
// grpc-encoding other than identity; nullopt when it is served.
std::optional<GrpcStatus> call_refusal(const RequestHead& head, bool method_known);

// The response head of a call that sends messages (it accepts only identity encoding).
std::vector<http::Header> response_headers();
// The trailers that end a call: grpc-status, and grpc-message (percent-encoded) when there is
// one.
std::vector<http::Header> status_trailers(const GrpcStatus& status);
// Trailers-only: the whole response of a call that ends before any message.
std::vector<http::Header> trailers_only(const GrpcStatus& status);

}  // namespace llmd::epp::extproc
