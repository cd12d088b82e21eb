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
  const std::string want = "Bearer " + token;
  unsigned diff = got.size() != want.size() ? 1u : 0u;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned>(want[i] ^ (i < got.size() ? got[i] : 0));
  }
  if (diff == 0) {
    return std::nullopt;
  }
  Response r = Response::detail(401, "This endpoint needs 'Authorization: Bearer <admin token>'");
  r.headers.push_back({"www-authenticate", "Bearer"});
  return r;
}

}  // namespace llmd::http
