// An upstream user's deployment, run as the cluster would run it: the epp container of the
// GIE v1.5.0 inferencepool chart, and of llm-d-router's llm-d-router-gateway chart, with the
// latency predictor on, rendered into committed fixtures (tests/fixtures/upstream/), with our
// image's environment (deploy/docker/epp.Dockerfile's ENV) and the chart's args, env and ConfigMap
// unchanged but for the ports (free loopback ports instead of 9002/9003/9090/8000/8001) and the
// addresses (loopback instead of the pod's), next to the chart's trainer and predictor
// containers started with exactly their env (tests/e2e/charts/). A fake API server serves the
// chart's InferencePool and two modelsim pods. Nothing is rendered here: the fixtures are read
// as they are.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "common/http/stream_server.h"
#include "epp/extproc/external_processor.grpc.pb.h"
#include "tests/e2e/grpc_health_client.h"
#include "tests/common/http_test_util.h"
#include "tests/e2e/chart_containers.h"
#include "tests/e2e/stack_fixture.h"
#include "tests/epp/extproc/ext_proc_messages.h"
#include "tests/support/process.h"

namespace llmd::testing {
namespace {

using Json = nlohmann::json;
namespace pb = envoy::service::ext_proc::v3;
using Serving = grpc::health::v1::HealthCheckResponse;

std::string fixture(const std::string& name) {
  return std::string(LLMD_SOURCE_DIR) + "/tests/fixtures/upstream/" + name;
}
constexpr char kPool[] = "vllm-llama3-8b-instruct";

// The chart's rendered documents, as helm would apply them.
struct Chart {
  YAML::Node epp, config_map;
  explicit Chart(const std::string& path) {
    for (const YAML::Node& doc : YAML::LoadAllFromFile(path)) {
      if (!doc.IsMap()) {
        continue;
      }
      const std::string kind = doc["kind"].as<std::string>("");
      const std::string name = doc["metadata"]["name"].as<std::string>("");
      if (kind == "Deployment") {
        for (const YAML::Node& c : doc["spec"]["template"]["spec"]["containers"]) {
          if (c["name"].as<std::string>() == "epp") {
            epp = c;
          }
        }
      } else if (kind == "ConfigMap" && name == std::string(kPool) + "-epp") {
        config_map = doc;
      }
    }
  }
  std::vector<std::string> args() const {
    std::vector<std::string> out;
    for (const YAML::Node& a : epp["args"]) {
      out.push_back(a.as<std::string>());
    }
    return out;
  }
  // name -> value; fieldRefs resolved as the kubelet would for a pod "<pool>-epp-7d9f-abcde".
  std::map<std::string, std::string> env() const {
    std::map<std::string, std::string> out;
    for (const YAML::Node& e : epp["env"]) {
      const std::string name = e["name"].as<std::string>();
      if (e["value"]) {
        out[name] = e["value"].as<std::string>();
      } else if (e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>("") ==
                 "metadata.namespace") {
        out[name] = "default";
      } else {
        out[name] = std::string(kPool) + "-epp-7d9f-abcde";
      }
    }
    return out;
  }
};

// Our image's ENV lines (the deployment defaults an upstream chart relies on).
std::map<std::string, std::string> image_env() {
  std::ifstream in(std::string(LLMD_SOURCE_DIR) + "/deploy/docker/epp.Dockerfile");
  std::map<std::string, std::string> out;
  std::string line;
  const std::regex pair(R"(([A-Z_][A-Z0-9_]*)=(\S+))");
  while (std::getline(in, line)) {
    if (line.rfind("ENV ", 0) != 0) {
      continue;
    }
    for (std::sregex_iterator it(line.begin(), line.end(), pair), end; it != end; ++it) {
      out[(*it)[1]] = (*it)[2];
    }
  }
  return out;
}

std::string replace_port(std::string s, uint16_t from, uint16_t to) {
  return std::regex_replace(s, std::regex(":" + std::to_string(from) + "\\b"),
                            ":" + std::to_string(to));
}

// The API server: the chart's v1 InferencePool in "default" and its pods; watches stay open
// and silent. TokenReview/SubjectAccessReview: token "prometheus" is allowed /metrics, token
// "nobody" is a user without the right, anything else is no user.
class FakeKubeApi {
 public:
  FakeKubeApi(uint16_t target_port, std::vector<std::string> pod_ips)
      : target_port_(target_port), pod_ips_(std::move(pod_ips)) {
    server_ = std::make_unique<http::testing::RunningStreamServer>(
        [this](std::size_t, http::Request&& req, http::ResponseStreamPtr stream) {
          handle(std::move(req), std::move(stream));
        });
  }
  ~FakeKubeApi() {
    std::lock_guard lock(mu_);
    watches_.clear();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

 private:
  void handle(http::Request&& req, http::ResponseStreamPtr stream) {
    const std::string pools =
        "/apis/inference.networking.k8s.io/v1/namespaces/default/"
        "inferencepools";
    if (req.path == pools + "/" + kPool) {
      stream->respond(http::Response::json(200, pool()));
    } else if ((req.path == pools || req.path == "/api/v1/namespaces/default/pods") &&
               req.query.find("watch=1") != std::string::npos) {
      stream->begin_stream(200, "application/json", {});
      std::lock_guard lock(mu_);
      watches_.push_back(std::move(stream));
    } else if (req.path == "/api/v1/namespaces/default/pods") {
      stream->respond(http::Response::json(200, pods()));
    } else if (req.path == "/apis/authentication.k8s.io/v1/tokenreviews") {
      const std::string token = Json::parse(req.body)["spec"].value("token", "");
      const bool known = token == "prometheus" || token == "nobody";
      Json status = {{"authenticated", known}};
      if (known) {
        status["user"] = {{"username", "system:serviceaccount:monitoring:" + token},
                          {"groups", {"system:serviceaccounts"}}};
      }
      stream->respond(http::Response::json(201, {{"status", status}}));
    } else if (req.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews") {
      const Json spec = Json::parse(req.body)["spec"];
      const bool allowed =
          spec.value("user", "") == "system:serviceaccount:monitoring:prometheus" &&
          spec["nonResourceAttributes"].value("path", "") == "/metrics" &&
          spec["nonResourceAttributes"].value("verb", "") == "get";
      stream->respond(http::Response::json(201, {{"status", {{"allowed", allowed}}}}));
    } else {
      stream->respond(http::Response::detail(404, "not found: " + req.path));
    }
  }
  Json pool() const {
    return {{"apiVersion", "inference.networking.k8s.io/v1"},
            {"kind", "InferencePool"},
            {"metadata", {{"name", kPool}, {"namespace", "default"}, {"resourceVersion", "1"}}},
            {"spec",
             {{"selector", {{"matchLabels", {{"app", kPool}}}}},
              {"targetPorts", Json::array({{{"number", target_port_}}})}}}};
  }
  Json pods() const {
    Json items = Json::array();
    for (std::size_t i = 0; i < pod_ips_.size(); ++i) {
      items.push_back({{"metadata",
                        {{"name", "vllm-" + std::to_string(i)},
                         {"namespace", "default"},
                         {"resourceVersion", std::to_string(10 + i)},
                         {"labels", {{"app", kPool}}}}},
                       {"status",
                        {{"phase", "Running"},
                         {"podIP", pod_ips_[i]},
                         {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}});
    }
    return {{"kind", "PodList"}, {"metadata", {{"resourceVersion", "20"}}}, {"items", items}};
  }

  const uint16_t target_port_;
  const std::vector<std::string> pod_ips_;
  std::mutex mu_;
  std::vector<http::ResponseStreamPtr> watches_;                // guarded by mu_
  std::unique_ptr<http::testing::RunningStreamServer> server_;  // last: stopped first
};

// A TLS channel as Envoy opens one to an EPP with a self-signed certificate: h2 by ALPN, the
// server's certificate not verified.
std::shared_ptr<grpc::Channel> tls_channel(uint16_t port) {
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_verify_server_certs(false);
  options.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  options.set_check_call_host(false);
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                             grpc::experimental::TlsCredentials(options));
}

// The parameter: a rendered chart under tests/fixtures/upstream/.
class UpstreamChart : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(chart_.epp) << "no epp container in " << GetParam();
    ASSERT_TRUE(chart_.config_map) << "no plugins ConfigMap in " << GetParam();
    pod_port_ = free_port();
    for (const char* ip : {"127.0.0.2", "127.0.0.3"}) {
      pods_.push_back(std::make_unique<Process>(
          binary("bench/modelsim/modelsim"),
          std::vector<std::string>{"--pods", "1", "--base-port", std::to_string(pod_port_),
                                   "--host", ip}));
    }
    api_ = std::make_unique<FakeKubeApi>(pod_port_,
                                         std::vector<std::string>{"127.0.0.2", "127.0.0.3"});
    // The chart's sidecars with exactly their env (tests/e2e/charts/, the same renders).
    sidecars_ = read_chart_containers(
        std::string(LLMD_SOURCE_DIR) + "/tests/e2e/charts/" +
        (GetParam().rfind("gie", 0) == 0 ? "gie-v1.5.0.txt" : "llm-d-router-ebab687.txt"));
    for (const auto& c : sidecars_) {
      sidecar_ports_[c.port] = free_port();
      for (const auto& m : c.mounts) {
        mounts_[m] = dir_.path() + m;
        std::filesystem::create_directories(mounts_[m]);
      }
    }
    for (const auto& c : sidecars_) {
      sidecar_processes_.push_back(
          start_chart_container(c, sidecar_ports_, mounts_, {}, /*loopback=*/true));
      const bool up = sidecar_processes_.back()->wait_http_ok(
          static_cast<uint16_t>(sidecar_ports_.at(c.port)),
          c.image == "trainer" ? "/healthz" : "/readyz", std::chrono::seconds(45));
      ASSERT_TRUE(up) << c.name << ": " << sidecar_processes_.back()->log();
    }
  }

