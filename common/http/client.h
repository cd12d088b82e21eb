#pragma once
// Small synchronous HTTP/1.1 client with one keep-alive connection (Beast only in client.cc).
// Not thread-safe: one owner thread per client. Reconnects transparently once when a kept-alive
// connection was closed by the peer. Every call is bounded by `timeout`.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/http/message.h"

namespace llmd::http {

struct Url {
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // without trailing '/'
};
// Parses "http://host:port[/base]"; nullopt for anything else (https is not supported).
std::optional<Url> parse_url(const std::string& url);

struct ClientResponse {
  int status = 0;  // 0 when the request failed at the transport level
  std::string body;
  std::vector<Header> headers;
  std::string error;  // transport error message when status == 0
  std::string_view header(std::string_view name) const;
};

class HttpClient {
 public:
  HttpClient(std::string host, uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  ClientResponse request(const std::string& method, const std::string& target,
                         const std::string& body = {},
                         const std::string& content_type = "application/json",
                         const std::vector<Header>& extra_headers = {});
  ClientResponse get(const std::string& target) { return request("GET", target); }
  ClientResponse post(const std::string& target, const std::string& body) {
    return request("POST", target, body);
  }
  void set_timeout(std::chrono::milliseconds timeout);
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::http
