// The gRPC server against a raw HTTP/2 client (nghttp2), for what the gRPC library's client
// never sends: a compressed flag without grpc-encoding, a 4 GiB length prefix, and a
// grpc-timeout of 99999999H. The framing's rules (grpc_framing_test.cc) as the peer sees them.
#include <nghttp2/nghttp2.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/http/io_workers.h"
#include "epp/extproc/grpc_framing.h"
#include "epp/extproc/grpc_server.h"

namespace llmd::epp::extproc {
namespace {

// Echoes each message and ends OK when the client half-closes.
class Echo final : public GrpcCallHandler {
 public:
  explicit Echo(std::shared_ptr<GrpcCall> call) : call_(std::move(call)) {}
  void on_message(std::string message) override { call_->send(std::move(message)); }
  void on_half_close() override { call_->finish({}); }
  void on_cancel() override {}

 private:
  std::shared_ptr<GrpcCall> call_;
};

// Answers nothing: the call lasts until its deadline, its client or the server ends it.
class Hold final : public GrpcCallHandler {
 public:
  void on_message(std::string) override {}
  void on_half_close() override {}
  void on_cancel() override {}
};

// One blocking HTTP/2 client connection doing one call; what came back.
class RawCall {
 public:
  explicit RawCall(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    timeval hang_guard{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &hang_guard, sizeof(hang_guard));
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_send_callback(cbs, &on_send);
    nghttp2_session_callbacks_set_on_header_callback(cbs, &on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &on_close);
    nghttp2_session_client_new(&session_, cbs, this);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~RawCall() {
    nghttp2_session_del(session_);
    ::close(fd_);
  }

  // Sends the request (`body` as DATA, ending the stream) to `path` and, with `wait`, reads
  // until the stream closes.
  bool run(const std::string& timeout, std::string body,
           const std::string& path = "/test.Echo/Echo", bool wait = true) {
    body_ = std::move(body);
    std::vector<std::pair<std::string, std::string>> h{{":method", "POST"},
                                                       {":scheme", "http"},
                                                       {":path", path},
                                                       {":authority", "localhost"},
                                                       {"content-type", "application/grpc"},
                                                       {"te", "trailers"}};
    if (!timeout.empty()) {
      h.emplace_back("grpc-timeout", timeout);
    }
    std::vector<nghttp2_nv> nv;
    for (auto& [n, v] : h) {
      nv.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()),
                    n.size(), v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    nghttp2_data_provider provider{};
    provider.source.ptr = this;
    provider.read_callback = &read_body;
    if (!connected_ ||
        nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(), &provider, this) < 0) {
      return false;
    }
    while (!closed_) {
      if (nghttp2_session_send(session_) != 0) {
        return false;
      }
      if (!wait) {
        return true;
      }
      uint8_t buffer[16384];
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0 || nghttp2_session_mem_recv(session_, buffer, static_cast<std::size_t>(n)) < 0) {
        return false;
      }
    }
    return true;
  }

  std::map<std::string, std::string> fields;  // response headers and trailers
  std::string data;                           // response DATA