  // The epp container as the kubelet starts it, with `image_env_over` replacing image ENV.
  void start_epp(std::map<std::string, std::string> image_env_over = {}) {
    std::filesystem::create_directories(dir_.path() + "/config");
    for (const auto& kv : chart_.config_map["data"]) {
      std::ofstream(dir_.path() + "/config/" + kv.first.as<std::string>())
          << kv.second.as<std::string>();
    }
    // Ports remapped: where the chart names one its value is replaced, else (the EPP's default
    // 9002, 9003, 9090) it is added.
    std::map<std::string, std::string> ports = {
        {"--grpc-port", std::to_string(grpc_port_)},
        {"--grpc-health-port", std::to_string(health_port_)},
        {"--metrics-port", std::to_string(metrics_port_)}};
    std::vector<std::string> args;
    for (std::string a : chart_.args()) {
      if (a.rfind("/config/", 0) == 0) {
        a = dir_.path() + a;  // the ConfigMap's mount
      }
      if (!args.empty() && ports.count(args.back())) {
        a = ports[args.back()];
        ports.erase(args.back());
      }
      args.push_back(a);
    }
    for (const auto& [flag, port] : ports) {
      args.insert(args.end(), {flag, port});
    }
    std::map<std::string, std::string> env = image_env();
    for (auto& [k, v] : image_env_over) {
      env[k] = v;
    }
    env["EPP_HOST"] = "127.0.0.1";  // the pod's address: loopback here
    env["EPP_PORT"] = std::to_string(proxy_port_);
    for (auto [k, v] : chart_.env()) {
      for (const auto& [from, to] : sidecar_ports_) {
        v = replace_port(v, static_cast<uint16_t>(from), static_cast<uint16_t>(to));
      }
      env[k] = v;
    }
    // The cluster's side: where the API server is, the service account's token.
    std::ofstream(dir_.path() + "/token") << "epp-token\n";
    env["EPP_KUBE_API_URL"] = api_->url();
    env["EPP_KUBE_TOKEN_FILE"] = dir_.path() + "/token";
    std::vector<std::string> env_list;
    for (const auto& [k, v] : env) {
      env_list.push_back(k + "=" + v);
    }
    epp_ = std::make_unique<Process>(binary("epp/epp"), args, env_list);
  }

