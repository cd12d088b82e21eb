// The EPP's own gRPC server (epp/extproc/grpc_server.cc) against the gRPC library's client, as
// a gateway and a health checker use it: the protocol's edges (unknown methods, health Check
// and Watch, a message over the limit, bytes that are not HTTP/2, many streams on one
// connection). The server is an ExtProcServer on a free port with a scheduling port that picks
// at once.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/http/body_budget.h"
#include "common/http/io_workers.h"
#include "epp/extproc/ext_proc_server.h"
#include "epp/extproc/byte_stream.h"
#include "epp/extproc/grpc_server.h"
#include "epp/extproc/health_service.h"
#include "epp/extproc/http1_probe.h"
#include "epp/extproc/external_processor.grpc.pb.h"
#include "tests/epp/extproc/buffered_exchange.h"
#include "tests/epp/extproc/pick_of_pod_a.h"
#include "tests/common/http_test_util.h"

namespace llmd::epp::extproc {
namespace {

using http::testing::connect_loopback;

// Picks pod "a" at once, on the calling thread.
class ImmediatePort final : public SchedulingPort {
 public:
  SchedulingGenerationPtr generation() override { return generation_; }
  Route route(const SchedulingRequest&, const SchedulingGeneration&) override { return {}; }
  void pick_async(const SchedulingRequest&, const Route&, const SchedulingGeneration&, Rng&, Resume,
                  std::function<void(PickResult)> done) override {
    done(testing::pick_of_pod_a());
  }
  void estimate_service_ms_async(const SchedulingRequest&, int64_t, Resume,
                                 std::function<void(double)> done) override {
    done(0);
  }

