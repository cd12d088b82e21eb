#pragma once
// Plain HTTP request/response values. Transport-free: handlers and routers see only these,
// so they are unit-testable without sockets. Beast types never leave server.cc / client.cc.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmd::http {

struct Header {
  std::string name;  // lower-case
  std::string value;
};

// ASCII lower-case (header names are case-insensitive; the project keeps them lower-case).
std::string to_lower(std::string_view s);

// RFC 3986 percent-decoding of one path segment ("meta-llama%2FLlama" -> "meta-llama/Llama");
// '+' stays '+'. nullopt when a '%' is not followed by two hex digits or the result holds NUL.
std::optional<std::string> percent_decode(std::string_view s);

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // raw request target, e.g. "/model/ttft/info?x=1"
  std::string path;    // target without the query string
  std::string query;   // text after '?', empty if none
  std::vector<Header> headers;
  std::string body;
  // Filled by the Router for `{param}` segments, in pattern order, percent-decoded (a segment
  // that does not decode is kept as sent).
  std::vector<std::pair<std::string, std::string>> path_params;

  // Case-insensitive header lookup; empty view when absent.
  std::string_view header(std::string_view name) const;
  std::string_view param(std::string_view name) const;
};

// Bearer-token check of an admin endpoint: nullopt when `token` is empty (no token configured)
// or the request carries "Authorization: Bearer <token>" (the scheme in any case, RFC 9110
// section 11.1); else the 401 to answer.
struct Response;
std::optional<Response> require_bearer(const std::string& token, const Request& req);

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<Header> headers;  // extra headers (Content-Type/Length are set by the server)

  static Response json(int status, const nlohmann::json& body);
  static Response text(int status, std::string body, std::string content_type = "text/plain");
  // `{"detail": "<message>"}`, the contract's handler-error shape.
  static Response detail(int status, std::string_view message);
};

}  // namespace llmd::http
