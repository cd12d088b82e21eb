// The client core's own behaviour: streamed bodies (piece by piece, read only when asked),
// the exchange's timeouts, cancellation, and TLS. The facades' contracts are in
// http_client_test.cc; these servers are scripted byte by byte on loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <tuple>

#include <boost/asio/io_context.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include "common/http/client.h"
#include "common/http/client_core.h"
#include "tests/common/http_test_util.h"
#include "tests/common/tls_test_server.h"

namespace llmd::http {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using testing::Certificates;
using testing::read_request;
using testing::send_all;
using testing::TlsServer;

// Accepts connections one after another and runs `script` on each (on the server's thread).
class ScriptedServer {
 public:
  using Script = std::function<void(int fd)>;
  explicit ScriptedServer(Script script) : script_(std::move(script)) {
    std::tie(listen_fd_, port_) = testing::listen_on_loopback();
    thread_ = std::thread([this] {
      while (true) {
        const int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) {
          return;
        }
        ++accepted_;
        script_(fd);
        ::close(fd);
      }
    });
  }
  ~ScriptedServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }
  Url url() const {
    Url u;
    u.host = "127.0.0.1";
    u.port = port_;
    return u;
  }

 private:
  Script script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

std::string chunk(std::string_view data) {
  char size[16];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return std::string(size) + std::string(data) + "\r\n";
}

constexpr std::string_view kChunkedHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

// A one-shot signal from the test to a server script (or back).
class Gate {
 public:
  void open() {
    std::lock_guard lock(mu_);
    if (!opened_) {
      opened_ = true;
      promise_.set_value();
    }
  }
  void wait() { future_.wait_for(10s); }

 private:
  std::mutex mu_;
  bool opened_ = false;
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
};

