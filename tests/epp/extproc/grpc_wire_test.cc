// The gRPC server against a raw HTTP/2 client (nghttp2), for what the gRPC library's client
// never sends: a compressed flag without grpc-encoding, a 4 GiB length prefix, and a
// grpc-timeout of 99999999H. The framing's rules (grpc_framing_test.cc) as the peer sees them,
// and every per-peer limit of GrpcLimits played by the hostile peer it guards against.
#include <nghttp2/nghttp2.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <thread>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/http/body_budget.h"
#include "common/http/io_workers.h"
#include "epp/extproc/grpc_framing.h"
#include "epp/extproc/grpc_server.h"
#include "tests/support/raw_h2_peer.h"

namespace llmd::epp::extproc {
namespace {

using llmd::testing::grpc_prefix;
using llmd::testing::RawPeer;

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

// One call on a RawPeer of its own: what came back.
class RawCall {
 public:
  explicit RawCall(uint16_t port) : peer_(port) {}

  // Sends the request (`body` as DATA, ending the stream) to `path` and, with `wait`, reads
  // until the stream closes (a 10-s hang guard).
  bool run(const std::string& timeout, std::string body,
           const std::string& path = "/test.Echo/Echo", bool wait = true) {
    std::vector<std::pair<std::string, std::string>> extra;
    if (!timeout.empty()) {
      extra.emplace_back("grpc-timeout", timeout);
    }
    if (!peer_.connected()) {
      return false;
    }
    const int32_t id = peer_.open(path, std::move(body), true, extra);
    if (id < 0) {
      return false;
    }
    if (!wait) {
      return true;
    }
    const bool closed =
        peer_.pump([&] { return peer_.closed.count(id) > 0; }, std::chrono::seconds(10));
    fields = peer_.fields[id];
    data = peer_.data[id];
    return closed;
  }

  std::map<std::string, std::string> fields;  // response headers and trailers
  std::string data;                           // response DATA

 private:
  RawPeer peer_;
};

// A started server with two methods: /test.Echo/Echo and /test.Hold/Hold.
std::unique_ptr<GrpcServer> echo_and_hold_server(const GrpcServerOptions& o,
                                                 http::IoWorkers& workers) {
  auto server = std::make_unique<GrpcServer>(o, workers);
  server->add_method("/test.Echo/Echo", [](std::shared_ptr<GrpcCall> call) {
    return std::make_unique<Echo>(std::move(call));
  });
  server->add_method("/test.Hold/Hold",
                     [](std::shared_ptr<GrpcCall>) { return std::make_unique<Hold>(); });
  server->start();
  return server;
}

class GrpcWireTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GrpcServerOptions o;
    o.host = "127.0.0.1";
    server_ = echo_and_hold_server(o, workers_);
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
  ASSERT_TRUE(call.run("", grpc_prefix(0, 100) + std::string(10, 'a')));
  EXPECT_EQ(call.fields[":status"], "200");
  EXPECT_EQ(call.fields["grpc-status"], "13") << call.fields["grpc-message"];
  EXPECT_EQ(call.data, "");
  RawCall prefix_only(server_->port());
  ASSERT_TRUE(prefix_only.run("", grpc_prefix(0, 100).substr(0, 3)));
  EXPECT_EQ(prefix_only.fields["grpc-status"], "13") << prefix_only.fields["grpc-message"];
}

TEST_F(GrpcWireTest, ACompressedFlagWithoutGrpcEncodingEndsTheCallWithInternal) {
  RawCall call(server_->port());
  ASSERT_TRUE(call.run("", grpc_prefix(1, 3) + "abc"));
  EXPECT_EQ(call.fields[":status"], "200");
  EXPECT_EQ(call.fields["grpc-status"], "13");
  EXPECT_EQ(call.data, "");
}

TEST_F(GrpcWireTest, APrefixOf4GiBEndsTheCallWithResourceExhausted) {
  RawCall call(server_->port());
  ASSERT_TRUE(call.run("", grpc_prefix(0, 0xFFFFFFFFu) + "abc"));
  EXPECT_EQ(call.fields["grpc-status"], "8");
  EXPECT_EQ(call.fields["grpc-message"],
            "message of 4294967295 bytes is over the limit of 4194304");
}

// The limits of GrpcLimits, each made short or small so the test reaches it; what is not under
// test stays off.
class GrpcLimitsTest : public ::testing::Test {
 protected:
  void start(GrpcLimits limits, std::size_t budget_bytes = 0,
             std::size_t max_message = 4 * 1024 * 1024,
             std::chrono::milliseconds handshake = std::chrono::seconds(10)) {
    GrpcServerOptions o;
    o.host = "127.0.0.1";
    o.limits = limits;
    o.max_message_bytes = max_message;
    o.handshake_timeout = handshake;
    if (budget_bytes > 0) {
      budget_ = std::make_shared<http::BodyBudget>(budget_bytes);
      o.message_budget = budget_;
    }
    server_ = echo_and_hold_server(o, workers_);
  }
  static GrpcLimits off() {
    GrpcLimits l;
    l.idle_timeout = l.stream_idle_timeout = l.max_connection_age = l.keepalive_interval = {};
    l.connection_budget_share = 1;
    return l;
  }
  void TearDown() override {
    server_.reset();
    workers_.stop();
  }
  // An echo of `bytes` on a connection of its own: its grpc-status.
  std::string echo(std::size_t bytes) {
    RawCall call(server_->port());
    std::string body;
    append_message(body, std::string(bytes, 'e'));
    if (!call.run("", body)) {
      return "transport failed";
    }
    return call.fields["grpc-status"];
  }

