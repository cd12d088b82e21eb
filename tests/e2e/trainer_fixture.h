#pragma once
// A real trainer process on a free loopback port with its model directory in a temp dir.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/http/client.h"
#include "tests/support/process.h"

namespace llmd::testing {

using Json = nlohmann::json;

struct TrainerProcess {
  // `max_file_bytes` > 0: the trainer's RLIMIT_FSIZE (see Process), a stand-in for a full disk.
  explicit TrainerProcess(const std::string& dir, std::vector<std::string> extra = {},
                          uint16_t port_hint = 0, int64_t max_file_bytes = 0)
      : port(port_hint != 0 ? port_hint : free_port()) {
    std::vector<std::string> args = {"--host",
                                     "127.0.0.1",
                                     "--port",
                                     std::to_string(port),
                                     "--ttft-model-path",
                                     dir + "/ttft.ubj",
                                     "--tpot-model-path",
                                     dir + "/tpot.ubj",
                                     "--ttft-gated-model-path",
                                     dir + "/ttft_gated.bin",
                                     "--tpot-gated-model-path",
                                     dir + "/tpot_gated.bin",
                                     "--fit-threads",
                                     "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    process = std::make_unique<Process>(binary("trainer/trainer"), args, std::vector<std::string>{},
                                        0, max_file_bytes);
    ready = process->wait_http_ok(port);
    client = std::make_unique<http::HttpClient>("127.0.0.1", port, std::chrono::seconds(30));
  }
  http::ClientResponse get(const std::string& path) { return client->get(path); }
  http::ClientResponse post(const std::string& path, const Json& body) {
    return client->post(path, body.dump());
  }
  Json get_json(const std::string& path) { return Json::parse(get(path).body); }

  uint16_t port;
  std::unique_ptr<Process> process;
  std::unique_ptr<http::HttpClient> client;
  bool ready = false;
};

inline Json feature_row(double kv, int64_t input, int64_t waiting, int64_t running, double prefix,
                        int64_t generated = 1) {
  return Json{{"kv_cache_percentage", kv},         {"input_token_length", input},
              {"num_request_waiting", waiting},    {"num_request_running", running},
              {"num_tokens_generated", generated}, {"prefix_cache_score", prefix}};
}

}  // namespace llmd::testing