// A ClientCore on an I/O thread of its own, with blocking helpers for the tests.
class CoreOnThread {
 public:
  explicit CoreOnThread(ClientCore::Options options = {})
      : work_(asio::make_work_guard(ioc_)), core_(ioc_.get_executor(), std::move(options)) {
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~CoreOnThread() {
    asio::post(ioc_, [this] { core_.shutdown(); });
    work_.reset();
    thread_.join();
  }
  ClientCore& core() { return core_; }

  struct Opened {
    ClientResponse head;
    ClientCallPtr body;
  };
  Opened open(const Url& url, const std::string& target, const ClientTimeouts& timeouts) {
    std::promise<Opened> done;
    ClientRequest req;
    req.target = target;
    core_.open(url, std::move(req), timeouts, [&done](ClientResponse head, ClientCallPtr body) {
      done.set_value({std::move(head), std::move(body)});
    });
    return done.get_future().get();
  }
  // One read; the bytes are copied out on the I/O thread.
  struct Piece {
    std::string bytes;
    bool end = false;
    std::string error;
    bool timed_out = false;
  };
  Piece read(const ClientCallPtr& call) {
    std::promise<Piece> done;
    asio::post(ioc_, [&done, call] {
      call->read([&done](BodyPiece p) {
        done.set_value({std::string(p.bytes), p.end, p.error, p.timed_out});
      });
    });
    return done.get_future().get();
  }
  // The whole body, read to its end or error (the error returned, "" at a clean end).
  std::string read_all(const ClientCallPtr& call, std::string& body) {
    while (true) {
      Piece p = read(call);
      body += p.bytes;
      if (!p.error.empty() || p.end) {
        return p.error;
      }
    }
  }
  // A read, and cancel() right after it on the I/O thread: the read is pending when it runs.
  Piece read_then_cancel(const ClientCallPtr& call) {
    std::promise<Piece> done;
    asio::post(ioc_, [&done, call] {
      call->read([&done](BodyPiece p) {
        done.set_value({std::string(p.bytes), p.end, p.error, p.timed_out});
      });
      call->cancel();
    });
    return done.get_future().get();
  }
  ClientResponse fetch(const Url& url, const std::string& target, const ClientTimeouts& t) {
    std::promise<ClientResponse> done;
    ClientRequest req;
    req.target = target;
    core_.fetch(url, std::move(req), t, [&done](ClientResponse r) { done.set_value(r); });
    return done.get_future().get();
  }

 private:
  asio::io_context ioc_{1};
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  ClientCore core_;
  std::thread thread_;
};

TEST(ClientCore, AStreamedBodyArrivesWholeAndItsConnectionIsReused) {
  ScriptedServer server([](int fd) {
    while (read_request(fd)) {
      send_all(fd, std::string(kChunkedHead) + chunk("data: one\n\n"));
      send_all(fd, chunk("data: two\n\n") + chunk("data: [DONE]\n\n") + "0\r\n\r\n");
    }
  });
  CoreOnThread c;
  for (int i = 0; i < 3; ++i) {
    auto opened = c.open(server.url(), "/v1/completions", {});
    ASSERT_EQ(opened.head.status, 200) << opened.head.error;
    EXPECT_EQ(opened.head.header("content-type"), "text/event-stream");
    ASSERT_TRUE(opened.body);
    std::string body;
    EXPECT_EQ(c.read_all(opened.body, body), "");
    EXPECT_EQ(body, "data: one\n\ndata: two\n\ndata: [DONE]\n\n");
  }
  EXPECT_EQ(server.accepted(), 1) << "each body was read to its end: one kept-alive connection";
  EXPECT_EQ(c.core().connections_opened(server.url()), 1u);
}

// Backpressure: a caller that does not read holds the server back (TCP fills up), and every
// byte still arrives once it reads.
TEST(ClientCore, AStreamedBodyIsReadOnlyAsTheCallerAsks) {
  constexpr std::size_t kBody = 64u << 20;
  std::atomic<std::size_t> sent{0};
  ScriptedServer server([&sent](int fd) {
    if (!read_request(fd)) {
      return;
    }
    send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kBody) + "\r\n\r\n");
    const std::string block(64 * 1024, 'x');
    while (sent < kBody && send_all(fd, block)) {
      sent += block.size();
    }
  });
  CoreOnThread c;
  auto opened = c.open(server.url(), "/big", {});
  ASSERT_EQ(opened.head.status, 200) << opened.head.error;
  // Wait until the server is stuck: its count stops moving.
  std::size_t last = 0;
  for (int still = 0; still < 5;) {
    std::this_thread::sleep_for(20ms);
    const std::size_t now = sent;
    still = now == last ? still + 1 : 0;
    last = now;
  }
  EXPECT_LT(sent.load(), kBody / 4) << "the client read without being asked";
  std::string body;
  EXPECT_EQ(c.read_all(opened.body, body), "");
  EXPECT_EQ(body.size(), kBody);
}

TEST(ClientCore, AStalledBodyTimesOutAsIdle) {
  Gate release;
  ScriptedServer server([&release](int fd) {
    if (read_request(fd)) {
      send_all(fd, std::string(kChunkedHead) + chunk("data: one\n\n"));
      release.wait();
    }
  });
  CoreOnThread c;
  ClientTimeouts t;
  t.idle = 200ms;
  auto opened = c.open(server.url(), "/", t);
  ASSERT_EQ(opened.head.status, 200) << opened.head.error;
  EXPECT_EQ(c.read(opened.body).bytes, "data: one\n\n");
  const auto stalled = c.read(opened.body);
  release.open();
  EXPECT_TRUE(stalled.timed_out) << stalled.error;
  EXPECT_NE(stalled.error.find("timeout"), std::string::npos) << stalled.error;
  EXPECT_FALSE(stalled.end);
}

// The idle bound is the server's silence while the caller waits for bytes, not the caller's
// own pauses (a proxy that stops reading while its client catches up).
TEST(ClientCore, IdleTimeDoesNotRunWhileTheCallerIsNotReading) {
  Gate more;
  ScriptedServer server([&more](int fd) {
    if (read_request(fd)) {
      send_all(fd, std::string(kChunkedHead) + chunk("a"));
      more.wait();
      send_all(fd, chunk("b") + "0\r\n\r\n");
    }
  });
  CoreOnThread c;
  ClientTimeouts t;
  t.idle = 100ms;
  auto opened = c.open(server.url(), "/", t);
  ASSERT_EQ(opened.head.status, 200) << opened.head.error;
  EXPECT_EQ(c.read(opened.body).bytes, "a");
  std::this_thread::sleep_for(400ms);  // the caller pauses four idle bounds
  more.open();
  std::string rest;
  EXPECT_EQ(c.read_all(opened.body, rest), "");
  EXPECT_EQ(rest, "b");
}

