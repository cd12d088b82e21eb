// Gateway mode end to end: the real EPP with --ext-proc-port, and this test as the gateway.
// It speaks Envoy's ext_proc protocol over gRPC (the same message definitions, so the field
// numbers are Envoy's), forwards the request to the pod the EPP picked, streams the pod's
// response back through the response phase, and checks what the endpoint picker protocol
// promises: the destination header and the same value under envoy.lb metadata, the body passed
// on, refusals as immediate responses, gRPC health, and TTFT/TPOT samples reaching the trainer.
#include <grpcpp/grpcpp.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/http_test_util.h"
#include "tests/e2e/ext_proc_fixture.h"
#include "tests/e2e/fake_lease_api.h"

namespace llmd::testing {
namespace {

TEST_F(ExtProcStack, StreamedChatThroughTheGatewayPicksAPodAndFeedsTheTrainer) {
  start_gateway_mode();
  EXPECT_EQ(health("liveness"), grpc::health::v1::HealthCheckResponse::SERVING);
  // Readiness follows the pool (the EPP's /readyz answered, so pods are ready).
  for (int i = 0; i < 50 && health("readiness") != grpc::health::v1::HealthCheckResponse::SERVING;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(health("readiness"), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(health("envoy.service.ext_proc.v3.ExternalProcessor"),
            grpc::health::v1::HealthCheckResponse::SERVING);

  constexpr int kRequests = 6;
  std::set<std::string> pods;
  for (int i = 0; i < kRequests; ++i) {
    const std::string d = streamed_chat(words(20, "gw" + std::to_string(i)));
    ASSERT_FALSE(d.empty());
    pods.insert(d.substr(0, d.find(',')));
  }
  for (const auto& p : pods) {
    bool known = false;
    for (int i = 0; i < 4; ++i) {
      known = known || p == stack_->pod_address(i);
    }
    EXPECT_TRUE(known) << p << " is not a pod of the pool";
  }
  // One TTFT (first token) and one TPOT (end of stream) sample per request, as in proxy mode.
  for (int i = 0; i < 100 && (trainer_ingested(*stack_, "ttft") < kRequests ||
                              trainer_ingested(*stack_, "tpot") < kRequests);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(trainer_ingested(*stack_, "ttft"), kRequests);
  EXPECT_EQ(trainer_ingested(*stack_, "tpot"), kRequests);
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"200\""), kRequests);
  // In-flight bookkeeping went back to zero on every pod (no leaked tickets).
  EXPECT_EQ(metric_sum(m, "llmd_epp_pod_in_flight"), 0) << m.substr(0, 2000);
}

TEST_F(ExtProcStack, BufferedCompletionsGetThePickWithTheBodyAnswer) {
  start_gateway_mode();
  const std::string body =
      Json{{"model", stack_->model}, {"prompt", words(12, "buf")}, {"max_tokens", 4}}.dump();
  GatewayExchange x(*stub_);
  ASSERT_TRUE(x.send(request_headers("/v1/completions", false)));
  auto headers = x.receive();  // BUFFERED: the headers are answered before the body comes
  ASSERT_TRUE(headers && headers->has_request_headers());
  EXPECT_TRUE(headers->request_headers().response().header_mutation().set_headers().empty());
  ASSERT_TRUE(x.send(body_chunk(body, true)));
  auto answer = x.receive();
  ASSERT_TRUE(answer && answer->has_request_body()) << (answer ? answer->DebugString() : "");
  const std::string destination = mutation_value(
      answer->request_body().response().header_mutation(), "x-gateway-destination-endpoint");
  ASSERT_FALSE(destination.empty());
  EXPECT_EQ(lb_metadata(*answer, "x-gateway-destination-endpoint"), destination);
  auto pod = forward(destination, "/v1/completions", body);
  ASSERT_EQ(pod.status, 200) << pod.body;
  ASSERT_TRUE(x.send(response_headers(200, destination.substr(0, destination.find(',')))));
  ASSERT_TRUE(x.receive());
  ASSERT_TRUE(x.send(body_chunk(pod.body, true, true)));
  auto last = x.receive();
  ASSERT_TRUE(last && last->has_response_body());
  EXPECT_FALSE(last->response_body().response().has_body_mutation());  // passed on as is
  EXPECT_TRUE(x.finish().ok());
  EXPECT_EQ(metric_sum(stack_->metrics(), "llmd_epp_requests_total{code=\"200\""), 1);
}

// Gateway mode runs its streams on the EPP's workers, as the proxy runs its connections: a
// gateway connection lives on one worker, its streams' prediction calls go out and are answered
// there, and the pick continues on the same thread. The predictor client's own I/O thread stays
// idle, and the ext_proc streams need no threads of their own.
TEST_F(ExtProcStack, PredictionCallsRunOnTheEppWorkersInGatewayMode) {
  start_gateway_mode();
  auto one = [&](const std::string& text) {
    const std::string body =
        Json{{"model", stack_->model}, {"prompt", text}, {"max_tokens", 2}}.dump();
    GatewayExchange x(*stub_);
    EXPECT_TRUE(x.send(request_headers("/v1/completions", false)));
    EXPECT_TRUE(x.receive());
    EXPECT_TRUE(x.send(body_chunk(body, true)));
    auto answer = x.receive();
    EXPECT_TRUE(answer && answer->has_request_body());
    const std::string destination =
        answer ? mutation_value(answer->request_body().response().header_mutation(),
                                "x-gateway-destination-endpoint")
               : std::string();
    EXPECT_FALSE(destination.empty());
    auto pod = forward(destination, "/v1/completions", body);
    EXPECT_EQ(pod.status, 200) << pod.body;
    EXPECT_TRUE(x.send(response_headers(200, destination.substr(0, destination.find(',')))));
    EXPECT_TRUE(x.receive());
    EXPECT_TRUE(x.send(body_chunk(pod.body, true, true)));
    EXPECT_TRUE(x.receive());
    EXPECT_TRUE(x.finish().ok());
  };
  one(words(20, "warm"));
  const auto before = thread_switches(stack_->epp->pid());
  const std::string m0 = stack_->metrics();
  constexpr int kRequests = 40;
  for (int i = 0; i < kRequests; ++i) {
    one(words(20, "x" + std::to_string(i)));
  }
  const auto after = thread_switches(stack_->epp->pid());
  const std::string used = "llmd_epp_scheduling_predictions_total";
  EXPECT_GE(metric_value(stack_->metrics(), used, {"used=\"true\""}) -
                metric_value(m0, used, {"used=\"true\""}),
            kRequests);
  expect_prediction_calls_on_workers(before, after, kRequests);
}

// An open gateway stream is a request in progress (the ext_proc ingress of the gauge an
// operator watches during a drain), until its exchange ends.
TEST_F(ExtProcStack, AnOpenStreamIsARequestInProgressUntilItEnds) {
  start_gateway_mode();
  auto in_progress = [&](const std::string& ingress) {
    return metric_value(stack_->metrics(), "llmd_epp_requests_in_progress",
                        {"ingress=\"" + ingress + "\""});
  };
  EXPECT_EQ(in_progress("ext_proc"), 0);
  {
    GatewayExchange x(*stub_);
    ASSERT_TRUE(x.send(request_headers("/v1/completions", false)));
    ASSERT_TRUE(x.receive());  // BUFFERED: the headers are answered; the body has not come
    EXPECT_EQ(in_progress("ext_proc"), 1);
    EXPECT_EQ(in_progress("proxy"), 0);
    const std::string body =
        Json{{"model", stack_->model}, {"prompt", words(8, "open")}, {"max_tokens", 2}}.dump();
    ASSERT_TRUE(x.send(body_chunk(body, true)));
    auto answer = x.receive();
    ASSERT_TRUE(answer && answer->has_request_body());
    ASSERT_TRUE(x.send(response_headers(200, stack_->pod_address(0))));
    ASSERT_TRUE(x.receive());
    ASSERT_TRUE(x.send(body_chunk(R"({"choices":[]})", true, true)));
    ASSERT_TRUE(x.receive());
    EXPECT_TRUE(x.finish().ok());
  }
  double open = -1;
  for (int i = 0; i < 100 && (open = in_progress("ext_proc")) != 0; ++i) {  // hang guard: 10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(open, 0) << "the stream ended";
}

// x-llmd-debug (allowed by the flag) through the gateway: the decision comes back as a header
// mutation of the response headers, naming the pod the gateway was sent to.
TEST_F(ExtProcStack, TheDebugHeaderComesBackAsAResponseHeaderMutation) {
  StackOptions o;
  o.epp_args = {"--allow-debug-header", "true"};
  start_gateway_mode(o);
  const std::string body =
      Json{{"model", stack_->model}, {"prompt", words(12, "dbg")}, {"max_tokens", 4}}.dump();
  GatewayExchange x(*stub_);
  pb::ProcessingRequest headers = request_headers("/v1/completions", false);
  *headers.mutable_request_headers()->mutable_headers()->add_headers() =
      header("x-llmd-debug", "1");
  ASSERT_TRUE(x.send(headers));
  ASSERT_TRUE(x.receive());
  ASSERT_TRUE(x.send(body_chunk(body, true)));
  auto answer = x.receive();
  ASSERT_TRUE(answer && answer->has_request_body()) << (answer ? answer->DebugString() : "");
  const std::string destination = mutation_value(
      answer->request_body().response().header_mutation(), "x-gateway-destination-endpoint");
  const std::string primary = destination.substr(0, destination.find(','));
  auto pod = forward(destination, "/v1/completions", body);
  ASSERT_EQ(pod.status, 200) << pod.body;
  ASSERT_TRUE(x.send(response_headers(200, primary)));
  auto rh = x.receive();
  ASSERT_TRUE(rh && rh->has_response_headers());
  const std::string decision =
      mutation_value(rh->response_headers().response().header_mutation(), "x-llmd-decision");
  ASSERT_TRUE(decision.starts_with("pick=pod-")) << decision;
  const int picked = std::stoi(decision.substr(std::string_view("pick=pod-").size()));
  EXPECT_EQ(stack_->pod_address(picked), primary) << decision;
  for (int i = 0; i < 4; ++i) {
    EXPECT_NE(decision.find("pod-" + std::to_string(i) + ":"), std::string::npos) << decision;
  }
  ASSERT_TRUE(x.send(body_chunk(pod.body, true, true)));
  ASSERT_TRUE(x.receive());
  EXPECT_TRUE(x.finish().ok());

  // A refusal the scheduler decided (a subset hint naming no pod of the pool) carries it too.
  GatewayExchange refused(*stub_);
  pb::ProcessingRequest none = request_headers("/v1/completions", true, false, {"10.9.9.9:8000"});
  *none.mutable_request_headers()->mutable_headers()->add_headers() = header("x-llmd-debug", "1");
  ASSERT_TRUE(refused.send(none));
  ASSERT_TRUE(refused.send(body_chunk(body, true)));
  auto r = refused.receive();
  ASSERT_TRUE(r && r->has_immediate_response()) << (r ? r->DebugString() : "");
  EXPECT_EQ(r->immediate_response().status().code(), 503);
  const std::string why = mutation_value(r->immediate_response().headers(), "x-llmd-decision");
  EXPECT_TRUE(why.starts_with("outcome=no_candidates")) << why;
  EXPECT_NE(why.find("reason=\"no ready endpoints\""), std::string::npos) << why;
  refused.finish();
}

// A message the EPP cannot make sense of (it decodes to no known request: unknown fields of
// another protocol, or an empty message) ends the stream with an error status, not with OK
// and no response (the gateway would wait for one, then treat the exchange as a success).
TEST_F(ExtProcStack, UndecodableMessageEndsTheStreamWithAnError) {
  start_gateway_mode();
  GatewayExchange x(*stub_);
  pb::ProcessingRequest junk;
  // Field 999, a length-delimited blob: kept as an unknown field, no request set.
  junk.GetReflection()->MutableUnknownFields(&junk)->AddLengthDelimited(999, "\x01\x02garbage");
  ASSERT_TRUE(x.send(junk));
  EXPECT_FALSE(x.receive().has_value());
  const grpc::Status status = x.finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  // The server goes on serving well-formed exchanges.
  GatewayExchange ok(*stub_);
  ASSERT_TRUE(ok.send(request_headers("/v1/completions", true)));
  ASSERT_TRUE(ok.send(body_chunk("{\"prompt\": ", true)));
  auto r = ok.receive();
  ASSERT_TRUE(r && r->has_immediate_response());
  EXPECT_EQ(r->immediate_response().status().code(), 400);
  ok.finish();
}

TEST_F(ExtProcStack, RefusalsComeBackAsImmediateResponses) {
  start_gateway_mode();
  {
    // Not an OpenAI request body: 400 with the OpenAI error object.
    GatewayExchange x(*stub_);
    ASSERT_TRUE(x.send(request_headers("/v1/completions", true)));
    ASSERT_TRUE(x.send(body_chunk("{\"prompt\": ", true)));
    auto r = x.receive();
    ASSERT_TRUE(r && r->has_immediate_response()) << (r ? r->DebugString() : "");
    EXPECT_EQ(r->immediate_response().status().code(), 400);
    EXPECT_NE(r->immediate_response().body().find("\"error\""), std::string::npos);
    x.finish();
  }
  {
    // The gateway's subset hint names no pod of the pool: 503 (protocol), with Retry-After.
    GatewayExchange x(*stub_);
    ASSERT_TRUE(x.send(request_headers("/v1/completions", true, false, {"10.9.9.9:8000"})));
    const std::string body =
        Json{{"model", stack_->model}, {"prompt", "hello"}, {"max_tokens", 2}}.dump();
    ASSERT_TRUE(x.send(body_chunk(body, true)));
    auto r = x.receive();
    ASSERT_TRUE(r && r->has_immediate_response()) << (r ? r->DebugString() : "");
    EXPECT_EQ(r->immediate_response().status().code(), 503);
    EXPECT_EQ(mutation_value(r->immediate_response().headers(), "retry-after"), "1");
    x.finish();
  }
  {
    // A subset hint that names one pod is honoured.
    const std::string only = stack_->pod_address(2);
    GatewayExchange x(*stub_);
    ASSERT_TRUE(x.send(request_headers("/v1/completions", true, false, {only})));
    const std::string body =
        Json{{"model", stack_->model}, {"prompt", "subset"}, {"max_tokens", 2}}.dump();
    ASSERT_TRUE(x.send(body_chunk(body, true)));
    auto r = x.receive();
    ASSERT_TRUE(r && r->has_request_headers());
    EXPECT_EQ(mutation_value(r->request_headers().response().header_mutation(),
                             "x-gateway-destination-endpoint"),
              only);
  }
  const std::string m = stack_->metrics();
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"400\""), 1);
  EXPECT_EQ(metric_sum(m, "llmd_epp_requests_total{code=\"503\""), 1);
}

// The router queue holds a gateway request while the pool is saturated, refuses one more
// with 429 as an immediate response, and lets the waiting one through when a pod frees up.
TEST_F(ExtProcStack, RouterQueueWaitsRefusesWith429AndAdmitsWhenAPodFrees) {
  StackOptions o;
  o.pods = 1;
  o.predictors = 1;
  o.extra_config =
      "routerQueue:\n  policy: fcfs\n  routerQueueThreshold: {inFlightRequests: 1}\n"
      "  maxSize: 1\n  timeoutMs: 20000\n";
  start_gateway_mode(o);
  const std::string body =
      Json{{"model", stack_->model}, {"prompt", "queued"}, {"max_tokens", 2}}.dump();
  auto pick = [&](GatewayExchange& x) {
    EXPECT_TRUE(x.send(request_headers("/v1/completions", true)));
    EXPECT_TRUE(x.send(body_chunk(body, true)));
  };
  GatewayExchange first(*stub_);
  pick(first);
  auto a = first.receive();
  ASSERT_TRUE(a && a->has_request_headers()) << (a ? a->DebugString() : "");
  ASSERT_TRUE(first.receive());  // the body
  // The only pod now has one request in flight (its response has not ended): saturated.
  GatewayExchange second(*stub_);
  pick(second);
  std::optional<pb::ProcessingResponse> b;
  std::thread waiter([&] { b = second.receive(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(b.has_value()) << "the second request waits in the router queue";
  {
    GatewayExchange third(*stub_);
    pick(third);
    auto c = third.receive();
    ASSERT_TRUE(c && c->has_immediate_response()) << (c ? c->DebugString() : "");
    EXPECT_EQ(c->immediate_response().status().code(), 429);
    EXPECT_EQ(mutation_value(c->immediate_response().headers(), "retry-after"), "1");
    third.finish();
  }
  // The first response ends: its pod slot frees and the queued request gets its pick.
  ASSERT_TRUE(first.send(response_headers(200, stack_->pod_address(0))));
  ASSERT_TRUE(first.receive());
  ASSERT_TRUE(first.send(body_chunk("{\"choices\":[{\"text\":\"ok\"}]}", true, true)));
  ASSERT_TRUE(first.receive());
  EXPECT_TRUE(first.finish().ok());
  waiter.join();
  ASSERT_TRUE(b && b->has_request_headers()) << (b ? b->DebugString() : "");
  EXPECT_EQ(mutation_value(b->request_headers().response().header_mutation(),
                           "x-gateway-destination-endpoint"),
            stack_->pod_address(0));
  EXPECT_EQ(metric_sum(stack_->metrics(), "llmd_epp_requests_total{code=\"429\""), 1);
}

// Active-passive in gateway mode (--leader-elect): while another replica holds the Lease, this
// EPP's gRPC readiness is NOT_SERVING (Envoy and Kubernetes send it nothing) and a stream that
// reaches it anyway is refused with a 503 immediate response naming the leader; once it holds
// the Lease it is SERVING and picks.
TEST_F(ExtProcStack, AStandbyIsNotServingOverGrpcAndPicksOnceItLeads) {
  FakeLeaseApi api;
  TempDir dir;
  std::ofstream(dir.file("token")) << "gw\n";
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  o.epp_args = {"--kube-api-url",
                api.url(),
                "--kube-token-file",
                dir.file("token"),
                "--leader-elect",
                "true",
                "--leader-elect-identity",
                "epp-gw",
                "--leader-elect-lease-namespace",
                "llm"};
  o.startup["leaderElection.leaseDurationSeconds"] = "2";
  o.startup["leaderElection.renewDeadlineSeconds"] = "1.5";
  o.startup["leaderElection.retryPeriodSeconds"] = "0.3";
  start_gateway_mode(o);  // ready: it leads
  using Serving = grpc::health::v1::HealthCheckResponse;
  auto eventually = [&](const std::string& service, Serving::ServingStatus want) {
    for (int i = 0; i < 400 && health(service) != want; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return health(service) == want;
  };
  ASSERT_TRUE(eventually("readiness", Serving::SERVING));
  EXPECT_EQ(api.spec("llmd-epp")["holderIdentity"], "epp-gw");
  const std::string body =
      Json{{"model", stack_->model}, {"prompt", "leader"}, {"max_tokens", 2}}.dump();

  // Another replica's write lands between this EPP's read and its renewal, for an hour.
  api.write_before_next_update("gw", "epp-other", 3600);
  ASSERT_TRUE(eventually("readiness", Serving::NOT_SERVING)) << stack_->logs();
  EXPECT_EQ(health("liveness"), Serving::SERVING) << "a standby is alive, only not ready";
  {
    GatewayExchange x(*stub_);
    ASSERT_TRUE(x.send(request_headers("/v1/completions", true)));
    ASSERT_TRUE(x.send(body_chunk(body, true)));
    auto r = x.receive();
    ASSERT_TRUE(r && r->has_immediate_response()) << (r ? r->DebugString() : "");
    EXPECT_EQ(r->immediate_response().status().code(), 503);
    EXPECT_NE(r->immediate_response().body().find("the leader is epp-other"), std::string::npos)
        << r->immediate_response().body();
    x.finish();
  }

  // The other replica releases the Lease: this one takes it and picks again.
  api.release("llmd-epp");
  ASSERT_TRUE(eventually("readiness", Serving::SERVING)) << stack_->logs();
  EXPECT_EQ(api.spec("llmd-epp")["holderIdentity"], "epp-gw");
  GatewayExchange x(*stub_);
  ASSERT_TRUE(x.send(request_headers("/v1/completions", true)));
  ASSERT_TRUE(x.send(body_chunk(body, true)));
  auto r = x.receive();
  ASSERT_TRUE(r && r->has_request_headers()) << (r ? r->DebugString() : "");
  EXPECT_FALSE(mutation_value(r->request_headers().response().header_mutation(),
                              "x-gateway-destination-endpoint")
                   .empty());
}

// One request-body budget for both ingresses (--body-budget-bytes, 3 MiB here): while a
// gateway stream holds the first 2 MiB of a body it is still receiving (STREAMED: the chunk's
// answer says the EPP has it), a proxy request that announces 2 MiB is refused 503 +
// Retry-After before its body is read; once the gateway's request has its pick and ends, the
// proxy takes the same request again. With a budget per ingress the proxy would never refuse
// it.
TEST_F(ExtProcStack, TheProxyAndTheGatewayTakeFromOneBodyBudget) {
  StackOptions o;
  o.epp_args = {"--body-budget-bytes", std::to_string(3 * 1024 * 1024)};
  start_gateway_mode(o);
  const std::string body = Json{
      {"model", stack_->model},
      {"prompt", std::string(2 * 1024 * 1024, 'a')},
      {"max_tokens", 4}}.dump();
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: epp\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  // The proxy's answer to the request's headers alone: its status, or 0 while it waits for
  // the body (the proxy reserves the body's bytes when it reads the headers).
  auto proxy_status_before_the_body = [&] {
    http::testing::RawSocket sock(stack_->epp_port, /*recv_timeout_s=*/1);
    if (!sock.send_all(head)) {
      return -1;
    }
    const auto answer = sock.read_response();
    return answer ? std::stoi(answer->substr(9, 3)) : 0;
  };

  GatewayExchange gateway(*stub_);
  ASSERT_TRUE(gateway.send(request_headers("/v1/completions", /*full_duplex=*/false)));
  const auto headers = gateway.receive();
  ASSERT_TRUE(headers && headers->has_request_headers());
  ASSERT_TRUE(gateway.send(body_chunk(body.substr(0, 2 * 1024 * 1024), false)));
  const auto chunk = gateway.receive();
  ASSERT_TRUE(chunk && chunk->has_request_body()) << "STREAMED: the chunk is answered";
  EXPECT_EQ(proxy_status_before_the_body(), 503) << "the gateway's body holds 2 of the 3 MiB";
  const std::string budget_held = "llmd_epp_pool{stat=\"body_budget_held_bytes\"";
  EXPECT_GE(metric_sum(stack_->metrics(), budget_held), 2.0 * 1024 * 1024)
      << "an operator sees what holds the budget";

  ASSERT_TRUE(gateway.send(body_chunk(body.substr(2 * 1024 * 1024), true)));
  const auto pick = gateway.receive();
  EXPECT_TRUE(pick && pick->has_request_body()) << "the gateway's request gets its pick";
  gateway.finish();
  int status = 503;
  for (int i = 0; i < 20 && status == 503; ++i) {  // hang guard: the stream's end frees it
    status = proxy_status_before_the_body();
  }
  EXPECT_EQ(status, 0) << "the budget came back: the proxy waits for the body";
  double held = -1;
  for (int i = 0; i < 50 && held != 0; ++i) {  // hang guard: the last try's connection closes
    held = metric_sum(stack_->metrics(), budget_held);
    if (held != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_EQ(held, 0);
}

// A 1,024-descriptor limit and 1,100 idle connections to the ext_proc port: the EPP's gRPC
// server stops accepting at its connection cap (half the process's descriptor budget) instead
// of running out, the gateway's open connection keeps serving, the proxy and probe ports
// answer, and new connections are accepted once the idle ones are gone.
TEST_F(ExtProcStack, IdleConnectionsBeyondTheDescriptorLimitLeaveTheGatewayServing) {
  StackOptions o;
  o.pods = 2;
  o.epp_max_open_files = 1024;
  start_gateway_mode(o);
  std::vector<std::unique_ptr<http::testing::RawSocket>> idle;
  for (int i = 0; i < 1100; ++i) {
    idle.push_back(std::make_unique<http::testing::RawSocket>(ext_proc_port_, 1));
  }
  // Hang guard: the listener reaches its cap within a few hundred connections.
  const std::string at_cap = "grpc: the port's";
  for (int i = 0; i < 200 && stack_->epp->log().find(at_cap) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(stack_->epp->log().find(at_cap), std::string::npos) << stack_->epp->log();
  EXPECT_EQ(stack_->epp->log().find("connections hold the descriptors"), std::string::npos)
      << "the gateway port stopped at its cap, before the process budget";
  EXPECT_FALSE(streamed_chat("while the idle connections hold the budget").empty());
  EXPECT_EQ(stack_->complete(words(10, "proxy"), 2).status, 200)
      << "the proxy port still has descriptors";
  EXPECT_TRUE(stack_->epp->running()) << stack_->epp->log();
  // The probes' ports keep answering while the gRPC port's connections hold the budget: a
  // kubelet would not restart the pod.
  EXPECT_TRUE(stack_->epp->wait_http_ok(stack_->health_port, "/readyz", std::chrono::seconds(5)));
  EXPECT_TRUE(stack_->epp->wait_http_ok(stack_->metrics_port, "/metrics", std::chrono::seconds(5)));
  idle.clear();
  // A channel with a subchannel of its own: a new connection, not the gateway's.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto fresh = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(ext_proc_port_),
                                         grpc::InsecureChannelCredentials(), args);
  EXPECT_TRUE(fresh->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  auto stub = grpc::health::v1::Health::NewStub(fresh);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("liveness");
  grpc::health::v1::HealthCheckResponse res;
  EXPECT_TRUE(stub->Check(&ctx, req, &res).ok());
  EXPECT_EQ(res.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// The extProc.* start-up keys reach the gRPC port: a peer that did the HTTP/2 handshake and
// opens no stream is closed after extProc.idleTimeoutMs (a shutdown notice, then the last
// GOAWAY), and the EPP counts it in llmd_epp_ext_proc_limit_events_total.
TEST_F(ExtProcStack, TheExtProcIdleTimeoutFromTheConfigClosesAnIdlePeerAndIsCounted) {
  StackOptions o;
  o.pods = 2;
  o.startup["extProc.idleTimeoutMs"] = "300";
  o.startup["extProc.maxHeaderListBytes"] = "32768";
  start_gateway_mode(o);
  http::testing::RawSocket idle(ext_proc_port_, 20);  // receive timeout 20 s: a hang guard
  ASSERT_TRUE(idle.connected());
  // The client preface and an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
  ASSERT_TRUE(idle.send_all(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
                            std::string("\0\0\0\x04\0\0\0\0\0", 9)));
  EXPECT_TRUE(idle.wait_for_close()) << "the idle peer was not closed";
  double closes = 0;
  for (int i = 0; i < 100 && closes < 1; ++i) {  // hang guard: 10 s
    closes = metric_sum(stack_->metrics(),
                        "llmd_epp_ext_proc_limit_events_total{limit=\"idle_timeout\"}");
    if (closes < 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_GE(closes, 1) << stack_->metrics();
  // The gateway's own channel, idle as long, was closed the same way. grpc-core 1.51's client
  // then fails its first call with UNAVAILABLE ("Broken pipe") before reconnecting
  // (docs/discussion/gateway-hardening.md), which is why the idle timeout's default is Envoy's
  // hour; a new channel serves.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own connection, not the closed one's
  auto fresh = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(ext_proc_port_),
                                         grpc::InsecureChannelCredentials(), args);
  ASSERT_TRUE(fresh->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  stub_ = pb::ExternalProcessor::NewStub(fresh);
  EXPECT_FALSE(streamed_chat("a new connection after the idle close").empty());
}

}  // namespace
}  // namespace llmd::testing