  bool wait_serving(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
    for (int i = 0; i < 300 && epp_->running(); ++i) {
      if (grpc_health(channel, service) == Serving::SERVING) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  Chart chart_{fixture(GetParam())};
  TempDir dir_;
  uint16_t pod_port_ = 0;
  uint16_t grpc_port_ = free_port(), health_port_ = free_port(), metrics_port_ = free_port(),
           proxy_port_ = free_port();
  std::vector<std::unique_ptr<Process>> pods_;
  std::unique_ptr<FakeKubeApi> api_;
  std::vector<ChartContainer> sidecars_;
  std::map<int, int> sidecar_ports_;  // the chart's port -> a free one
  std::map<std::string, std::string> mounts_;
  std::vector<std::unique_ptr<Process>> sidecar_processes_;
  std::unique_ptr<Process> epp_;
};

TEST_P(UpstreamChart, TheChartRunsOurEpp) {
  start_epp();
  // The kubelet's probes: gRPC health on the health port, service inference-extension.
  auto health_channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(health_port_),
                                            grpc::InsecureChannelCredentials());
  ASSERT_TRUE(wait_serving(health_channel, "inference-extension")) << epp_->log();
  EXPECT_EQ(grpc_health(health_channel, ""), Serving::SERVING);
  EXPECT_TRUE(epp_->wait_http_ok(health_port_, "/readyz")) << "our own HTTP probe, same port";

  // Envoy's ext_proc over TLS (secure serving is upstream's default, and our image's): one
  // request is routed to a pod of the pool.
  auto channel = tls_channel(grpc_port_);
  ASSERT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)))
      << epp_->log();
  auto stub = pb::ExternalProcessor::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Process(&ctx);
  pb::ProcessingRequest headers;
  auto* h = headers.mutable_request_headers();
  *h->mutable_headers()->add_headers() = header(":method", "POST");
  *h->mutable_headers()->add_headers() = header(":path", "/v1/completions");
  *h->mutable_headers()->add_headers() = header(":authority", "gateway.local");
  *h->mutable_headers()->add_headers() = header("content-type", "application/json");
  *h->mutable_headers()->add_headers() = header("x-llm-d-slo-ttft-ms", "5000");
  ASSERT_TRUE(stream->Write(headers));
  pb::ProcessingRequest body;
  body.mutable_request_body()->set_body(Json{
      {"model", "meta-llama/Llama-3.1-8B-Instruct"},
      {"prompt", "hello there"},
      {"max_tokens", 4}}.dump());
  body.mutable_request_body()->set_end_of_stream(true);
  ASSERT_TRUE(stream->Write(body));
  std::string destination;
  pb::ProcessingResponse r;
  while (destination.empty() && stream->Read(&r)) {
    const auto& mutation = r.has_request_body() ? r.request_body().response().header_mutation()
                           : r.has_request_headers()
                               ? r.request_headers().response().header_mutation()
                               : pb::HeaderMutation();
    for (const auto& set : mutation.set_headers()) {
      if (set.header().key() == "x-gateway-destination-endpoint") {
        destination =
            set.header().raw_value().empty() ? set.header().value() : set.header().raw_value();
      }
    }
  }
  stream->WritesDone();
  // The pick, then the fallbacks Envoy may try next (upstream's comma list).
  const std::string picked = destination.substr(0, destination.find(','));
  EXPECT_TRUE(picked == "127.0.0.2:" + std::to_string(pod_port_) ||
              picked == "127.0.0.3:" + std::to_string(pod_port_))
      << "picked '" << destination << "'; " << epp_->log();

