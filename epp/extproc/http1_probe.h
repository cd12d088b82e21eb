#pragma once
// The HTTP/1.1 side of a port that speaks gRPC too: the EPP's health port answers the
// kubelet's gRPC probes (what upstream's charts configure) and HTTP GET /healthz, /readyz
// (what ours configure) on one port. A connection that does not open with the HTTP/2 preface
// is one request: its head is read (bounded), answered in full with `Connection: close`, and
// the connection closed. Pure: bytes in, bytes out; the server does the I/O.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace llmd::epp::extproc {

struct Http1Answer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};
using Http1Handler = std::function<Http1Answer(const std::string& method, const std::string& path)>;

// The 24 bytes an HTTP/2 client with prior knowledge sends first.
inline constexpr std::string_view kHttp2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

enum class Protocol { kUndecided, kHttp2, kHttp1 };
// What the first bytes of a connection say it speaks (kUndecided: a prefix of the preface).
Protocol sniff_protocol(std::string_view first_bytes);

// nullopt while the request head is incomplete; then the whole response to write. A head over
// `max_head` bytes is answered 431, one that is not a request line 400; a method other than
// GET or HEAD 405; the path's query string is dropped before `handler` sees it.
std::optional<std::string> answer_http1(std::string_view received, const Http1Handler& handler,
                                        std::size_t max_head = 8192);

}  // namespace llmd::epp::extproc
