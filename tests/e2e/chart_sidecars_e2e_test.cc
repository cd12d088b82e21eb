// The charts' latencyPredictor sections with only the images swapped for ours (issue 47 item 6):
// the trainer and a predictor start with exactly the env of the rendered containers
// (tests/e2e/charts/*.txt), the predictor through the uvicorn entrypoint with the chart's
// command and args, and the chart's liveness and readiness probes answer 200 on a non-loopback
// address of this machine, as the kubelet dials the pod IP. A bad value of a chart variable
// exits 2 naming it. Ports are remapped to free ones and each emptyDir to a directory here.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>

#include "common/config/reference_env.h"
#include "common/http/client.h"
#include "tests/e2e/chart_containers.h"
#include "tests/support/process.h"

namespace llmd::testing {
namespace {

// The first IPv4 address of an interface that is up and not loopback; "" when there is none.
std::string first_non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    return "";
  }
  std::string out;
  for (const ifaddrs* a = list; a != nullptr && out.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET ||
        (a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) {
      out = text;
    }
  }
  ::freeifaddrs(list);
  return out;
}

// `binary --help` with whitespace runs collapsed, so wrapped "(env NAME)" notes read whole.
std::string help_text(const std::string& bin) {
  Process p(binary(bin + "/" + bin), {"--help"});
  p.wait_exit();
  return std::regex_replace(p.log(), std::regex(R"(\s+)"), " ");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ChartSidecars : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    containers_ = read_chart_containers(LLMD_SOURCE_DIR "/tests/e2e/charts/" + GetParam());
    ASSERT_EQ(containers_.size(), 2u);
    for (const auto& c : containers_) {
      ports_[c.port] = free_port();
      for (const auto& m : c.mounts) {
        mounts_[m] = dir_.path() + m;
        std::filesystem::create_directories(mounts_[m]);
      }
    }
  }

  const ChartContainer& container(const std::string& image) const {
    for (const auto& c : containers_) {
      if (c.image == image) {
        return c;
      }
    }
    throw std::runtime_error("no " + image + " container");
  }
  int port(const ChartContainer& c) const { return ports_.at(c.port); }

  std::unique_ptr<Process> start(const ChartContainer& c,
                                 const std::pair<std::string, std::string>& override = {}) const {
    return start_chart_container(c, ports_, mounts_, override);
  }

  TempDir dir_;
  std::vector<ChartContainer> containers_;
  std::map<int, int> ports_;
  std::map<std::string, std::string> mounts_;
};

TEST_P(ChartSidecars, ProbesAnswerOnThePodAddress) {
  const std::string ip = first_non_loopback_ipv4();
  if (ip.empty()) {
    GTEST_SKIP() << "this machine has no non-loopback IPv4 address to probe";
  }
  const ChartContainer& tc = container("trainer");
  const ChartContainer& pc = container("predictor");
  auto trainer = start(tc);
  for (const auto& path : tc.probes) {
    ASSERT_TRUE(trainer->wait_http_ok(port(tc), path, std::chrono::seconds(30), ip))
        << tc.name << " GET " << ip << ":" << port(tc) << path << "\n"
        << trainer->log();
  }
  EXPECT_TRUE(trainer->wait_http_ok(port(tc), "/healthz")) << "the EPP's localhost URL";
  auto predictor = start(pc);
  for (const auto& path : pc.probes) {
    // Readiness: the first sync from the trainer, at start (the next one is 30 s later).
    ASSERT_TRUE(predictor->wait_http_ok(port(pc), path, std::chrono::seconds(45), ip))
        << pc.name << " GET " << ip << ":" << port(pc) << path << "\n"
        << predictor->log();
  }
  // The chart's settings took effect: models on the volumes, the trainer's URL, 28 workers.
  EXPECT_TRUE(std::filesystem::exists(mounts_.at("/models") + "/ttft.joblib"));
  EXPECT_TRUE(std::filesystem::exists(mounts_.at("/server_models") + "/tpot.joblib"));
  http::HttpClient client(ip, static_cast<uint16_t>(port(pc)));
  EXPECT_NE(client.get("/status").body.find("http://localhost:" + std::to_string(port(tc))),
            std::string::npos);
  EXPECT_NE(predictor->log().find("with 28 workers"), std::string::npos) << predictor->log();
  EXPECT_NE(trainer->log().find("SERVER_TYPE=training"), std::string::npos) << trainer->log();
  EXPECT_EQ(predictor->terminate(), 0);
  EXPECT_EQ(trainer->terminate(), 0);
}

TEST_P(ChartSidecars, ABadValueExitsTwoNamingTheVariable) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"trainer", "LATENCY_RETRAINING_INTERVAL_SEC"},
      {"trainer", "LATENCY_MIN_SAMPLES_FOR_RETRAIN"},
      {"trainer", "LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET"},
      {"trainer", "LATENCY_OBJECTIVE_TYPE"},
      {"trainer", "LATENCY_MODEL_TYPE"},
      {"predictor", "MODEL_SYNC_INTERVAL_SEC"},
      {"predictor", "UVICORN_WORKERS"},
      {"predictor", "OMP_NUM_THREADS"},
      {"predictor", "PREDICT_PORT"},
      {"predictor", "LATENCY_OBJECTIVE_TYPE"},
      {"predictor", "TRAINING_SERVER_URL"}};
  for (const auto& [image, name] : bad) {
    SCOPED_TRACE(image + " " + name + "=bogus");
    auto p = start(container(image), {name, "bogus"});
    EXPECT_EQ(p->wait_exit(), 2) << p->log();
    EXPECT_NE(p->log().find(name), std::string::npos) << p->log();
  }
}

// No chart variable is silently ignored: each is an option of the executable (--help), or in
// its table of reference names (accepted or refused), and docs/ tells users what it does here.
TEST_P(ChartSidecars, EveryVariableIsReadOrRefusedAndDocumented) {
  const std::string doc = read_text(LLMD_SOURCE_DIR "/docs/coming-from-upstream.md");
  ASSERT_FALSE(doc.empty());
  for (const auto& c : containers_) {
    const std::string help = help_text(c.image);
    const auto table =
        c.image == "trainer" ? config::trainer_reference_env() : config::predictor_reference_env();
    std::set<std::string> listed;
    for (const auto& e : table) {
      listed.insert(e.name);
    }
    for (const auto& [name, value] : c.env) {
      SCOPED_TRACE(c.name + " " + name);
      const bool option = help.find("(env " + name + ")") != std::string::npos ||
                          help.find("(or env " + name + ")") != std::string::npos;
      EXPECT_TRUE(option || listed.count(name) > 0);
      EXPECT_NE(doc.find("`" + name + "`"), std::string::npos);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Charts, ChartSidecars,
                         ::testing::Values("gie-v1.5.0.txt", "llm-d-router-ebab687.txt"),
                         [](const auto& info) {
                           return info.param.rfind("gie", 0) == 0 ? std::string("Gie")
                                                                  : std::string("LlmdRouter");
                         });

}  // namespace
}  // namespace llmd::testing