TEST(ClientCore, AnUnansweredRequestTimesOutAtTheFirstByteBound) {
  Gate release;
  ScriptedServer server([&release](int fd) {
    if (read_request(fd)) {
      release.wait();
    }
  });
  CoreOnThread c;
  ClientTimeouts t;
  t.first_byte = 200ms;
  const auto opened = c.open(server.url(), "/", t);
  EXPECT_EQ(opened.head.status, 0);
  EXPECT_TRUE(opened.head.timed_out) << opened.head.error;
  EXPECT_FALSE(opened.body);
  const auto fetched = c.fetch(server.url(), "/", t);
  release.open();
  EXPECT_EQ(fetched.status, 0);
  EXPECT_TRUE(fetched.timed_out) << fetched.error;
}

TEST(ClientCore, CancelEndsAPendingReadAndClosesTheConnection) {
  std::atomic<bool> peer_closed{false};
  ScriptedServer server([&peer_closed](int fd) {
    if (read_request(fd)) {
      send_all(fd, std::string(kChunkedHead));
      char c = 0;
      peer_closed = ::recv(fd, &c, 1, 0) == 0;  // returns once the client closes
    }
  });
  CoreOnThread c;
  auto opened = c.open(server.url(), "/", {});
  ASSERT_EQ(opened.head.status, 200) << opened.head.error;
  const auto piece = c.read_then_cancel(opened.body);
  EXPECT_EQ(piece.error, "cancelled");
  EXPECT_FALSE(piece.end);
  EXPECT_EQ(c.read(opened.body).error, "cancelled") << "a cancelled call stays ended";
  for (int i = 0; i < 500 && !peer_closed; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(peer_closed) << "a cancelled stream's connection is closed, not pooled";
  EXPECT_EQ(c.core().idle(), 0u);
}

TEST(ClientCore, ABodyNotReadToItsEndIsNotPooled) {
  ScriptedServer server([](int fd) {
    while (read_request(fd)) {
      send_all(fd, std::string(kChunkedHead) + chunk("first") + chunk("second") + "0\r\n\r\n");
    }
  });
  CoreOnThread c;
  {
    auto opened = c.open(server.url(), "/", {});
    ASSERT_EQ(opened.head.status, 200) << opened.head.error;
    EXPECT_EQ(c.read(opened.body).bytes.substr(0, 5), "first");
  }  // dropped before the end
  auto again = c.open(server.url(), "/", {});
  ASSERT_EQ(again.head.status, 200) << again.head.error;
  std::string body;
  EXPECT_EQ(c.read_all(again.body, body), "");
  EXPECT_EQ(body, "firstsecond");
  EXPECT_EQ(server.accepted(), 2);
}

TEST(HttpClient, AStreamedRequestStopsWhenOnBodySaysSo) {
  ScriptedServer server([](int fd) {
    if (read_request(fd)) {
      send_all(fd, std::string(kChunkedHead) + chunk("one"));
      char c = 0;
      ::recv(fd, &c, 1, 0);  // until the client goes
    }
  });
  HttpClient client(server.url(), HttpClient::Options{});
  std::string seen;
  ClientTimeouts t;
  t.idle = 5s;
  const auto r = client.request_streamed("GET", "/watch", "", "", {}, t, [&](std::string_view b) {
    seen += b;
    return false;
  });
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(seen, "one");
}

// The interruption is polled while a request waits: a silent server cannot hold the caller.
TEST(HttpClient, TheInterruptedPredicateCancelsAWaitingRequest) {
  Gate release;
  ScriptedServer server([&release](int fd) {
    if (read_request(fd)) {
      release.wait();
    }
  });
  std::atomic<int> polls{0};
  HttpClient::Options o;
  o.timeout = 30s;
  o.interrupted = [&polls] { return ++polls > 3; };
  HttpClient client(server.url(), o);
  const auto r = client.get("/");
  release.open();
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "cancelled");
  EXPECT_FALSE(r.timed_out);
}