  http::IoWorkers workers_{2, "grpc-limits"};
  std::shared_ptr<http::BodyBudget> budget_;
  std::unique_ptr<GrpcServer> server_;
};

// Issue 49's first attack: prefixes announcing large messages with nothing after them held the
// whole budget. Now a message holds what has arrived of it.
TEST_F(GrpcLimitsTest, AnnouncedLengthsReserveNothingOfTheBudget) {
  start(off(), 1024 * 1024);
  RawPeer hostile(server_->port());
  std::vector<int32_t> ids;
  for (int i = 0; i < 16; ++i) {
    ids.push_back(hostile.open("/test.Hold/Hold", grpc_prefix(0, 1000 * 1000), false));
  }
  ASSERT_TRUE(hostile.pump([&] { return server_->open_calls() == 16; }));
  EXPECT_LE(budget_->held(), 16u * 5) << "16 announcements of 1 MB hold their prefixes only";
  EXPECT_EQ(echo(200 * 1024), "0") << "another client's message still fits";
  EXPECT_EQ(server_->counters().messages_over_budget.load(), 0u);
}

// One connection's streams, each sending most of a message, stop at its share of the budget;
// another connection's message still fits.
TEST_F(GrpcLimitsTest, OneConnectionHoldsAtMostItsShareOfTheBudget) {
  GrpcLimits l = off();
  l.connection_budget_share = 0.25;
  start(l, 1024 * 1024, 64 * 1024);
  RawPeer hostile(server_->port());
  for (int i = 0; i < 8; ++i) {  // 8 x 60 KiB of 64-KiB messages: 480 KiB against a 256-KiB share
    hostile.open("/test.Hold/Hold", grpc_prefix(0, 64 * 1024) + std::string(60 * 1024, 'h'), false);
  }
  ASSERT_TRUE(hostile.pump([&] { return server_->counters().messages_over_budget.load() >= 4; }))
      << "over its share: " << server_->counters().messages_over_budget.load();
  EXPECT_LE(budget_->held(), 256u * 1024);
  EXPECT_EQ(echo(60 * 1024), "0");
  // The refused streams ended with RESOURCE_EXHAUSTED.
  ASSERT_TRUE(hostile.pump([&] { return hostile.closed.size() >= 4; }));
  int exhausted = 0;
  for (const auto& [id, f] : hostile.fields) {
    exhausted += f.count("grpc-status") > 0 && f.at("grpc-status") == "8" ? 1 : 0;
  }
  EXPECT_GE(exhausted, 4);
}

TEST_F(GrpcLimitsTest, APeerThatSendsNothingOrOnlyThePrefaceIsClosedAfterTheHandshakeTimeout) {
  start(off(), 0, 4 * 1024 * 1024, std::chrono::milliseconds(200));
  RawPeer silent(server_->port(), RawPeer::Open::kNothing);
  RawPeer preface_only(server_->port(), RawPeer::Open::kPrefaceOnly);
  ASSERT_TRUE(silent.connected() && preface_only.connected());
  EXPECT_TRUE(silent.wait_closed());
  EXPECT_TRUE(preface_only.wait_closed()) << "the preface without SETTINGS is no handshake";
  EXPECT_EQ(server_->counters().handshake_timeouts.load(), 2u);
}

TEST_F(GrpcLimitsTest, AConnectionWithNoStreamGetsGoawayAfterTheIdleTimeout) {
  GrpcLimits l = off();
  l.idle_timeout = std::chrono::milliseconds(200);
  start(l);
  RawPeer idle(server_->port());
  EXPECT_TRUE(idle.wait_closed());
  EXPECT_TRUE(idle.goaway);
  EXPECT_EQ(server_->counters().idle_closes.load(), 1u);
  // A connection with a stream open is not idle; once the stream ends it is.
  RawPeer busy(server_->port());
  const int32_t id = busy.open("/test.Hold/Hold", "", false);
  ASSERT_TRUE(busy.pump([&] { return server_->open_calls() == 1; }));
  busy.pump([] { return false; }, std::chrono::milliseconds(600));
  EXPECT_FALSE(busy.eof) << "closed with a stream open";
  EXPECT_EQ(busy.closed.count(id), 0u);
}

TEST_F(GrpcLimitsTest, AStreamWithNoFrameForTheStreamIdleTimeoutIsCancelled) {
  GrpcLimits l = off();
  l.stream_idle_timeout = std::chrono::milliseconds(200);
  start(l);
  RawPeer peer(server_->port());
  const int32_t id = peer.open("/test.Hold/Hold", grpc_prefix(0, 100), false);
  ASSERT_TRUE(peer.pump([&] { return peer.closed.count(id) > 0; }));
  EXPECT_EQ(peer.closed[id], static_cast<uint32_t>(NGHTTP2_CANCEL));
  EXPECT_FALSE(peer.eof) << "the connection stays";
  EXPECT_EQ(server_->counters().stream_idle_resets.load(), 1u);
  ASSERT_TRUE(peer.pump([&] { return server_->open_calls() == 0; })) << "the call ended";
}

TEST_F(GrpcLimitsTest, AHeaderBlockOverTheAdvertisedListSizeResetsItsStreamOnly) {
  GrpcLimits l = off();
  l.max_header_list_bytes = 4096;
  start(l);
  RawPeer peer(server_->port());
  const int32_t big =
      peer.open("/test.Echo/Echo", "", true, {{"x-padding", std::string(8000, 'p')}});
  ASSERT_TRUE(peer.pump([&] { return peer.closed.count(big) > 0; }));
  EXPECT_NE(peer.closed[big], 0u) << "reset, not answered";
  EXPECT_EQ(server_->counters().header_list_resets.load(), 1u);
  std::string body;
  append_message(body, "fine");
  const int32_t small = peer.open("/test.Echo/Echo", body, true);
  ASSERT_TRUE(peer.pump([&] { return peer.closed.count(small) > 0; }));
  EXPECT_EQ(peer.fields[small]["grpc-status"], "0") << "the connection serves on";
}

TEST_F(GrpcLimitsTest, AConnectionPastItsMaxAgeGetsGoawayItsStreamsFinishThenItCloses) {
  GrpcLimits l = off();
  l.max_connection_age = std::chrono::milliseconds(200);
  l.max_connection_age_grace = std::chrono::milliseconds(300);
  start(l);
  RawPeer peer(server_->port());
  const int32_t held = peer.open("/test.Hold/Hold", "", false);
  ASSERT_TRUE(peer.pump([&] { return peer.goaway; }));
  EXPECT_FALSE(peer.eof) << "the grace lets its stream finish";
  EXPECT_EQ(server_->counters().age_closes.load(), 1u);
  EXPECT_TRUE(peer.wait_closed()) << "closed after the grace";
  (void)held;
  ASSERT_TRUE(peer.pump([&] { return server_->open_calls() == 0; }) || server_->open_calls() == 0);
}

// A peer that stops reading (gone without a FIN) gets a PING after the keepalive interval and is
// closed when nothing comes back; one that answers stays.
TEST_F(GrpcLimitsTest, APeerThatAnswersNoPingIsClosedAndOneThatAnswersStays) {
  GrpcLimits l = off();
  l.keepalive_interval = std::chrono::milliseconds(200);
  l.keepalive_timeout = std::chrono::milliseconds(200);
  start(l);
  RawPeer gone(server_->port());
  RawPeer alive(server_->port());
  gone.pump([] { return false; }, std::chrono::milliseconds(50));  // the handshake, then silence
  ASSERT_FALSE(gone.eof);
  // `alive` reads and answers PINGs (nghttp2 acknowledges them) for five intervals and more.
  alive.pump([] { return false; }, std::chrono::milliseconds(1200));
  EXPECT_FALSE(alive.eof) << "an answering peer was closed";
  // `gone` read nothing meanwhile: the server has given up on it.
  EXPECT_TRUE(gone.wait_closed());
  EXPECT_EQ(server_->counters().keepalive_timeouts.load(), 1u);
}

// Issue 49's fourth attack: a peer that reads none of its responses kept sending, and every
// echoed byte stayed in the EPP. Now its window stays shut once a stream has more than its
// buffer limit queued: it sends at most that and one window (4 MiB) more; the connection serves
// other streams meanwhile, and once the peer reads, every byte arrives.
TEST_F(GrpcLimitsTest, APeerThatReadsNothingSendsAtMostItsBufferAndOneWindow) {
  GrpcLimits l = off();
  l.stream_buffer_bytes = 256 * 1024;
  l.connection_buffer_bytes = 1u << 30;
  start(l);
  RawPeer deaf(server_->port(), RawPeer::Open::kHandshake, 0);
  std::string body;
  const std::string chunk(64 * 1024, 'd');
  for (int i = 0; i < 256; ++i) {  // 16 MiB of echoes
    append_message(body, chunk);
  }
  const std::size_t total = body.size();
  const int32_t id = deaf.open("/test.Echo/Echo", body, true);
  ASSERT_TRUE(deaf.send_until_stuck(id, [&] { return deaf.sent(0) == total; }));
  const std::size_t window = 4 * 1024 * 1024;
  EXPECT_LE(deaf.sent(0), l.stream_buffer_bytes + window + 2 * 65 * 1024)
      << "sent " << deaf.sent(0) << " of " << total << " with no byte read";
  EXPECT_GE(server_->counters().stream_input_pauses.load(), 1u);
  // The shut window is this stream's only: another on the same connection is served.
  std::string hello;
  append_message(hello, "hello");
  const int32_t other = deaf.open("/test.Echo/Echo", hello, true);
  ASSERT_TRUE(deaf.pump([&] { return deaf.fields[other].count(":status") > 0; }));
  EXPECT_EQ(echo(1000), "0") << "another connection is served";
  deaf.open_windows();
  ASSERT_TRUE(deaf.pump([&] { return deaf.closed.count(id) > 0; }, std::chrono::seconds(60)));
  EXPECT_EQ(deaf.fields[id]["grpc-status"], "0");
  EXPECT_EQ(deaf.data[id].size(), total) << "every echo arrives once the peer reads";
}

// The same for a connection's streams together: over the connection's limit none gets more.
TEST_F(GrpcLimitsTest, AConnectionOverItsBufferLimitGetsNoMoreOnAnyStream) {
  GrpcLimits l = off();
  l.stream_buffer_bytes = 1u << 30;
  l.connection_buffer_bytes = 512 * 1024;
  start(l);
  RawPeer deaf(server_->port(), RawPeer::Open::kHandshake, 0);
  std::string body;
  const std::string chunk(64 * 1024, 'd');
  for (int i = 0; i < 128; ++i) {  // 8 MiB per stream
    append_message(body, chunk);
  }
  std::vector<int32_t> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(deaf.open("/test.Echo/Echo", body, true));
  }
  const auto sent_now = [&] {
    std::size_t n = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      n += deaf.sent(i);
    }
    return n;
  };
  ASSERT_TRUE(deaf.send_until_stuck(ids[0], [&] { return sent_now() == 8 * body.size(); }));
  const std::size_t sent = sent_now();
  const std::size_t connection_window = 16 * 1024 * 1024;
  EXPECT_LE(sent, l.connection_buffer_bytes + connection_window + 8 * 65 * 1024)
      << "sent " << sent << " of " << 8 * body.size();
  EXPECT_GE(server_->counters().connection_input_pauses.load(), 1u);
  deaf.open_windows();
  ASSERT_TRUE(
      deaf.pump([&] { return deaf.closed.size() == ids.size(); }, std::chrono::seconds(60)));
  for (const int32_t id : ids) {
    EXPECT_EQ(deaf.data[id].size(), body.size()) << "stream " << id;
  }
}

}  // namespace
}  // namespace llmd::epp::extproc
