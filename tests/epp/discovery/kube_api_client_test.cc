// The Kubernetes API client over common/http's client core: what it sends (token, accept,
// JSON body), how it reads (whole or as a stream), and that interrupt() ends a watch that is
// waiting for events. The fake API server is the project's streaming HTTP server on loopback.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "epp/discovery/kube_api_client.h"
#include "tests/common/http_test_util.h"

namespace llmd::epp::discovery {
namespace {

using namespace std::chrono_literals;

// Answers /echo with what it received, and /watch with one event and then nothing (until the
// client leaves).
class FakeApi {
 public:
  FakeApi()
      : server_([this](std::size_t, http::Request&& req, http::ResponseStreamPtr stream) {
          if (req.path == "/watch") {
            stream->begin_stream(200, "application/json", {});
            stream->write("{\"type\":\"ADDED\"}\n");
            std::lock_guard lock(mu_);
            watches_.push_back(stream);  // kept open
            return;
          }
          nlohmann::json echo{{"method", req.method},
                              {"authorization", std::string(req.header("authorization"))},
                              {"accept", std::string(req.header("accept"))},
                              {"type", std::string(req.header("content-type"))},
                              {"body", req.body}};
          stream->respond(http::Response::json(200, echo));
        }) {}
  // The watches end and are dropped while the server still runs: a stream must not outlive its
  // server (its connection lives on one of the server's workers).
  ~FakeApi() {
    std::lock_guard lock(mu_);
    for (auto& w : watches_) {
      w->end();
    }
    watches_.clear();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }

 private:
  std::mutex mu_;
  std::vector<http::ResponseStreamPtr> watches_;
  http::testing::RunningStreamServer server_;
};

class KubeApiClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/llmd_kube_XXXXXX";
    dir_ = ::mkdtemp(pattern);
    std::ofstream(dir_ + "/token") << "secret-1\n";
  }
  void TearDown() override {
    ::unlink((dir_ + "/token").c_str());
    ::rmdir(dir_.c_str());
  }
  KubeApiOptions options() const { return {api_.url(), dir_ + "/token", ""}; }

  FakeApi api_;
  std::string dir_;
};

TEST_F(KubeApiClientTest, SendsTheRotatingTokenAndAJsonBody) {
  KubeApiClient client(options());
  const KubeJsonAnswer put = client.request_json(KubeMethod::kPut, "/echo", "{\"a\":1}", {});
  ASSERT_EQ(put.status, 200) << put.error;
  EXPECT_EQ(put.body["method"], "PUT");
  EXPECT_EQ(put.body["authorization"], "Bearer secret-1");
  EXPECT_EQ(put.body["accept"], "application/json");
  EXPECT_EQ(put.body["type"], "application/json");
  EXPECT_EQ(put.body["body"], "{\"a\":1}");
  std::ofstream(dir_ + "/token") << "secret-2\n";  // the kubelet rotated it
  const KubeJsonAnswer get = client.request_json(KubeMethod::kGet, "/echo", "", {});
  ASSERT_EQ(get.status, 200) << get.error;
  EXPECT_EQ(get.body["method"], "GET");
  EXPECT_EQ(get.body["authorization"], "Bearer secret-2");
  EXPECT_EQ(get.body["type"], "") << "a GET carries no body";
}

TEST_F(KubeApiClientTest, AnAnswerLargerThanTheBoundIsAnError) {
  KubeApiClient client(options());
  const KubeJsonAnswer a = client.request_json(KubeMethod::kGet, "/echo", "", {}, 10);
  EXPECT_NE(a.error.find("larger than 10 bytes"), std::string::npos) << a.error;
}

// A watch waits for events as long as its read bound allows; interrupt() ends it at once.
TEST_F(KubeApiClientTest, InterruptEndsAWatchThatWaitsForEvents) {
  KubeApiClient client(options());
  std::atomic<int> events{0};
  std::thread interrupter([&] {
    while (events.load() == 0) {
      std::this_thread::sleep_for(5ms);
    }
    client.interrupt();
  });
  KubeTimeouts t;
  t.body_read = 60s;  // the interruption, not the bound, must end it
  std::string error;
  const int status = client.request(
      KubeMethod::kGet, "/watch", "", t,
      [&](std::string_view b) {
        EXPECT_EQ(b, "{\"type\":\"ADDED\"}\n");
        ++events;
        return true;
      },
      error);
  interrupter.join();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(error, "interrupted");
  EXPECT_EQ(events.load(), 1);
  // Every later request fails at once.
  EXPECT_EQ(client.request_json(KubeMethod::kGet, "/echo", "", {}).error, "interrupted");
}

TEST(KubeApiClient, ABadApiUrlOrCaIsAStartUpError) {
  EXPECT_THROW(KubeApiClient({"ftp://api", "", ""}), std::invalid_argument);
  EXPECT_THROW(KubeApiClient({"https://api", "", "/nonexistent/ca.crt"}), std::invalid_argument);
}

}  // namespace
}  // namespace llmd::epp::discovery