// --- TLS ---

// The TLS server's answers: "/stream" a chunked body in three pieces, anything else "ok".
std::string tls_answer(const std::string& head) {
  if (head.find(" /stream ") != std::string::npos) {
    return std::string(kChunkedHead) + chunk("{\"type\":\"ADDED\"}\n") +
           chunk("{\"type\":\"MODIFIED\"}\n") + chunk("{\"type\":\"DELETED\"}\n") + "0\r\n\r\n";
  }
  return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
}

class HttpsClient : public ::testing::Test {
 protected:
  // Two certificates for the suite (an RSA key takes a while to make).
  static void SetUpTestSuite() {
    certs_ = new Certificates;
    made_ = certs_->make("server") && certs_->make("other");
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(made_) << "openssl req failed";
    server_ =
        std::make_unique<TlsServer>(certs_->cert("server"), certs_->key("server"), tls_answer);
  }
  static std::string ca(const std::string& name) { return certs_->cert(name); }
  HttpClient::Options trusting(const std::string& ca_file, const std::string& name = "") {
    HttpClient::Options o;
    o.timeout = 5s;
    o.tls = make_tls_context({ca_file, name});
    return o;
  }
  static inline Certificates* certs_ = nullptr;
  static inline bool made_ = false;
  std::unique_ptr<TlsServer> server_;
};

TEST_F(HttpsClient, TrustsTheGivenCaAndKeepsTheConnectionAlive) {
  HttpClient client(server_->url(), trusting(ca("server")));
  for (int i = 0; i < 3; ++i) {
    const auto r = client.get("/x");
    ASSERT_EQ(r.status, 200) << r.error;
    EXPECT_EQ(r.body, "ok");
  }
  EXPECT_EQ(server_->handshakes(), 1);
}

TEST_F(HttpsClient, RefusesAServerTheCaDidNotSign) {
  HttpClient client(server_->url(), trusting(ca("other")));
  const auto r = client.get("/x");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.error.find("certificate verify failed"), std::string::npos) << r.error;
}

TEST_F(HttpsClient, RefusesACertificateForAnotherName) {
  HttpClient client(server_->url(), trusting(ca("server"), "kubernetes.default.svc"));
  const auto r = client.get("/x");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.error.find("certificate verify failed"), std::string::npos) << r.error;
}

TEST_F(HttpsClient, StreamsABodyPieceByPiece) {
  HttpClient client(server_->url(), trusting(ca("server"), "localhost"));
  std::string body;
  ClientTimeouts t;
  t.connect = 5s;
  t.first_byte = 5s;
  t.idle = 5s;
  const auto r = client.request_streamed("GET", "/stream", "", "", {}, t, [&](std::string_view b) {
    body += b;
    return true;
  });
  EXPECT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(body, "{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n{\"type\":\"DELETED\"}\n");
}

TEST_F(HttpsClient, AnHttpsOriginWithoutTlsSettingsFailsEachRequest) {
  HttpClient client(server_->url(), HttpClient::Options{});
  const auto r = client.get("/x");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.error.find("no TLS settings"), std::string::npos) << r.error;
  EXPECT_EQ(server_->handshakes(), 0);
}

TEST(TlsContext, AnUnreadableCaIsAStartUpError) {
  EXPECT_THROW(make_tls_context({"/nonexistent/ca.crt", ""}), std::invalid_argument);
}

TEST(HttpClientParseUrl, AcceptsHttpsOnlyWhenAsked) {
  EXPECT_FALSE(parse_url("https://api:6443").has_value());
  const auto u = parse_url("https://api:6443/base", UrlSchemes::kHttpOrHttps);
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "api");
  EXPECT_EQ(u->port, 6443);
  EXPECT_EQ(u->base_path, "/base");
  const auto d = parse_url("https://kubernetes", UrlSchemes::kHttpOrHttps);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->port, 443);
  const auto plain = parse_url("http://api", UrlSchemes::kHttpOrHttps);
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->port, 80);
}

}  // namespace
}  // namespace llmd::http
