// Kubernetes discovery end to end: the real EPP against a fake API server (this test, on the
// project's streaming HTTP core) that serves an InferencePool, a pod LIST and a WATCH stream
// like the real one, including a 410 Gone. Pods are real modelsim processes, one per loopback
// address (127.0.0.2, .3, .4) on the same port, as pods share the pool's target port.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>

#include "common/http/message.h"
#include "common/http/stream_server.h"
#include "tests/common/http_test_util.h"
#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

Json pod_object(const std::string& name, const std::string& ip, bool ready, const std::string& rv,
                const std::string& app = "vllm") {
  return Json{
      {"metadata",
       {{"name", name},
        {"namespace", "llm"},
        {"resourceVersion", rv},
        {"labels", {{"app", app}, {"pool", "p"}}}}},
      {"status",
       {{"phase", "Running"},
        {"podIP", ip},
        {"conditions", Json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
}

// An InferenceObjective as the API server returns it (poolRef.group defaulted by the CRD).
Json objective_object(const std::string& api_version, const std::string& name, Json priority,
                      const std::string& pool, const std::string& rv) {
  Json spec = {
      {"poolRef",
       {{"group", "inference.networking.k8s.io"}, {"kind", "InferencePool"}, {"name", pool}}}};
  if (!priority.is_null()) {
    spec["priority"] = priority;
  }
  return Json{{"apiVersion", api_version},
              {"kind", "InferenceObjective"},
              {"metadata", {{"name", name}, {"namespace", "llm"}, {"resourceVersion", rv}}},
              {"spec", spec}};
}

// The value of `key` in a URL query, percent-decoded ("" when absent).
std::string query_param(const std::string& query, const std::string& key) {
  std::size_t pos = 0;
  while (pos <= query.size()) {
    const auto amp = query.find('&', pos);
    const std::string part = query.substr(pos, amp == std::string::npos ? amp : amp - pos);
    if (part.rfind(key + "=", 0) == 0) {
      return http::percent_decode(part.substr(key.size() + 1)).value_or("");
    }
    if (amp == std::string::npos) {
      break;
    }
    pos = amp + 1;
  }
  return "";
}

// Whether a pod's labels satisfy a label selector "k=v,k2=v2" (equality terms only).
bool selects(const std::string& selector, const Json& pod) {
  const Json labels = pod["metadata"].value("labels", Json::object());
  std::size_t pos = 0;
  while (pos < selector.size()) {
    const auto comma = selector.find(',', pos);
    const std::string term = selector.substr(pos, comma == std::string::npos ? comma : comma - pos);
    const auto eq = term.find('=');
    if (eq == std::string::npos || labels.value(term.substr(0, eq), "") != term.substr(eq + 1)) {
      return false;
    }
    if (comma == std::string::npos) {
      break;
    }
    pos = comma + 1;
  }
  return !selector.empty();
}

// The API server's side: answers are set by the test; the current watch streams get events.
// Serves the v1 InferencePool "p" in namespace "llm" (GET, and a watch narrowed to its name),
// the pods of "llm" (LIST by label selector in pages, WATCH), and the InferenceObjectives of
// "llm" of the API groups the test sets (LIST, WATCH; other groups: 404, no such CRD).
class FakeApiServer {
 public:
  // The InferencePool selects app=vllm and lists `ranks` target ports: target_port,
  // target_port + 1, ...
  explicit FakeApiServer(uint16_t target_port, int ranks = 1) {
    pool_labels_ = Json{{"app", "vllm"}};
    for (int r = 0; r < ranks; ++r) {
      pool_ports_.push_back(static_cast<uint16_t>(target_port + r));
    }
    server_ = std::make_unique<http::testing::RunningStreamServer>(
        [this](std::size_t, http::Request&& req, http::ResponseStreamPtr stream) {
          handle(std::move(req), std::move(stream));
        });
  }
  // The watch streams it holds go first: a stream outliving the server would reach into it.
  // New ones are refused meanwhile, then the server stops.
  ~FakeApiServer() {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      pod_watch_.reset();
      pool_watch_.reset();
      objective_watches_.clear();
    }
    server_.reset();
  }
  uint16_t port() const { return server_->port(); }

  void set_list(Json items, const std::string& rv) {
    std::lock_guard lock(mu_);
    list_ = Json{{"kind", "PodList"}, {"metadata", {{"resourceVersion", rv}}}, {"items", items}};
  }
  // Sends one watch event to the EPP's current pod watch (waits for one to be open).
  bool event(const std::string& type, const Json& object) {
    return when_open(pod_watch_, Json{{"type", type}, {"object", object}});
  }
  // An operator's edit of the InferencePool: its selector (matchLabels) and targetPorts change
  // and the EPP's pool watch gets a MODIFIED event (this waits for the watch to be open).
  // `announce` false: the watch is told nothing (a silent watch); only a fresh GET shows it.
  bool edit_pool(Json match_labels, std::vector<uint16_t> ports, bool announce = true) {
    Json pool;
    {
      std::lock_guard lock(mu_);
      pool_labels_ = std::move(match_labels);
      pool_ports_ = std::move(ports);
      ++pool_version_;
      pool = pool_object();
    }
    return !announce || when_open(pool_watch_, Json{{"type", "MODIFIED"}, {"object", pool}});
  }
  // The InferencePool is deleted: its watch gets a DELETED event.
  bool delete_pool() {
    Json pool;
    {
      std::lock_guard lock(mu_);
      ++pool_version_;
      pool = pool_object();
    }
    return when_open(pool_watch_, Json{{"type", "DELETED"}, {"object", pool}});
  }
  // The resourceVersion is too old: an ERROR event with a 410 Status, and the stream ends.
  bool gone() {
    std::lock_guard lock(mu_);
    if (!pod_watch_) {
      return false;
    }
    pod_watch_->write(Json{{"type", "ERROR"},
                           {"object",
                            {{"kind", "Status"},
                             {"code", 410},
                             {"reason", "Expired"},
                             {"message", "too old resource version"}}}}
                          .dump() +
                      "\n");
    pod_watch_->end();
    pod_watch_.reset();
    return true;
  }
  // The InferenceObjectives of `group_version` (e.g. "llm-d.ai/v1alpha2"), served from now on.
  void set_objectives(const std::string& group_version, Json items, const std::string& rv) {
    std::lock_guard lock(mu_);
    objectives_[group_version] = Json{{"kind", "InferenceObjectiveList"},
                                      {"metadata", {{"resourceVersion", rv}}},
                                      {"items", std::move(items)}};
  }
  // Sends one event to the EPP's watch of `group_version`'s objectives (waits for it to open).
  bool objective_event(const std::string& group_version, const std::string& type,
                       const Json& object) {
    http::ResponseStreamPtr* watch = nullptr;
    {
      std::lock_guard lock(mu_);
      watch = &objective_watches_[group_version];  // a map's elements stay where they are
    }
    return when_open(*watch, Json{{"type", type}, {"object", object}});
  }
  int lists() const { return lists_; }
  int pages() const { return pages_; }
  int pool_watches() const { return pool_watches_; }
  std::string last_auth() {
    std::lock_guard lock(mu_);
    return auth_;
  }
  // The label selector of the pod watch opened last.
  std::string pod_watch_selector() {
    std::lock_guard lock(mu_);
    return pod_watch_selector_;
  }

 private:
  bool when_open(http::ResponseStreamPtr& watch, const Json& event) {
    for (int i = 0; i < 100; ++i) {
      {
        std::lock_guard lock(mu_);
        if (watch) {
          watch->write(event.dump() + "\n");
          return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  Json pool_object() const {
    Json ports = Json::array();
    for (auto p : pool_ports_) {
      ports.push_back({{"number", p}});
    }
    return Json{
        {"apiVersion", "inference.networking.k8s.io/v1"},
        {"kind", "InferencePool"},
        {"metadata",
         {{"name", "p"}, {"namespace", "llm"}, {"resourceVersion", std::to_string(pool_version_)}}},
        {"spec", {{"selector", {{"matchLabels", pool_labels_}}}, {"targetPorts", ports}}}};
  }

  void handle(http::Request&& req, http::ResponseStreamPtr stream) {
    std::lock_guard lock(mu_);
    if (closing_) {
      stream->respond(http::Response::detail(503, "shutting down"));
      return;
    }
    auth_ = std::string(req.header("authorization"));
    const std::string pools = "/apis/inference.networking.k8s.io/v1/namespaces/llm/inferencepools";
    if (req.path == pools + "/p") {
      stream->respond(http::Response::json(200, pool_object()));
      return;
    }
    if (req.path == pools && query_param(req.query, "watch") == "1") {
      if (query_param(req.query, "fieldSelector") != "metadata.name=p") {
        stream->respond(http::Response::detail(400, "a pool watch for more than p: " + req.query));
        return;
      }
      ++pool_watches_;
      stream->begin_stream(200, "application/json", {});
      pool_watch_ = stream;
      return;
    }
    const std::string objectives = "/namespaces/llm/inferenceobjectives";
    if (req.path.rfind("/apis/", 0) == 0 && req.path.ends_with(objectives)) {
      const std::string gv = req.path.substr(6, req.path.size() - 6 - objectives.size());
      auto served = objectives_.find(gv);
      if (served == objectives_.end()) {
        stream->respond(http::Response::detail(404, "the server could not find the resource"));
      } else if (query_param(req.query, "watch") == "1") {
        stream->begin_stream(200, "application/json", {});
        objective_watches_[gv] = stream;
      } else {
        stream->respond(http::Response::json(200, served->second));
      }
      return;
    }
    if (req.path == "/api/v1/namespaces/llm/pods") {
      const std::string selector = query_param(req.query, "labelSelector");
      if (query_param(req.query, "watch") != "1") {
        // Pages of one pod each, as an API server may answer fewer items than the limit
        // asks for: the rest comes with the continue token.
        if (query_param(req.query, "limit").empty()) {
          stream->respond(http::Response::detail(400, "a list without a limit"));
          return;
        }
        Json selected = Json::array();
        for (const auto& pod : list_["items"]) {
          if (selects(selector, pod)) {
            selected.push_back(pod);
          }
        }
        const std::string token = query_param(req.query, "continue");
        const std::size_t offset = token.empty() ? 0 : std::stoul(token);
        lists_ += offset == 0 ? 1 : 0;
        ++pages_;
        Json page = list_;
        page["items"] = Json::array();
        if (offset < selected.size()) {
          page["items"].push_back(selected[offset]);
        }
        if (offset + 1 < selected.size()) {
          page["metadata"]["continue"] = std::to_string(offset + 1);
        }
        stream->respond(http::Response::json(200, page));
        return;
      }
      stream->begin_stream(200, "application/json", {});
      pod_watch_ = stream;
      pod_watch_selector_ = selector;
      return;
    }
    stream->respond(http::Response::detail(404, "not found: " + req.path));
  }

  std::mutex mu_;
  Json list_ =
      Json{{"kind", "PodList"}, {"metadata", {{"resourceVersion", "1"}}}, {"items", Json::array()}};
  Json pool_labels_;
  std::vector<uint16_t> pool_ports_;
  int pool_version_ = 1;
  http::ResponseStreamPtr pod_watch_;
  http::ResponseStreamPtr pool_watch_;
  std::map<std::string, Json> objectives_;  // by group/version
  std::map<std::string, http::ResponseStreamPtr> objective_watches_;
  std::string pod_watch_selector_;
  std::atomic<int> lists_{0};
  std::atomic<int> pages_{0};
  std::atomic<int> pool_watches_{0};
  std::string auth_;
  bool closing_ = false;  // guarded by mu_
  // Last: destroyed (stopped and joined) before the state its handler uses.
  std::unique_ptr<http::testing::RunningStreamServer> server_;
};

double ready_pods(uint16_t metrics_port) {
  http::HttpClient c("127.0.0.1", metrics_port, std::chrono::seconds(5));
  return metric_sum(c.get("/metrics").body, "llmd_epp_pool{stat=\"ready_pods\"}");
}

// Polls until `done()`; returns the seconds it took, or -1 once `bound` has passed.
double seconds_until(const std::function<bool()>& done, std::chrono::seconds bound) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < bound) {
    if (done()) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

// Polls until the EPP's ready pods equal `n`; returns the seconds it took, or -1 after 30 s
// (a hang guard: following a watch event takes well under a second).
double until_ready_pods(uint16_t metrics_port, double n) {
  return seconds_until([&] { return ready_pods(metrics_port) == n; }, std::chrono::seconds(30));
}

// The EPP discovering pool "p" in namespace "llm" through `api`, with `pipeline` (a file of
// epp/config), `extra_config` (more lines of its config file) and a service account token.
struct DiscoveringEpp {
  DiscoveringEpp(FakeApiServer& api, const std::string& pipeline,
                 const std::vector<std::string>& extra_args = {},
                 const std::string& extra_config = "") {
    std::ofstream(dir.file("epp.yaml"))
        << "scrapeIntervalMs: 50\nstalenessMs: 1000\npipeline: " << LLMD_SOURCE_DIR
        << "/epp/config/" << pipeline << "\n"
        << extra_config;
    std::ofstream(dir.file("token")) << "test-token\n";
    std::vector<std::string> args = {
        "--config",         dir.file("epp.yaml"),
        "--host",           "127.0.0.1",
        "--port",           std::to_string(epp_port),
        "--health-port",    std::to_string(health_port),
        "--metrics-port",   std::to_string(metrics_port),
        "--pool-name",      "p",
        "--pool-namespace", "llm",
        "--kube-api-url",   "http://127.0.0.1:" + std::to_string(api.port())};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    epp = std::make_unique<Process>(
        binary("epp/epp"), std::move(args),
        std::vector<std::string>{"EPP_KUBE_TOKEN_FILE=" + dir.file("token")});
  }
  TempDir dir;
  uint16_t epp_port = free_port(), health_port = free_port(), metrics_port = free_port();
  std::unique_ptr<Process> epp;
};

// One modelsim pod on each of 127.0.0.2-4, all on `port` (pods told apart by address).
std::vector<std::unique_ptr<Process>> three_loopback_pods(uint16_t port) {
  std::vector<std::unique_ptr<Process>> pods;
  for (const char* ip : {"127.0.0.2", "127.0.0.3", "127.0.0.4"}) {
    pods.push_back(
        std::make_unique<Process>(binary("bench/modelsim/modelsim"),
                                  std::vector<std::string>{"--pods", "1", "--base-port",
                                                           std::to_string(port), "--host", ip}));
  }
  return pods;
}

TEST(Discovery, EppFollowsPodsAddedRemovedAndUnreadiedThroughListAndWatch) {
  const uint16_t pod_port = free_port();
  const auto pods = three_loopback_pods(pod_port);
  FakeApiServer api(pod_port);
  api.set_list(Json::array({pod_object("a", "127.0.0.2", true, "5"),
                            pod_object("b", "127.0.0.3", true, "6")}),
               "10");
  DiscoveringEpp d(api, "load-prefix.yaml");
  Process& epp = *d.epp;
  const uint16_t epp_port = d.epp_port, metrics_port = d.metrics_port;
  ASSERT_TRUE(epp.wait_http_ok(d.health_port, "/readyz")) << epp.log();
  ASSERT_GE(until_ready_pods(metrics_port, 2), 0) << epp.log();
  EXPECT_EQ(api.lists(), 1);
  EXPECT_EQ(api.pages(), 2) << "both pods, one page each, followed by continue";
  EXPECT_NE(epp.log().find("selects app=vllm on port"), std::string::npos)
      << "the selector is logged as written, not URL-encoded: " << epp.log();

  // A pod becomes ready: it joins.
  ASSERT_TRUE(api.event("ADDED", pod_object("c", "127.0.0.4", true, "11")));
  // How fast is recorded (seconds_to_follow_*), not asserted: a loaded machine stretches it,
  // and the latency lives in the benchmarks.
  const double added = until_ready_pods(metrics_port, 3);
  EXPECT_GE(added, 0) << "hang guard (30 s): the added pod never joined; " << epp.log();
  // A pod is no longer ready: it leaves, and no request goes to it.
  ASSERT_TRUE(api.event("MODIFIED", pod_object("a", "127.0.0.2", false, "12")));
  const double unready = until_ready_pods(metrics_port, 2);
  EXPECT_GE(unready, 0) << "hang guard (30 s): the unready pod never left; " << epp.log();
  http::HttpClient client("127.0.0.1", epp_port, std::chrono::seconds(30));
  for (int i = 0; i < 8; ++i) {
    Json body = {{"model", "meta-llama/Llama-3.1-8B-Instruct"},
                 {"prompt", words(10, "d" + std::to_string(i))},
                 {"max_tokens", 2}};
    auto r = client.post("/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body << epp.log();
    EXPECT_NE(r.header("x-gateway-destination-endpoint"), "127.0.0.2:" + std::to_string(pod_port));
  }
  // A pod is deleted: it leaves.
  ASSERT_TRUE(api.event("DELETED", pod_object("b", "127.0.0.3", true, "13")));
  EXPECT_GE(until_ready_pods(metrics_port, 1), 0) << epp.log();
  // The watch expires (410 Gone): the EPP lists again and takes what the list says now.
  api.set_list(Json::array({pod_object("a", "127.0.0.2", true, "20"),
                            pod_object("c", "127.0.0.4", true, "21")}),
               "30");
  ASSERT_TRUE(api.gone());
  const double relisted = until_ready_pods(metrics_port, 2);
  EXPECT_GE(relisted, 0) << epp.log();
  EXPECT_EQ(api.lists(), 2) << epp.log();
  EXPECT_EQ(api.pages(), 4);
  // The service account token travels as a bearer token.
  EXPECT_EQ(api.last_auth(), "Bearer test-token");
  RecordProperty("seconds_to_follow_added_pod", std::to_string(added));
  RecordProperty("seconds_to_follow_unready_pod", std::to_string(unready));
}

// A v1 InferencePool with several targetPorts (one serving process per data-parallel rank): every
// port of every ready pod is an endpoint, and requests reach each rank.
TEST(Discovery, EveryTargetPortOfAPoolIsAnEndpoint) {
  const uint16_t base = free_port_block(2);
  ASSERT_NE(base, 0);
  std::vector<std::unique_ptr<Process>> pods;
  for (const char* ip : {"127.0.0.2", "127.0.0.3"}) {
    pods.push_back(
        std::make_unique<Process>(binary("bench/modelsim/modelsim"),
                                  std::vector<std::string>{"--pods", "2", "--base-port",
                                                           std::to_string(base), "--host", ip}));
  }
  FakeApiServer api(base, 2);
  api.set_list(Json::array({pod_object("a", "127.0.0.2", true, "5"),
                            pod_object("b", "127.0.0.3", true, "6")}),
               "10");
  DiscoveringEpp d(api, "round-robin.yaml");
  Process& epp = *d.epp;
  const uint16_t epp_port = d.epp_port, metrics_port = d.metrics_port;
  ASSERT_TRUE(epp.wait_http_ok(d.health_port, "/readyz")) << epp.log();
  ASSERT_GE(until_ready_pods(metrics_port, 4), 0) << epp.log();
  EXPECT_NE(epp.log().find("on ports " + std::to_string(base) + ", " + std::to_string(base + 1)),
            std::string::npos)
      << epp.log();
  std::set<std::string> reached;
  http::HttpClient client("127.0.0.1", epp_port, std::chrono::seconds(30));
  for (int i = 0; i < 12; ++i) {
    Json body = {{"model", "meta-llama/Llama-3.1-8B-Instruct"},
                 {"prompt", words(10, "r" + std::to_string(i))},
                 {"max_tokens", 2}};
    auto r = client.post("/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200) << r.body << epp.log();
    reached.insert(std::string(r.header("x-gateway-destination-endpoint")));
  }
  EXPECT_EQ(reached.size(), 4u) << "round-robin over both ranks of both pods";
}

// Sends small completions through the EPP until one lands on an endpoint in `wanted`; returns
// the seconds that took (-1 if none did within 20 s: far beyond the second a pool edit should
// take, so a slow machine does not fail it). Answers other than 200 while the pods change are
// counted in `refused`.
double seconds_until_traffic_reaches(uint16_t epp_port, const std::set<std::string>& wanted,
                                     int& refused) {
  http::HttpClient client("127.0.0.1", epp_port, std::chrono::seconds(30));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20); ++i) {
    Json body = {{"model", "meta-llama/Llama-3.1-8B-Instruct"},
                 {"prompt", words(10, "poll" + std::to_string(i))},
                 {"max_tokens", 2}};
    auto r = client.post("/v1/completions", body.dump());
    if (r.status != 200) {
      ++refused;
    } else if (wanted.count(std::string(r.header("x-gateway-destination-endpoint")))) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

// The endpoints that `n` requests through the EPP reach.
std::set<std::string> endpoints_reached(uint16_t epp_port, int n, const std::string& tag) {
  std::set<std::string> reached;
  http::HttpClient client("127.0.0.1", epp_port, std::chrono::seconds(30));
  for (int i = 0; i < n; ++i) {
    Json body = {{"model", "meta-llama/Llama-3.1-8B-Instruct"},
                 {"prompt", words(10, tag + std::to_string(i))},
                 {"max_tokens", 2}};
    auto r = client.post("/v1/completions", body.dump());
    reached.insert(r.status == 200 ? std::string(r.header("x-gateway-destination-endpoint"))
                                   : "HTTP " + std::to_string(r.status));
  }
  return reached;
}

// The EPP watches the InferencePool itself: an operator's edit of its selector moves traffic to
// the pods it now selects, and an edit of its targetPorts to the new port, without waiting for
// the pod watch to time out (the EPP asks for 300 s watches).
TEST(Discovery, AnInferencePoolEditMovesTrafficToWhatThePoolNowSelects) {
  // Four pods: a and b labelled app=vllm, c and d app=vllm-next. Each serves on `base`; c and d
  // also on base + 1, the port the last edit moves to.
  const uint16_t base = free_port_block(2);
  ASSERT_NE(base, 0);
  std::vector<std::unique_ptr<Process>> pods;
  for (const auto& [ip, ports] : std::vector<std::pair<std::string, int>>{
           {"127.0.0.2", 1}, {"127.0.0.3", 1}, {"127.0.0.4", 2}, {"127.0.0.5", 2}}) {
    pods.push_back(std::make_unique<Process>(
        binary("bench/modelsim/modelsim"),
        std::vector<std::string>{"--pods", std::to_string(ports), "--base-port",
                                 std::to_string(base), "--host", ip}));
  }
  FakeApiServer api(base);
  api.set_list(
      Json::array({pod_object("a", "127.0.0.2", true, "5"), pod_object("b", "127.0.0.3", true, "6"),
                   pod_object("c", "127.0.0.4", true, "7", "vllm-next"),
                   pod_object("d", "127.0.0.5", true, "8", "vllm-next")}),
      "10");
  DiscoveringEpp d(api, "round-robin.yaml");
  Process& epp = *d.epp;
  ASSERT_TRUE(epp.wait_http_ok(d.health_port, "/readyz")) << epp.log();
  ASSERT_GE(until_ready_pods(d.metrics_port, 2), 0) << epp.log();
  const auto at = [](const char* ip, int port) {
    return std::string(ip) + ":" + std::to_string(port);
  };
  const std::set<std::string> first = {at("127.0.0.2", base), at("127.0.0.3", base)};
  const std::set<std::string> next = {at("127.0.0.4", base), at("127.0.0.5", base)};
  const std::set<std::string> next_port = {at("127.0.0.4", base + 1), at("127.0.0.5", base + 1)};
  EXPECT_EQ(endpoints_reached(d.epp_port, 6, "before"), first);

  // The selector edit.
  ASSERT_TRUE(api.edit_pool(Json{{"app", "vllm-next"}}, {base})) << "no pool watch\n" << epp.log();
  int refused = 0;
  const double selector_seconds = seconds_until_traffic_reaches(d.epp_port, next, refused);
  ASSERT_GE(selector_seconds, 0) << epp.log();
  EXPECT_EQ(endpoints_reached(d.epp_port, 6, "selector"), next)
      << "every request goes to the newly selected pods\n"
      << epp.log();
  EXPECT_EQ(api.pod_watch_selector(), "app=vllm-next");
  EXPECT_EQ(api.lists(), 2) << "one list per selector";
  EXPECT_NE(epp.log().find("InferencePool llm/p changed: selector app=vllm -> app=vllm-next"),
            std::string::npos)
      << epp.log();

  // The targetPorts edit.
  ASSERT_TRUE(api.edit_pool(Json{{"app", "vllm-next"}}, {static_cast<uint16_t>(base + 1)}));
  const double port_seconds = seconds_until_traffic_reaches(d.epp_port, next_port, refused);
  ASSERT_GE(port_seconds, 0) << epp.log();
  EXPECT_EQ(endpoints_reached(d.epp_port, 6, "port"), next_port) << epp.log();
  EXPECT_NE(
      epp.log().find("changed: port " + std::to_string(base) + " -> " + std::to_string(base + 1)),
      std::string::npos)
      << epp.log();
  EXPECT_EQ(api.pool_watches(), 1) << "one pool watch, kept open across the edits";

  // The pool is deleted (say, to be created again): its last pods keep serving.
  ASSERT_TRUE(api.delete_pool());
  for (int i = 0; i < 200 && epp.log().find("was deleted") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(epp.log().find("InferencePool llm/p was deleted"), std::string::npos) << epp.log();
  EXPECT_EQ(endpoints_reached(d.epp_port, 4, "deleted"), next_port) << epp.log();
  RecordProperty("seconds_to_follow_selector_edit", std::to_string(selector_seconds));
  RecordProperty("seconds_to_follow_target_port_edit", std::to_string(port_seconds));
  RecordProperty("requests_refused_during_edits", std::to_string(refused));
  std::cout << "selector edit followed in " << selector_seconds << " s, targetPorts edit in "
            << port_seconds << " s; " << refused << " requests refused meanwhile\n";
}

// A watch the API server keeps open without sending a byte, not even a BOOKMARK (a connection
// that died without a close: an API server or load balancer gone, a NAT entry dropped), is
// abandoned once it has been silent for its timeoutSeconds + 5 s, and what it watched is read
// again at once: a pod added behind a silent pod watch, and an InferencePool edit behind a
// silent pool watch, are followed within that. A watch that keeps streaming is not cut, however
// long the server keeps it open: the bound is on silence, not on age. The fake server never
// closes a watch, and the config file sets 2 s watches.
TEST(Discovery, AnEditBehindASilentWatchIsFollowedWithinTheWatchTimeoutPlus5s) {
  constexpr auto kWatchTimeout = std::chrono::seconds(2);
  // Abandoned after 2 + 5 s of silence, then one list; the margin is for a loaded machine
  // (the bound before was 2 + 30 s).
  constexpr auto kBound = kWatchTimeout + std::chrono::seconds(5) + std::chrono::seconds(10);
  const uint16_t pod_port = free_port();
  const auto pods = three_loopback_pods(pod_port);
  FakeApiServer api(pod_port);
  const Json c = pod_object("c", "127.0.0.4", true, "7", "vllm-next");
  api.set_list(Json::array({pod_object("a", "127.0.0.2", true, "5"), c}), "10");
  DiscoveringEpp d(
      api, "round-robin.yaml", {},
      "discovery: {watchTimeoutSeconds: " + std::to_string(kWatchTimeout.count()) + "}\n");
  Process& epp = *d.epp;
  ASSERT_TRUE(epp.wait_http_ok(d.health_port, "/readyz")) << epp.log();
  ASSERT_GE(until_ready_pods(d.metrics_port, 1), 0) << epp.log();
  EXPECT_EQ(api.lists(), 1);

  // A watch that streams (a bookmark a second) for longer than 2 + 5 s keeps going.
  for (int rv = 11; rv < 21; ++rv) {
    ASSERT_TRUE(api.event(
        "BOOKMARK", Json{{"kind", "Pod"}, {"metadata", {{"resourceVersion", std::to_string(rv)}}}}))
        << epp.log();
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  EXPECT_EQ(api.lists(), 1) << "the streaming pod watch was cut\n" << epp.log();

  // From now on the pod watch says nothing. Pod b is added: only a fresh list shows it.
  api.set_list(Json::array({pod_object("a", "127.0.0.2", true, "5"),
                            pod_object("b", "127.0.0.3", true, "21"), c}),
               "22");
  const double pod_seconds = seconds_until([&] { return ready_pods(d.metrics_port) == 2; }, kBound);
  EXPECT_GE(pod_seconds, 0) << "pod b not followed within " << kBound.count()
                            << " s of a silent pod watch\n"
                            << epp.log();
  EXPECT_EQ(api.lists(), 2) << epp.log();
  EXPECT_NE(epp.log().find("pod watch: the watch sent nothing for 7 s (its timeoutSeconds 2 + "
                           "5 s), not even a bookmark, and was not closed; listing the pods "
                           "again"),
            std::string::npos)
      << epp.log();

  // The pool watch is silent too: an edit of the pool's selector that it does not announce is
  // read when the pool is read again.
  ASSERT_TRUE(api.edit_pool(Json{{"app", "vllm-next"}}, {pod_port}, /*announce=*/false));
  const double pool_seconds = seconds_until(
      [&] {
        return api.pod_watch_selector() == "app=vllm-next" && ready_pods(d.metrics_port) == 1;
      },
      kBound);
  EXPECT_GE(pool_seconds, 0) << "the pool edit not followed within " << kBound.count()
                             << " s of a silent pool watch\n"
                             << epp.log();
  EXPECT_NE(epp.log().find("InferencePool watch: the watch sent nothing for 7 s"),
            std::string::npos)
      << epp.log();
  EXPECT_NE(epp.log().find("InferencePool llm/p changed: selector app=vllm -> app=vllm-next"),
            std::string::npos)
      << epp.log();
  RecordProperty("seconds_to_follow_pod_added_behind_silent_watch", std::to_string(pod_seconds));
  RecordProperty("seconds_to_follow_pool_edit_behind_silent_watch", std::to_string(pool_seconds));
  std::cout << "behind a silent watch (timeout " << kWatchTimeout.count() << " s): pod added "
            << "followed in " << pod_seconds << " s, pool edit in " << pool_seconds << " s\n";
}

// The pool's InferenceObjectives (GIE v1.5.0's inference.networking.x-k8s.io/v1alpha2 and
// llm-d-router's llm-d.ai/v1alpha2) are listed and watched: a request naming one by the
// objective header is scheduled with its priority (the decision header shows it), an edit or a
// deletion takes effect without a restart, another pool's objective is not ours, and llm-d.ai
// wins a name both groups declare.
TEST(Discovery, ThePoolsInferenceObjectivesGiveTheirRequestsTheirPriority) {
  const uint16_t pod_port = free_port();
  Process pod(binary("bench/modelsim/modelsim"),
              {"--pods", "1", "--base-port", std::to_string(pod_port), "--host", "127.0.0.2"});
  FakeApiServer api(pod_port);
  api.set_list(Json::array({pod_object("a", "127.0.0.2", true, "5")}), "10");
  const std::string gie = "inference.networking.x-k8s.io/v1alpha2", llmd = "llm-d.ai/v1alpha2";
  api.set_objectives(gie,
                     Json::array({objective_object(gie, "interactive", 7, "p", "21"),
                                  objective_object(gie, "premium", 5, "p", "22"),
                                  objective_object(gie, "elsewhere", 3, "q", "23")}),
                     "24");
  api.set_objectives(llmd, Json::array({objective_object(llmd, "premium", 9, "p", "31")}), "32");
  DiscoveringEpp d(api, "round-robin.yaml", {"--allow-debug-header", "true"});
  Process& epp = *d.epp;
  ASSERT_TRUE(epp.wait_http_ok(d.health_port, "/readyz")) << epp.log();
  const std::string listed =
      "InferenceObjectives of pool llm/p: interactive (priority 7), premium (priority 9)";
  for (int i = 0; i < 200 && epp.log().find(listed) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // hang guard: 10 s
  }
  ASSERT_NE(epp.log().find(listed), std::string::npos) << epp.log();
  EXPECT_EQ(epp.log().find("premium (priority 5)"), std::string::npos)
      << "the first set waits for both groups: the losing priority is never in force\n"
      << epp.log();

  http::HttpClient client("127.0.0.1", d.epp_port, std::chrono::seconds(30));
  auto decision = [&](const std::string& header, const std::string& objective) {
    Json body = {{"model", "meta-llama/Llama-3.1-8B-Instruct"},
                 {"prompt", words(6, objective)},
                 {"max_tokens", 2}};
    auto r = client.request("POST", "/v1/completions", body.dump(), "application/json",
                            {{header, objective}, {"x-llmd-debug", "1"}});
    EXPECT_EQ(r.status, 200) << r.body;
    return std::string(r.header("x-llmd-decision"));
  };
  EXPECT_NE(decision("x-gateway-inference-objective", "interactive").find(" priority=7 "),
            std::string::npos);
  EXPECT_NE(decision("x-llm-d-inference-objective", "premium").find(" priority=9 "),
            std::string::npos)
      << "llm-d.ai's premium wins over the Inference Extension group's";
  EXPECT_EQ(decision("x-llm-d-inference-objective", "elsewhere").find(" priority="),
            std::string::npos)
      << "an objective of pool q is not this pool's";

  // An edit through the watch: the next requests get the new priority.
  ASSERT_TRUE(
      api.objective_event(gie, "MODIFIED", objective_object(gie, "interactive", -2, "p", "25")));
  std::string now;
  for (int i = 0; i < 200; ++i) {  // hang guard: following a watch event takes far less
    now = decision("x-gateway-inference-objective", "interactive");
    if (now.find(" priority=-2 ") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(now.find(" priority=-2 "), std::string::npos) << now << "\n" << epp.log();
  // Deleted: the name is unknown again (priority 0, no priority= in the decision).
  ASSERT_TRUE(
      api.objective_event(gie, "DELETED", objective_object(gie, "interactive", -2, "p", "26")));
  for (int i = 0; i < 200; ++i) {
    now = decision("x-gateway-inference-objective", "interactive");
    if (now.find(" priority=") == std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(now.find(" priority="), std::string::npos) << now;
  EXPECT_NE(epp.log().find("InferenceObjectives of pool llm/p: premium (priority 9)"),
            std::string::npos)
      << epp.log();
}

// The in-cluster path: HTTPS with the CA the service account mounts. A one-connection-at-a-time
// TLS API server (the EPP's requests are sequential) answers the pool, the list, and a watch
// that sends one event and ends.
class TlsApiServer {
 public:
  TlsApiServer(const std::string& cert, const std::string& key, uint16_t target_port,
               const std::string& pod_ip)
      : ctx_(boost::asio::ssl::context::tls_server),
        acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    ctx_.use_certificate_chain_file(cert);
    ctx_.use_private_key_file(key, boost::asio::ssl::context::pem);
    port_ = acceptor_.local_endpoint().port();
    acceptor_.non_blocking(true);
    pool_ = Json{{"spec",
                  {{"selector", {{"matchLabels", {{"app", "vllm"}}}}},
                   {"targetPorts", Json::array({{{"number", target_port}}})}}}};
    list_ = Json{{"metadata", {{"resourceVersion", "3"}}},
                 {"items", Json::array({pod_object("a", pod_ip, true, "2")})}};
    thread_ = std::thread([this] { serve(); });
  }
  ~TlsApiServer() {
    stopping_ = true;
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int handshakes() const { return handshakes_; }

 private:
  void serve() {
    while (!stopping_) {
      boost::system::error_code ec;
      boost::asio::ip::tcp::socket socket(ioc_);
      acceptor_.accept(socket, ec);  // non-blocking: polled so that stopping is noticed
      if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (ec) {
        return;
      }
      socket.non_blocking(false);
      boost::asio::ssl::stream<boost::asio::ip::tcp::socket> tls(std::move(socket), ctx_);
      tls.handshake(boost::asio::ssl::stream_base::server, ec);
      if (ec) {
        continue;  // e.g. the client refused our certificate
      }
      ++handshakes_;
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        const std::size_t n = tls.read_some(boost::asio::buffer(buf), ec);
        if (ec) {
          break;
        }
        request.append(buf, n);
      }
      if (request.find("\r\n\r\n") == std::string::npos || request.size() < 4) {
        continue;  // the client went away before its request was whole (an EPP stopping)
      }
      const std::string target = request.substr(4, request.find(' ', 4) - 4);
      std::string body;
      if (target.find("/inferencepools/p") != std::string::npos) {
        body = pool_.dump();
      } else if (target.find("watch=1") == std::string::npos) {
        body = list_.dump();
      } else {
        // One event, then the watch ends (the EPP resumes it).
        body = Json{{"type", "BOOKMARK"}, {"object", {{"metadata", {{"resourceVersion", "4"}}}}}}
                   .dump() +
               "\n";
      }
      const std::string answer =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
          "Content-Length: " +
          std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      boost::asio::write(tls, boost::asio::buffer(answer), ec);
      tls.shutdown(ec);
    }
  }

  boost::asio::io_context ioc_;
  boost::asio::ssl::context ctx_;
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  Json pool_, list_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> handshakes_{0};
  std::thread thread_;
};

// A self-signed certificate for 127.0.0.1 (also its own CA), made with the openssl tool.
bool make_cert(const std::string& dir, const std::string& name) {
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=api "
      "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
      dir + "/" + name + ".key -out " + dir + "/" + name + ".crt > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

TEST(Discovery, HttpsApiServerWithTheMountedCaIsTrustedAndAnyOtherIsRefused) {
  TempDir dir;
  ASSERT_TRUE(make_cert(dir.path(), "api")) << "openssl req failed";
  ASSERT_TRUE(make_cert(dir.path(), "other"));
  const uint16_t pod_port = free_port();
  Process pod(binary("bench/modelsim/modelsim"),
              {"--pods", "1", "--base-port", std::to_string(pod_port), "--host", "127.0.0.2"});
  TlsApiServer api(dir.file("api.crt"), dir.file("api.key"), pod_port, "127.0.0.2");
  const std::string config = dir.file("epp.yaml");
  std::ofstream(config) << "pipeline: " << LLMD_SOURCE_DIR << "/epp/config/load-prefix.yaml\n";
  std::ofstream(dir.file("token")) << "t\n";
  auto run_epp = [&](const std::string& ca, uint16_t metrics_port) {
    return std::make_unique<Process>(
        binary("epp/epp"),
        std::vector<std::string>{"--config",
                                 config,
                                 "--host",
                                 "127.0.0.1",
                                 "--port",
                                 std::to_string(free_port()),
                                 "--health-port",
                                 std::to_string(free_port()),
                                 "--metrics-port",
                                 std::to_string(metrics_port),
                                 "--pool-name",
                                 "p",
                                 "--pool-namespace",
                                 "llm",
                                 "--kube-api-url",
                                 "https://127.0.0.1:" + std::to_string(api.port()),
                                 "--kube-ca-file",
                                 ca,
                                 "--kube-token-file",
                                 dir.file("token")});
  };
  {
    const uint16_t metrics_port = free_port();
    auto epp = run_epp(dir.file("api.crt"), metrics_port);
    EXPECT_GE(until_ready_pods(metrics_port, 1), 0) << epp->log();
    EXPECT_GT(api.handshakes(), 0);
  }
  {
    // Another CA: the EPP refuses the server's certificate and finds no pods.
    const uint16_t metrics_port = free_port();
    auto epp = run_epp(dir.file("other.crt"), metrics_port);
    // Waits for the refusal itself (the log line), not for a time; the bound is a hang guard.
    for (int i = 0; i < 300 && epp->log().find("certificate verify failed") == std::string::npos;
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_NE(epp->log().find("certificate verify failed"), std::string::npos)
        << "hang guard (30 s): no TLS refusal logged; " << epp->log();
    EXPECT_EQ(ready_pods(metrics_port), 0);
  }
}

TEST(Discovery, PodsInTheConfigFileAreRefusedWithDiscovery) {
  TempDir dir;
  const std::string config = dir.file("epp.yaml");
  std::ofstream(config) << "pool:\n  pods:\n  - {name: x, address: 127.0.0.1:9}\npipeline: "
                        << LLMD_SOURCE_DIR << "/epp/config/load-prefix.yaml\n";
  Process epp(binary("epp/epp"),
              {"--config", config, "--pool-selector", "app=vllm", "--pool-namespace", "llm",
               "--kube-api-url", "http://127.0.0.1:9", "--port", std::to_string(free_port())});
  for (int i = 0; i < 200 && epp.running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(epp.running()) << "the EPP refuses to start";
  EXPECT_NE(epp.log().find("pool.pods is not allowed with Kubernetes discovery"), std::string::npos)
      << epp.log();
}

}  // namespace
}  // namespace llmd::testing