 private:
  static ssize_t on_send(nghttp2_session*, const uint8_t* data, std::size_t n, int, void* self) {
    return ::send(static_cast<RawCall*>(self)->fd_, data, n, MSG_NOSIGNAL);
  }
  static int on_header(nghttp2_session*, const nghttp2_frame*, const uint8_t* name,
                       std::size_t namelen, const uint8_t* value, std::size_t valuelen, uint8_t,
                       void* self) {
    static_cast<RawCall*>(self)->fields[std::string(reinterpret_cast<const char*>(name), namelen)] =
        std::string(reinterpret_cast<const char*>(value), valuelen);
    return 0;
  }
  static int on_data(nghttp2_session*, uint8_t, int32_t, const uint8_t* data, std::size_t n,
                     void* self) {
    static_cast<RawCall*>(self)->data.append(reinterpret_cast<const char*>(data), n);
    return 0;
  }
  static int on_close(nghttp2_session*, int32_t, uint32_t, void* self) {
    static_cast<RawCall*>(self)->closed_ = true;
    return 0;
  }
  static ssize_t read_body(nghttp2_session*, int32_t, uint8_t* buf, std::size_t length,
                           uint32_t* flags, nghttp2_data_source* source, void*) {
    auto& self = *static_cast<RawCall*>(source->ptr);
    const std::size_t n = std::min(length, self.body_.size() - self.body_pos_);
    std::copy_n(self.body_.data() + self.body_pos_, n, buf);
    self.body_pos_ += n;
    if (self.body_pos_ == self.body_.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    return static_cast<ssize_t>(n);
  }

  int fd_ = -1;
  bool connected_ = false;
  nghttp2_session* session_ = nullptr;
  std::string body_;
  std::size_t body_pos_ = 0;
  bool closed_ = false;
};

std::string prefix(unsigned char flag, uint32_t length) {
  return {static_cast<char>(flag), static_cast<char>(length >> 24), static_cast<char>(length >> 16),
          static_cast<char>(length >> 8), static_cast<char>(length)};
}

class GrpcWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GrpcServerOptions o;
    o.host = "127.0.0.1";
    server_ = std::make_unique<GrpcServer>(o, workers_);
    server_->add_method("/test.Echo/Echo", [](std::shared_ptr<GrpcCall> call) {
      return std::make_unique<Echo>(std::move(call));
    });
    server_->add_method("/test.Hold/Hold",
                        [](std::shared_ptr<GrpcCall>) { return std::make_unique<Hold>(); });
    server_->start();
  }
  void TearDown() override {
    server_.reset();
    workers_.stop();
  }

  http::IoWorkers workers_{2, "grpc-wire"};
  std::unique_ptr<GrpcServer> server_;
};

TEST_F(GrpcWireTest, AMessageEchoesUnderATimeoutOf99999999Hours) {
  RawCall call(server_->port());
  std::string body;
  append_message(body, "hello");
  ASSERT_TRUE(call.run("99999999H", body));
  EXPECT_EQ(call.fields["grpc-status"], "0") << call.fields["grpc-message"];
  EXPECT_EQ(call.data, body);
}

TEST_F(GrpcWireTest, ATimeoutOf99999999HoursIsNoDeadlineAndAShortOneEndsTheCall) {
  RawCall held(server_->port());
  ASSERT_TRUE(held.run("99999999H", "", "/test.Hold/Hold", false));
  const auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_->open_calls() == 0 && std::chrono::steady_clock::now() < guard) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // An overflowed timeout is a deadline in the past: the call would end at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(server_->open_calls(), 1);
  RawCall short_one(server_->port());
  ASSERT_TRUE(short_one.run("20m", "", "/test.Hold/Hold"));
  EXPECT_EQ(short_one.fields["grpc-status"], "4");
}

// A stream that ends inside a message (its prefix announces 100 bytes, 10 arrive) is an error,
// not an OK for the message that never came; nothing is echoed.
TEST_F(GrpcWireTest, AStreamThatEndsInsideAMessageEndsWithInternal) {
  RawCall call(server_->port());
  ASSERT_TRUE(call.run("", prefix(0, 100) + std::string(10, 'a')));
  EXPECT_EQ(call.fields[":status"], "200");
  EXPECT_EQ(call.fields["grpc-status"], "13") << call.fields["grpc-message"];
  EXPECT_EQ(call.data, "");
  RawCall prefix_only(server_->port());
  ASSERT_TRUE(prefix_only.run("", prefix(0, 100).substr(0, 3)));
  EXPECT_EQ(prefix_only.fields["grpc-status"], "13") << prefix_only.fields["grpc-message"];
}

TEST_F(GrpcWireTest, ACompressedFlagWithoutGrpcEncodingEndsTheCallWithInternal) {
  RawCall call(server_->port());
  ASSERT_TRUE(call.run("", prefix(1, 3) + "abc"));
  EXPECT_EQ(call.fields[":status"], "200");
  EXPECT_EQ(call.fields["grpc-status"], "13");
  EXPECT_EQ(call.data, "");
}

TEST_F(GrpcWireTest, APrefixOf4GiBEndsTheCallWithResourceExhausted) {
  RawCall call(server_->port());
  ASSERT_TRUE(call.run("", prefix(0, 0xFFFFFFFFu) + "abc"));
  EXPECT_EQ(call.fields["grpc-status"], "8");
  EXPECT_EQ(call.fields["grpc-message"],
            "message of 4294967295 bytes is over the limit of 4194304");
}

}  // namespace
}  // namespace llmd::epp::extproc
