#include "epp/extproc/http1_probe.h"

#include <algorithm>

#include <fmt/format.h>

namespace llmd::epp::extproc {

namespace {

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

std::string response(const Http1Answer& a, bool head_only) {
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
      a.status, reason(a.status), a.content_type, a.body.size());
  if (!head_only) {
    out += a.body;
  }
  return out;
}

Http1Answer detail(int status, const std::string& message) {
  return {status, "application/json", fmt::format("{{\"detail\":\"{}\"}}", message)};
}

}  // namespace

Protocol sniff_protocol(std::string_view first_bytes) {
  const std::size_t n = std::min(first_bytes.size(), kHttp2Preface.size());
  if (first_bytes.substr(0, n) != kHttp2Preface.substr(0, n)) {
    return Protocol::kHttp1;
  }
  return n == kHttp2Preface.size() ? Protocol::kHttp2 : Protocol::kUndecided;
}

std::optional<std::string> answer_http1(std::string_view received, const Http1Handler& handler,
                                        std::size_t max_head) {
  const std::size_t end = received.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (received.size() > max_head) {
      return response(detail(431, "request head too large"), false);
    }
    return std::nullopt;
  }
  const std::string_view line = received.substr(0, received.find("\r\n"));
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos ||
      line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) {
    return response(detail(400, "not an HTTP/1.1 request"), false);
  }
  const std::string method(line.substr(0, sp1));
  std::string path(line.substr(sp1 + 1, sp2 - sp1 - 1));
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    return response(detail(405, "only GET and HEAD are served here"), false);
  }
  return response(handler(method, path), method == "HEAD");
}

}  // namespace llmd::epp::extproc