  // The chart's config trains on requests that do not stream (streamingMode: upstream's
  // default, false): TTFT := end-to-end latency.
  http::HttpClient client("127.0.0.1", proxy_port_, std::chrono::seconds(30));
  for (int i = 0; i < 6; ++i) {
    auto res = client.post("/v1/completions", Json{{"model", "meta-llama/Llama-3.1-8B-Instruct"},
                                                   {"prompt", "sample " + std::to_string(i)},
                                                   {"max_tokens", 3}}
                                                  .dump());
    ASSERT_EQ(res.status, 200) << res.body << epp_->log();
  }
  // The chart leaves --metrics-endpoint-auth to upstream's default (on): Prometheus sends its
  // service account's token.
  http::HttpClient metrics("127.0.0.1", metrics_port_, std::chrono::seconds(5));
  double acknowledged = 0;
  for (int i = 0; i < 200 && acknowledged < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    acknowledged = metric_sum(
        metrics.request("GET", "/metrics", "", "", {{"authorization", "Bearer prometheus"}}).body,
        "llmd_epp_feedback_samples_acknowledged_total");
  }
  EXPECT_GE(acknowledged, 6) << "non-streamed requests must train with the chart's config";

  // GIE's stock dashboard finds its EPP series under GIE's names (the flow-control ones need a
  // router queue, which the chart's config has none of).
  const std::string exposition =
      metrics.request("GET", "/metrics", "", "", {{"authorization", "Bearer prometheus"}}).body;
  std::ifstream names(std::string(LLMD_SOURCE_DIR) +
                      "/tests/fixtures/upstream/gie-v1.5.0/dashboard-epp-metrics.txt");
  int checked = 0;
  for (std::string name; std::getline(names, name);) {
    // (An error counter has a series once a request failed, as a Go CounterVec has.)
    if (name.empty() || name[0] == '#' || name.find("flow_control") != std::string::npos ||
        name.find("error_total") != std::string::npos) {
      continue;
    }
    EXPECT_NE(exposition.find("\n" + name), std::string::npos) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 9) << "the dashboard list: 18 names, 8 flow control, 1 error counter";
  EXPECT_NE(exposition.find("\ninference_extension_info{"), std::string::npos);