 private:
  SchedulingGenerationPtr generation_ = std::make_shared<const SchedulingGeneration>();
};

std::chrono::system_clock::time_point in(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

// One call through the library's generic stub on a completion queue, driven step by step.
class GenericCall {
 public:
  GenericCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method)
      : stub_(channel) {
    context_.set_deadline(in(std::chrono::seconds(30)));
    call_ = stub_.PrepareCall(&context_, method, &cq_);
    call_->StartCall(tag(1));
    EXPECT_TRUE(next(1));
  }
  ~GenericCall() {
    cq_.Shutdown();
    void* t = nullptr;
    bool ok = false;
    while (cq_.Next(&t, &ok)) {
    }
  }
  bool write(const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    call_->Write(buffer, tag(2));
    return next(2);
  }
  bool writes_done() {
    call_->WritesDone(tag(3));
    return next(3);
  }
  // The next message, or false when the stream ended or nothing came within `wait`.
  bool read(std::string& bytes, std::chrono::milliseconds wait = std::chrono::seconds(10)) {
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, tag(4));
    if (!next(4, wait)) {
      return false;
    }
    std::vector<grpc::Slice> slices;
    (void)buffer.Dump(&slices);
    bytes.clear();
    for (const auto& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return true;
  }
  void cancel() { context_.TryCancel(); }
  grpc::Status finish() {
    grpc::Status status;
    call_->Finish(&status, tag(5));
    next(5);
    return status;
  }

 private:
  static void* tag(intptr_t i) { return reinterpret_cast<void*>(i); }
  bool next(intptr_t expected, std::chrono::milliseconds wait = std::chrono::seconds(10)) {
    void* t = nullptr;
    bool ok = false;
    const auto r = cq_.AsyncNext(&t, &ok, in(wait));
    if (r != grpc::CompletionQueue::GOT_EVENT) {
      return false;
    }
    EXPECT_EQ(t, tag(expected));
    return ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

using http::testing::connect_loopback;

// Reads until the peer closes (true) or 10 s pass without it (false: a hang guard).
bool closed_by_peer(int fd) {
  timeval hang_guard{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hang_guard, sizeof(hang_guard));
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
  }
  return n == 0;
}

// grpc.health.v1 on the wire: HealthCheckRequest{service = 1}, HealthCheckResponse{status = 1}.
std::string health_request(const std::string& service) {
  return std::string{0x0a, static_cast<char>(service.size())} + service;
}
std::string health_status(int status) {
  return {0x08, static_cast<char>(status)};
}
constexpr int kServing = 1, kNotServing = 2, kServiceUnknown = 3;

class GrpcServerTest : public ::testing::Test {
 protected:
  void start(std::size_t body_limit = 16 * 1024 * 1024,
             std::shared_ptr<http::BodyBudget> body_budget = nullptr) {
    ExtProcServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.stream.body_limit = body_limit;
    options.body_budget = std::move(body_budget);
    server_ = std::make_unique<ExtProcServer>(options,
                                              ExtProcServices{&port_, nullptr, nullptr, nullptr});
    server_->start();
    channel_ = new_channel();
  }
  void TearDown() override {
    if (server_) {
      server_->shutdown(std::chrono::milliseconds(0));
    }
  }
  std::shared_ptr<grpc::Channel> new_channel() {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                               grpc::InsecureChannelCredentials());
  }
  // One buffered completion on `channel`: the pick comes back and the stream ends OK.
  static bool pick(const std::shared_ptr<grpc::Channel>& channel,
                   const std::string& json = R"({"model":"m","prompt":"hello"})") {
    testing::BufferedExchange x(channel);
    return x.headers() && x.body(json) == "10.0.0.1:8000" && x.finish().ok();
  }

  ImmediatePort port_;
  std::unique_ptr<ExtProcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcServerTest, AnUnknownMethodEndsWithUnimplemented) {
  start();
  GenericCall call(channel_, "/no.Such/Method");
  call.write("x");
  call.writes_done();
  const grpc::Status status = call.finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  EXPECT_TRUE(pick(channel_)) << "the connection serves on";
}

TEST_F(GrpcServerTest, HealthCheckAnswersEachServiceAndNotFoundForOthers) {
  start();
  auto check = [&](const std::string& service, std::string& answer) {
    GenericCall call(channel_, "/grpc.health.v1.Health/Check");
    call.write(health_request(service));
    call.writes_done();
    answer.clear();
    call.read(answer);
    return call.finish();
  };
  std::string answer;
  EXPECT_TRUE(check("liveness", answer).ok());
  EXPECT_EQ(answer, health_status(kServing));
  EXPECT_TRUE(check("readiness", answer).ok());
  EXPECT_EQ(answer, health_status(kNotServing)) << "not ready until the owner says so";
  server_->set_ready(true);
  EXPECT_TRUE(check("envoy.service.ext_proc.v3.ExternalProcessor", answer).ok());
  EXPECT_EQ(answer, health_status(kServing));
  EXPECT_EQ(check("no-such-service", answer).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcServerTest, HealthWatchSendsTheStatusNowAndThenEveryChange) {
  start();
  GenericCall watch(channel_, "/grpc.health.v1.Health/Watch");
  ASSERT_TRUE(watch.write(health_request("readiness")));
  ASSERT_TRUE(watch.writes_done());
  std::string answer;
  ASSERT_TRUE(watch.read(answer));
  EXPECT_EQ(answer, health_status(kNotServing));
  server_->set_ready(true);
  ASSERT_TRUE(watch.read(answer));
  EXPECT_EQ(answer, health_status(kServing));
  server_->set_ready(false);
  ASSERT_TRUE(watch.read(answer));
  EXPECT_EQ(answer, health_status(kNotServing));
  watch.cancel();
  EXPECT_EQ(watch.finish().error_code(), grpc::StatusCode::CANCELLED);

  GenericCall unknown(channel_, "/grpc.health.v1.Health/Watch");
  ASSERT_TRUE(unknown.write(health_request("no-such-service")));
  ASSERT_TRUE(unknown.read(answer));
  EXPECT_EQ(answer, health_status(kServiceUnknown)) << "a Watch of an unknown service stays open";
  unknown.cancel();
  unknown.finish();
}

TEST_F(GrpcServerTest, AMessageOverTheLimitEndsItsCallWithResourceExhausted) {
  start(/*body_limit=*/1024);  // messages up to 1 KiB + 64 KiB
  auto stub = pb::ExternalProcessor::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(in(std::chrono::seconds(30)));
  auto stream = stub->Process(&context);
  pb::ProcessingRequest body;
  body.mutable_request_body()->set_body(std::string(200 * 1024, 'x'));
  body.mutable_request_body()->set_end_of_stream(true);
  stream->Write(body);
  stream->WritesDone();
  pb::ProcessingResponse answer;
  while (stream->Read(&answer)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(pick(channel_)) << "the connection serves on";
}

// A BUFFERED body travels in one message: 12 MiB is three times the stream's flow-control
// window, so it arrives only if the server keeps opening the window as it reads.
TEST_F(GrpcServerTest, ABodyLargerThanTheFlowControlWindowsArrivesWhole) {
  start();
  const std::string prompt(12 * 1024 * 1024, 'x');
  EXPECT_TRUE(pick(channel_, R"({"model":"m","prompt":")" + prompt + R"("})"));
}

// The process's body budget covers gateway mode: a body that does not fit is refused as the
// proxy refuses it (503 + Retry-After, an ImmediateResponse the gateway sends to the client)
// without being read, and every byte taken is given back once the streams are done.
TEST_F(GrpcServerTest, ABodyOverTheBodyBudgetIsRefused503AndTheBudgetComesBack) {
  auto budget = std::make_shared<http::BodyBudget>(1024 * 1024);
  start(16 * 1024 * 1024, budget);
  {
    testing::BufferedExchange x(channel_);
    ASSERT_TRUE(x.headers());
    pb::ProcessingResponse answer;
    ASSERT_TRUE(x.send_body(
        R"({"model":"m","prompt":")" + std::string(2 * 1024 * 1024, 'x') + R"("})", answer));
    ASSERT_TRUE(answer.has_immediate_response()) << answer.DebugString();
    const auto& refusal = answer.immediate_response();
    EXPECT_EQ(refusal.status().code(), 503);
    bool retry_after = false;
    for (const auto& h : refusal.headers().set_headers()) {
      retry_after = retry_after || h.header().key() == "retry-after";
    }
    EXPECT_TRUE(retry_after);
    EXPECT_NE(refusal.body().find("budget"), std::string::npos) << refusal.body();
    EXPECT_TRUE(x.finish().ok());
  }
  EXPECT_TRUE(pick(channel_)) << "a body within the budget still gets its pick";
  EXPECT_TRUE(
      pick(channel_, R"({"model":"m","prompt":")" + std::string(512 * 1024, 'y') + R"("})"));
  EXPECT_EQ(budget->held(), 0u) << "every byte taken is given back";
}

TEST_F(GrpcServerTest, BytesThatAreNotHttp2CloseTheirConnectionOnly) {
  start();
  const int fd = connect_loopback(server_->port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  EXPECT_TRUE(closed_by_peer(fd)) << "the server closes the connection (not a timeout)";
  ::close(fd);
  EXPECT_TRUE(pick(channel_));
}

TEST_F(GrpcServerTest, ManyStreamsAtOnceOnOneConnectionAllGetTheirPick) {
  start();
  std::atomic<int> picked{0};
  std::vector<std::thread> gateways;
  for (int i = 0; i < 16; ++i) {
    gateways.emplace_back([&] {
      for (int j = 0; j < 10; ++j) {
        picked += pick(channel_) ? 1 : 0;
      }
    });
  }
  for (auto& t : gateways) {
    t.join();
  }
  EXPECT_EQ(picked.load(), 160);
  EXPECT_EQ(server_->active_streams(), 0);
}

// A drain: the listener closes and every connection gets a GOAWAY, but a call already open runs
// to its end (here: it sends its body after the shutdown began and still gets its pick).
TEST_F(GrpcServerTest, ShutdownLetsTheCallsInFlightFinishAndTakesNoNewConnections) {
  start();
  testing::BufferedExchange x(channel_);
  ASSERT_TRUE(x.headers());  // the call is open on the server

  std::thread stopper([&] { server_->shutdown(std::chrono::seconds(20)); });
  struct Join {
    std::thread& t;
    ~Join() { t.join(); }  // also when an assertion below ends the test
  } join{stopper};
  bool refused = false;
  for (int i = 0; i < 100 && !refused; ++i) {  // hang guard: the listener closes at once
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto fresh = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->port()),
                                           grpc::InsecureChannelCredentials(), args);
    refused = !fresh->WaitForConnected(in(std::chrono::milliseconds(100)));
  }
  EXPECT_TRUE(refused) << "new connections are not taken once the shutdown began";

  EXPECT_EQ(x.body(), "10.0.0.1:8000");
  EXPECT_TRUE(x.finish().ok());
  EXPECT_EQ(server_->active_streams(), 0);
}

// A connection that never sends a byte holds a descriptor of the process's budget: it is closed
// after the handshake timeout.
TEST(GrpcServerHandshake, AConnectionThatSendsNothingIsClosedAfterTheHandshakeTimeout) {
  http::IoWorkers workers(1, "test-grpc");  // outlives the server
  workers.start();
  {
    GrpcServerOptions options;
    options.host = "127.0.0.1";
    options.handshake_timeout = std::chrono::milliseconds(200);
    GrpcServer server(options, workers);
    server.start();
    const int fd = connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(closed_by_peer(fd));
    ::close(fd);
  }
  workers.stop();
}

}  // namespace
}  // namespace llmd::epp::extproc

namespace llmd::epp::extproc {
namespace {

// The health port: gRPC health and HTTP/1.1 probes on one GrpcServer (health_service.h,
// http1_probe.h), plain or over TLS.
class HealthPortTest : public ::testing::Test {
 protected:
  void start(bool tls = false) {
    GrpcServerOptions o;
    o.host = "127.0.0.1";
    o.take_descriptors = false;
    o.max_connections = 8;
    o.http1 = [](const std::string& method, const std::string& path) {
      return Http1Answer{path == "/healthz" ? 200 : 404, "application/json",
                         "{\"method\":\"" + method + "\"}"};
    };
    if (tls) {
      o.tls_context = tls_context_source("", "", false);
    }
    server_ = std::make_unique<GrpcServer>(o, workers_);
    health_.add_to(*server_);
    server_->start();
  }
  void TearDown() override {
    if (server_) {
      server_->shutdown(std::chrono::milliseconds(0));
    }
  }
  std::shared_ptr<grpc::Channel> channel() {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                               grpc::InsecureChannelCredentials());
  }
  // HealthCheckResponse.status of `service` (-1: the call failed, with its code in `code`).
  int check(const std::shared_ptr<grpc::Channel>& ch, const std::string& service,
            grpc::StatusCode* code = nullptr) {
    GenericCall call(ch, "/grpc.health.v1.Health/Check");
    call.write(health_request(service));
    call.writes_done();
    std::string bytes;
    const bool got = call.read(bytes);
    const grpc::Status status = call.finish();
    if (code != nullptr) {
      *code = status.error_code();
    }
    return got && status.ok() && bytes.size() == 2 ? bytes[1] : -1;
  }
  // The whole answer to `request` written on a fresh connection (the server closes it).
  std::string http1(const std::string& request) {
    const int fd = connect_loopback(server_->port());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    timeval hang_guard{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hang_guard, sizeof(hang_guard));
    std::string answer;
    char buffer[4096];
    ssize_t n = 0;
    while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) {
      answer.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return answer;
  }

