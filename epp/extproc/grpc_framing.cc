#include "epp/extproc/grpc_framing.h"

#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace llmd::epp::extproc {
namespace {

constexpr int64_t kMaxTimeoutNanos = kMaxGrpcTimeout.count();

// Nanoseconds per TimeoutUnit, 0 for a byte that is not one.
int64_t unit_nanos(char unit) {
  switch (unit) {
    case 'H':
      return int64_t{3600} * 1000 * 1000 * 1000;
    case 'M':
      return int64_t{60} * 1000 * 1000 * 1000;
    case 'S':
      return int64_t{1000} * 1000 * 1000;
    case 'm':
      return int64_t{1000} * 1000;
    case 'u':
      return 1000;
    case 'n':
      return 1;
    default:
      return 0;
  }
}

}  // namespace

bool append_message(std::string& out, std::string_view message) {
  if (message.size() > kMaxFramedMessageBytes) {
    return false;
  }
  const auto n = static_cast<uint32_t>(message.size());
  const char prefix[kMessagePrefixBytes] = {0, static_cast<char>(n >> 24),
                                            static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                                            static_cast<char>(n)};
  out.append(prefix, kMessagePrefixBytes);
  out.append(message);
  return true;
}

void MessageDecoder::feed(std::string_view bytes) {
  if (stopped_) {
    return;
  }
  const std::size_t dropped = std::min(skip_, bytes.size());
  skip_ -= dropped;
  in_.append(bytes.substr(dropped));
}

std::size_t MessageDecoder::prefixed_length() const {
  const auto* p = reinterpret_cast<const unsigned char*>(in_.data() + pos_);
  return (std::size_t{p[1]} << 24) | (std::size_t{p[2]} << 16) | (std::size_t{p[3]} << 8) |
         std::size_t{p[4]};
}

MessageDecoder::Next MessageDecoder::next() {
  if (stopped_ || available() < kMessagePrefixBytes) {
    return {};
  }
  const auto flag = static_cast<unsigned char>(in_[pos_]);
  const std::size_t length = prefixed_length();
  std::string why;
  GrpcCode code = GrpcCode::kInternal;
  if (flag == 1) {
    why = "compressed flag set without a negotiated grpc-encoding";
  } else if (flag != 0) {
    why = fmt::format("unexpected message flag {}", flag);
  } else if (length > max_message_bytes_) {
    code = GrpcCode::kResourceExhausted;
    why = fmt::format("message of {} bytes is over the limit of {}", length, max_message_bytes_);
  } else {
    return {State::kPrefix, length, {}};
  }
  stop();
  return {State::kError, 0, {code, std::move(why)}};
}

std::optional<std::string> MessageDecoder::take() {
  const std::size_t whole = kMessagePrefixBytes + prefixed_length();
  if (available() < whole) {
    if (pos_ > 0) {
      in_.erase(0, pos_);
      pos_ = 0;
    }
    // Grown by what has arrived (doubling, never past the message), not by what the prefix
    // announces: a 16-MiB announcement with nothing after allocates nothing.
    in_.reserve(std::min(whole, 2 * in_.size()));
    return std::nullopt;
  }
  if (pos_ == 0 && in_.size() == whole) {
    // The buffer is exactly this message (a BUFFERED body of up to 16 MiB): moved, not copied.
    std::string message = std::exchange(in_, std::string());
    message.erase(0, kMessagePrefixBytes);
    return message;
  }
  std::string message = in_.substr(pos_ + kMessagePrefixBytes, whole - kMessagePrefixBytes);
  pos_ += whole;
  release_if_consumed();
  return message;
}

void MessageDecoder::skip() {
  const std::size_t whole = kMessagePrefixBytes + prefixed_length();
  const std::size_t here = std::min(available(), whole);
  skip_ = whole - here;
  pos_ += here;
  release_if_consumed();
}

void MessageDecoder::stop() {
  stopped_ = true;
  in_ = std::string();
  pos_ = 0;
}

void MessageDecoder::release_if_consumed() {
  if (pos_ == in_.size()) {
    in_ = std::string();  // a large message's capacity goes with it
    pos_ = 0;
  }
}

std::optional<std::chrono::nanoseconds> parse_grpc_timeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) {
    return std::nullopt;
  }
  const int64_t unit = unit_nanos(value.back());
  if (unit == 0) {
    return std::nullopt;
  }
  int64_t n = 0;  // at most 8 digits: no overflow here
  for (char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    n = n * 10 + (c - '0');
  }
  if (n > kMaxTimeoutNanos / unit) {
    return kMaxGrpcTimeout;
  }
  return std::chrono::nanoseconds(n * unit);
}

std::string percent_encode_grpc_message(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (unsigned char c : message) {
    if (c < 0x20 || c > 0x7e || c == '%') {
      out += fmt::format("%{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void RequestHead::add(std::string_view name, std::string_view value) {
  if (name == ":method") {
    method = value;
  } else if (name == ":path") {
    path = value;
  } else if (name == "content-type") {
    content_type = value;
  } else if (name == "grpc-encoding") {
    encoding = value;
  } else if (name == "grpc-timeout") {
    timeout = value;
  }
}

int http_refusal(const RequestHead& head) {
  if (head.method != "POST") {
    return 405;
  }
  if (head.content_type.rfind("application/grpc", 0) != 0) {
    return 415;
  }
  return 0;
}

std::optional<GrpcStatus> call_refusal(const RequestHead& head, bool method_known) {
  if (!method_known) {
    return GrpcStatus{GrpcCode::kUnimplemented, "unknown method " + head.path};
  }
  if (!head.encoding.empty() && head.encoding != "identity") {
    return GrpcStatus{GrpcCode::kUnimplemented,
                      "grpc-encoding " + head.encoding + " is not supported"};
  }
  return std::nullopt;
}

std::vector<http::Header> response_headers() {
  return {{":status", "200"},
          {"content-type", "application/grpc"},
          {"grpc-accept-encoding", "identity"}};
}

std::vector<http::Header> status_trailers(const GrpcStatus& status) {
  std::vector<http::Header> trailers{
      {"grpc-status", std::to_string(static_cast<int>(status.code))}};
  if (std::string message = percent_encode_grpc_message(status.message); !message.empty()) {
    trailers.push_back({"grpc-message", std::move(message)});
  }
  return trailers;
}

std::vector<http::Header> trailers_only(const GrpcStatus& status) {
  std::vector<http::Header> headers{{":status", "200"}, {"content-type", "application/grpc"}};
  for (auto& h : status_trailers(status)) {
    headers.push_back(std::move(h));
  }
  return headers;
}

}  // namespace llmd::epp::extproc
