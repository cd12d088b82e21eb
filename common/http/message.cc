#include "common/http/message.h"

#include <nlohmann/json.hpp>

namespace llmd::http {

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    char ca = a[i];
    char cb = b[i];
    if (ca >= 'A' && ca <= 'Z') {
      ca = static_cast<char>(ca - 'A' + 'a');
    }
    if (cb >= 'A' && cb <= 'Z') {
      cb = static_cast<char>(cb - 'A' + 'a');
    }
    if (ca != cb) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
      return std::nullopt;
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string_view Request::header(std::string_view name) const {
  // Names are stored lower-case, but callers may build Requests by hand in tests.
  for (const auto& h : headers) {
    if (iequals(h.name, name)) {
      return h.value;
    }
  }
  return {};
}

std::string_view Request::param(std::string_view name) const {
  for (const auto& [key, value] : path_params) {
    if (key == name) {
      return value;
    }
  }
  return {};
}

Response Response::json(int status, const nlohmann::json& body) {
  Response r;
  r.status = status;
  r.content_type = "application/json";
  // Replace invalid UTF-8 instead of throwing: this runs on the request path.
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

Response Response::text(int status, std::string body, std::string content_type) {
  Response r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  return r;
}

Response Response::detail(int status, std::string_view message) {
  return json(status, nlohmann::json{{"detail", std::string(message)}});
}

std::optional<Response> require_bearer(const std::string& token, const Request& req) {
  if (token.empty()) {
    return std::nullopt;
  }
  const std::string_view got = req.header("authorization");
  // Constant-time comparison: the time to refuse does not tell how much of the token matched.
  // The scheme is case-insensitive ("bearer x" is the same credential); the token is not.
  constexpr std::string_view kScheme = "bearer ";
  const bool scheme_ok =
      got.size() >= kScheme.size() && iequals(got.substr(0, kScheme.size()), kScheme);
  const std::string_view credential = scheme_ok ? got.substr(kScheme.size()) : std::string_view{};
  unsigned diff = scheme_ok && credential.size() == token.size() ? 0u : 1u;
  for (std::size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned>(token[i] ^ (i < credential.size() ? credential[i] : 0));
  }
  if (diff == 0) {
    return std::nullopt;
  }
  Response r = Response::detail(401, "This endpoint needs 'Authorization: Bearer <admin token>'");
  r.headers.push_back({"www-authenticate", "Bearer"});
  return r;
}

}  // namespace llmd::http