  // --zap-encoder json: every line the EPP wrote is a JSON object with zap's keys.
  int lines = 0;
  std::istringstream log(epp_->log());
  for (std::string line; std::getline(log, line);) {
    if (line.empty() || line.rfind("[process]", 0) == 0) {
      continue;
    }
    const Json j = Json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("level") && j.contains("ts") && j.contains("msg"))
        << "not a zap JSON line: " << line;
    ++lines;
  }
  EXPECT_GT(lines, 3);
  EXPECT_EQ(epp_->terminate(), 0) << epp_->log();
}

TEST_P(UpstreamChart, MetricsEndpointAuthAsControllerRuntimeDoesIt) {
  // The chart passes --metrics-endpoint-auth=false only with monitoring.prometheus.auth off;
  // by default it leaves the flag out and upstream's default (on; our image's) applies.
  for (const auto& a : chart_.args()) {
    ASSERT_EQ(a.rfind("--metrics-endpoint-auth", 0), std::string::npos) << a;
  }
  start_epp();
  ASSERT_TRUE(epp_->wait_http_ok(health_port_, "/healthz")) << epp_->log();
  auto scrape = [&](const std::string& token) {
    http::HttpClient c("127.0.0.1", metrics_port_, std::chrono::seconds(10));
    std::vector<http::Header> headers;
    if (!token.empty()) {
      headers.push_back({"authorization", "Bearer " + token});
    }
    return c.request("GET", "/metrics", "", "", headers).status;
  };
  EXPECT_EQ(scrape(""), 401);
  EXPECT_EQ(scrape("forged"), 401);
  EXPECT_EQ(scrape("nobody"), 403);
  EXPECT_EQ(scrape("prometheus"), 200);
  EXPECT_EQ(scrape("prometheus"), 200) << "from the cache";
}

INSTANTIATE_TEST_SUITE_P(Charts, UpstreamChart,
                         ::testing::Values("gie-v1.5.0/inferencepool-latency.yaml",
                                           "llm-d-router/llm-d-router-gateway-latency.yaml"),
                         [](const auto& info) {
                           return info.param.rfind("gie", 0) == 0 ? std::string("Gie")
                                                                  : std::string("LlmdRouter");
                         });

}  // namespace
}  // namespace llmd::testing