  http::IoWorkers workers_{1, "test-health"};
  HealthService health_;
  std::unique_ptr<GrpcServer> server_;
};

TEST_F(HealthPortTest, UpstreamsOneReplicaAnswerEveryServiceFromOnePolicy) {
  start();
  health_.set_unknown(HealthService::Unknown::kNotServing);
  auto ch = channel();
  EXPECT_EQ(check(ch, "inference-extension"), kNotServing);
  health_.set_unknown(HealthService::Unknown::kServing);
  EXPECT_EQ(check(ch, "inference-extension"), kServing);
  EXPECT_EQ(check(ch, ""), kServing);
  EXPECT_EQ(check(ch, "anything"), kServing);
}

TEST_F(HealthPortTest, WithLeaderElectionUnknownNamesAreServiceUnknown) {
  start();
  health_.set_unknown(HealthService::Unknown::kServiceUnknown);
  health_.set("liveness", true);
  health_.set("readiness", false);
  auto ch = channel();
  EXPECT_EQ(check(ch, "liveness"), kServing);
  EXPECT_EQ(check(ch, "readiness"), kNotServing);
  EXPECT_EQ(check(ch, "inference-extension"), kServiceUnknown);
  health_.set_unknown(HealthService::Unknown::kNotFound);
  grpc::StatusCode code = grpc::StatusCode::OK;
  EXPECT_EQ(check(ch, "inference-extension", &code), -1);
  EXPECT_EQ(code, grpc::StatusCode::NOT_FOUND) << "gRPC's own health service's answer";
}

TEST_F(HealthPortTest, HttpProbesAreAnsweredOnTheSamePort) {
  start();
  const std::string ok = http1("GET /healthz?x=1 HTTP/1.1\r\nHost: pod\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Connection: close"), std::string::npos);
  EXPECT_NE(ok.find("{\"method\":\"GET\"}"), std::string::npos);
  const std::string head = http1("HEAD /healthz HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_EQ(head.find("{\"method\""), std::string::npos) << "no body to a HEAD";
  EXPECT_EQ(http1("GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(http1("POST /healthz HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(http1("garbage\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(http1("GET /" + std::string(9000, 'a')).rfind("HTTP/1.1 431", 0), 0u);
  // gRPC keeps working beside them.
  health_.set_unknown(HealthService::Unknown::kServing);
  EXPECT_EQ(check(channel(), "liveness"), kServing);
}

TEST_F(HealthPortTest, AStalledHttpProbeIsClosedByTheHandshakeTimeout) {
  GrpcServerOptions o;
  o.host = "127.0.0.1";
  o.handshake_timeout = std::chrono::milliseconds(200);
  o.http1 = [](const std::string&, const std::string&) { return Http1Answer{}; };
  server_ = std::make_unique<GrpcServer>(o, workers_);
  server_->start();
  const int fd = connect_loopback(server_->port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, "GET /he", 7, 0), 7);
  EXPECT_TRUE(closed_by_peer(fd));
  ::close(fd);
}

TEST_F(HealthPortTest, TlsWithH2ByAlpnAndASelfSignedCertificate) {
  start(/*tls=*/true);
  health_.set_unknown(HealthService::Unknown::kServing);
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_verify_server_certs(false);
  options.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  options.set_check_call_host(false);
  auto tls = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                 grpc::experimental::TlsCredentials(options));
  EXPECT_EQ(check(tls, "inference-extension"), kServing);
  // A plaintext client gets no answer from a TLS port.
  auto plain = channel();
  EXPECT_FALSE(plain->WaitForConnected(in(std::chrono::milliseconds(500))) &&
               check(plain, "inference-extension") == kServing);
}

TEST(Http1Probe, SniffsTheHttp2PrefaceByPrefix) {
  EXPECT_EQ(sniff_protocol("PRI * HT"), Protocol::kUndecided);
  EXPECT_EQ(sniff_protocol(kHttp2Preface), Protocol::kHttp2);
  EXPECT_EQ(sniff_protocol("GET / HTTP/1.1"), Protocol::kHttp1);
  EXPECT_EQ(sniff_protocol("P"), Protocol::kUndecided);
  EXPECT_EQ(sniff_protocol("PUT"), Protocol::kHttp1);
  EXPECT_FALSE(
      answer_http1("GET /healthz HTTP/1.1\r\n", [](auto&, auto&) { return Http1Answer{}; }));
}

}  // namespace
}  // namespace llmd::epp::extproc
