#pragma once
// Test helpers: an RAII running HttpServer and a blocking raw POSIX socket for byte-level checks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "common/http/server.h"
#include "common/http/stream_server.h"

namespace llmd::http::testing {

inline ServerOptions local_options() {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.io_threads = 2;
  o.drain_timeout = std::chrono::milliseconds(3000);
  o.server_name = "llmd-test";
  return o;
}

// Runs server.run(false) on a thread; the destructor always stops and joins.
class RunningServer {
 public:
  RunningServer(ServerOptions options, HttpServer::RequestHandler handler)
      : server_(std::move(options), std::move(handler)) {
    server_.start();
    thread_ = std::thread([this] { server_.run(false); });
  }
  ~RunningServer() { stop_and_join(); }
  void stop_and_join() {
    server_.stop();
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  HttpServer& server() { return server_; }
  uint16_t port() const { return server_.port(); }

 private:
  HttpServer server_;
  std::thread thread_;
};

// A StreamServer on 127.0.0.1 (a port the kernel picks) run on one thread; the destructor always
// stops and joins, so a fake that holds it as its last member stops it before its own state goes.
class RunningStreamServer {
 public:
  explicit RunningStreamServer(StreamServer::Handler handler) {
    StreamServerOptions o;
    o.host = "127.0.0.1";
    o.io_threads = 1;
    server_ = std::make_unique<StreamServer>(o, std::move(handler));
    port_ = server_->port(server_->listen(0));
    thread_ = std::thread([this] { server_->run(false); });
  }
  ~RunningStreamServer() {
    server_->stop(std::chrono::milliseconds(0));
    thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  std::unique_ptr<StreamServer> server_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// A listening TCP socket on 127.0.0.1 at a port the kernel picks, for scripted servers:
// {descriptor, port}.
inline std::pair<int, uint16_t> listen_on_loopback() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::listen(fd, 8);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return {fd, ntohs(addr.sin_port)};
}

// A blocking loopback connection to `port` (-1 when refused), for byte-level clients.
inline int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// For scripted servers on a blocking descriptor: reads one request (its header, and the body its
// Content-Length announces); false when the peer closed first.
inline bool read_request(int fd) {
  std::string head;
  char c = 0;
  while (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n") != 0) {
    if (::recv(fd, &c, 1, 0) != 1) {
      return false;
    }
    head.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  const auto at = head.find("\r\ncontent-length:");
  std::size_t left = at == std::string::npos ? 0 : std::stoul(head.substr(at + 17));
  char chunk[4096];
  while (left > 0) {
    const auto n = ::recv(fd, chunk, std::min(left, sizeof(chunk)), 0);
    if (n <= 0) {
      return false;
    }
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

// Sends all of `data`; false when the peer is gone. `sent` (optional) counts what the socket
// took, for a test that watches a server being held back.
inline bool send_all(int fd, std::string_view data, std::atomic<std::size_t>* sent = nullptr) {
  while (!data.empty()) {
    const auto n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      return false;
    }
    if (sent != nullptr) {
      *sent += static_cast<std::size_t>(n);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Blocking socket whose reads give up after `recv_timeout_s` so a broken server fails the test
// instead of hanging it.
class RawSocket {
 public:
  explicit RawSocket(uint16_t port, int recv_timeout_s = 10) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{recv_timeout_s, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawSocket() { close(); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool connected() const { return connected_; }
  // True when the peer has answered or closed: a read would not block.
  bool answered() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  // Closes the connection now (the peer sees it go away).
  void close() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  bool send_all(const std::string& data) {
    std::size_t sent = 0;
    while (sent < data.size()) {
      const auto n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        return false;
      }
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }
  // recv() result: >0 bytes appended to buffer_, 0 orderly close, <0 error or timeout.
  long read_some() {
    char chunk[4096];
    const auto n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
    return n;
  }
  // Reads one Content-Length framed response; nullopt if the peer closed or timed out first.
  std::optional<std::string> read_response() {
    while (true) {
      const auto head_end = buffer_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::size_t length = 0;
        const auto cl = lower(buffer_.substr(0, head_end)).find("content-length:");
        if (cl != std::string::npos) {
          length = std::stoul(buffer_.substr(cl + 15));
        }
        const auto total = head_end + 4 + length;
        if (buffer_.size() >= total) {
          auto out = buffer_.substr(0, total);
          buffer_.erase(0, total);
          return out;
        }
      }
      if (read_some() <= 0) {
        return std::nullopt;
      }
    }
  }
  // True when the peer closes (recv returns 0) before the receive timeout; drops any data.
  bool wait_for_close() {
    while (true) {
      const auto n = read_some();
      if (n == 0) {
        return true;
      }
      if (n < 0) {
        return false;
      }
    }
  }
  const std::string& buffered() const { return buffer_; }
  // What was read so far, handed over (the buffer starts empty again).
  std::string take() { return std::exchange(buffer_, {}); }

 private:
  static std::string lower(std::string s) {
    for (auto& c : s) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return s;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

// Sends `head` (a request that announces a body, without it) on fresh connections until the
// server answers before any body byte arrives, as its body budget does once uploads already
// hold it; returns that answer, or nullopt after `attempts` (a hang guard). A connection that
// gets no answer within a second was taken (the server waits for its body: the holding uploads
// were not counted yet, which a loaded machine may delay) and is closed before the next
// attempt. A probe the server read before a holding upload takes that upload's place, and the
// upload is the one refused: `holders_refused` tells, and `rehold` opens the holding uploads
// again. So the test waits for the budget to be held, not for a time.
inline std::optional<std::string> answer_before_body(uint16_t port, const std::string& head,
                                                     const std::function<bool()>& holders_refused,
                                                     const std::function<void()>& rehold,
                                                     int attempts = 30) {
  for (int i = 0; i < attempts; ++i) {
    RawSocket probe(port, 1);
    if (!probe.send_all(head)) {
      continue;
    }
    if (auto res = probe.read_response()) {
      return res;
    }
    probe.close();
    if (holders_refused()) {
      rehold();
    }
  }
  return std::nullopt;
}

}  // namespace llmd::http::testing
