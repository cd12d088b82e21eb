// A seeded fuzzer against the real trainer, predictor and EPP: mutations of valid bodies
// (bytes dropped, inserted, flipped; values replaced by other types, deep nesting, huge
// arrays, many fields). Every answer must be an HTTP answer with a JSON error body on 4xx (the
// sidecars' `detail`, the EPP's OpenAI `error`), never a dropped connection or a 5xx; every
// process must stay ready with bounded peak memory. Bounded in count and time (~1 min).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

long peak_rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::stol(line.substr(6));
    }
  }
  return -1;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string mutate(const Json& valid) {
    switch (pick(6)) {
      case 0:
      case 1:
        return mutate_bytes(valid.dump());
      case 2:
      case 3: {
        Json j = valid;
        replace_random_value(j);
        return with_deep_nesting(j.dump());
      }
      case 4: {
        Json j = valid;
        for (int i = 0; i < 1 + pick(500); ++i) {
          j["extra_" + std::to_string(i)] = random_value(2);
        }
        return with_deep_nesting(j.dump());
      }
      default: {
        Json j = valid;
        replace_random_value(j, true);
        return with_deep_nesting(j.dump());
      }
    }
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }

  std::string mutate_bytes(std::string s) {
    static const std::string alphabet = "{}[]\",:0123456789-.eE tfn\\\x01\xff";
    for (int k = 0; k < 1 + pick(8) && !s.empty(); ++k) {
      const std::size_t at = static_cast<std::size_t>(pick(static_cast<int>(s.size())));
      switch (pick(3)) {
        case 0:
          s.erase(at, 1 + pick(4));
          break;
        case 1:
          s.insert(at, 1,
                   alphabet[static_cast<std::size_t>(pick(static_cast<int>(alphabet.size())))]);
          break;
        default:
          s[at] = alphabet[static_cast<std::size_t>(pick(static_cast<int>(alphabet.size())))];
      }
    }
    return s;
  }

  Json random_value(int depth, bool large = false) {
    switch (pick(large ? 10 : 8)) {
      case 0:
        return nullptr;
      case 1:
        return pick(2) == 0;
      case 2:
        return std::uniform_int_distribution<int64_t>(INT64_MIN, INT64_MAX)(rng_);
      case 3:
        return std::uniform_real_distribution<double>(-1e300, 1e300)(rng_);
      case 4:
        return std::string(static_cast<std::size_t>(pick(50)), 'x');
      case 5:
        return "yes";
      case 6: {
        Json a = Json::array();
        for (int i = 0; i < pick(4) && depth > 0; ++i) a.push_back(random_value(depth - 1));
        return a;
      }
      case 7: {
        Json o = Json::object();
        for (int i = 0; i < pick(4) && depth > 0; ++i)
          o["k" + std::to_string(i)] = random_value(depth - 1);
        return o;
      }
      case 8:  // deep nesting, spliced into the text after dumping (see with_deep_nesting)
        return kDeep;
      default: {  // a huge array
        Json a = Json::array();
        for (int i = 0; i < 20000 + pick(80000); ++i) a.push_back(i);
        return a;
      }
    }
  }

  // Replaces one value somewhere in `j` (objects and arrays walked at random).
  void replace_random_value(Json& j, bool large = false) {
    Json* at = &j;
    for (int step = 0; step < 4; ++step) {
      if (at->is_object() && !at->empty()) {
        auto it = at->begin();
        std::advance(it, pick(static_cast<int>(at->size())));
        at = &it.value();
      } else if (at->is_array() && !at->empty()) {
        at = &(*at)[static_cast<std::size_t>(pick(static_cast<int>(at->size())))];
      } else {
        break;
      }
      if (pick(3) == 0) {
        break;
      }
    }
    *at = random_value(3, large);
  }

  // Dumping a 100,000-deep value would overflow this process's own stack: the placeholder is
  // replaced in the text instead.
  std::string with_deep_nesting(std::string text) {
    const std::string placeholder = Json(kDeep).dump();
    for (auto at = text.find(placeholder); at != std::string::npos; at = text.find(placeholder)) {
      const std::size_t depth = 100 + static_cast<std::size_t>(pick(100000));
      text.replace(at, placeholder.size(), std::string(depth, '[') + std::string(depth, ']'));
    }
    return text;
  }

  static constexpr const char* kDeep = "__deep_nesting__";
  std::mt19937_64 rng_;
};

struct Target {
  std::string name;
  uint16_t port;
  std::string path;
  Json valid;
  bool openai;  // error bodies: OpenAI's {"error": ...} instead of {"detail": ...}
};

TEST(Fuzz, NoCrashNoDropJsonErrorsBoundedMemory) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  Stack stack(o);
  ASSERT_TRUE(stack.ready) << stack.logs();
  Json row = {{"kv_cache_percentage", 0.5}, {"input_token_length", 100},
              {"num_request_waiting", 1},   {"num_request_running", 2},
              {"num_tokens_generated", 1},  {"prefix_cache_score", 0.2}};
  Json entry = row;
  entry["actual_ttft_ms"] = 20.0;
  entry["actual_tpot_ms"] = 5.0;
  std::vector<Target> targets = {
      {"trainer", stack.trainer->port, "/add_training_data_bulk", Json{{"entries", {entry, entry}}},
       false},
      {"predictor", stack.predictor_ports[0], "/predict/bulk/strict",
       Json{{"requests", {row, row}}}, false},
      {"predictor", stack.predictor_ports[0], "/predict", row, false},
      {"predictor", stack.predictor_ports[0], "/predict/bulk/columnar",
       Json{{"kv_cache_percentage", {0.5, 0.25}},
            {"input_token_length", 100},
            {"num_request_waiting", {1, 0}},
            {"num_request_running", 2},
            {"num_tokens_generated", 1},
            {"prefix_cache_score", {0.2, 0.0}},
            {"pod_type", {"", "decode"}}},
       false},
      {"epp", stack.epp_port, "/v1/completions",
       Json{{"model", stack.model},
            {"prompt", "hello there"},
            {"max_tokens", 2},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}},
       true},
      {"epp", stack.epp_port, "/v1/chat/completions",
       Json{{"model", stack.model},
            {"messages", {{{"role", "user"}, {"content", "hi"}}}},
            {"max_tokens", 2},
            {"nvext", {{"agent_hints", {{"priority", 1}}}}}},
       true},
  };
  Mutator mutate(20261123);
  std::map<std::string, int> sent, client_errors;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(45);
  for (int i = 0; i < 1500 && std::chrono::steady_clock::now() < deadline; ++i) {
    const Target& t = targets[static_cast<std::size_t>(i) % targets.size()];
    const std::string body = mutate.mutate(t.valid);
    http::HttpClient c("127.0.0.1", t.port, std::chrono::seconds(20));
    auto r = c.post(t.path, body);
    ++sent[t.name];
    ASSERT_NE(r.status, 0) << t.name << " " << t.path << " dropped the connection (" << r.error
                           << ") on: " << body.substr(0, 300);
    ASSERT_LT(r.status, 500) << t.name << " " << t.path << " answered " << r.status << ": "
                             << r.body.substr(0, 300) << " to: " << body.substr(0, 300);
    if (r.status >= 400) {
      ++client_errors[t.name];
      Json e = Json::parse(r.body, nullptr, false);
      ASSERT_FALSE(e.is_discarded())
          << t.name << " " << r.status << " body is not JSON: " << r.body.substr(0, 200);
      // The EPP's own errors are OpenAI error objects; a pod's (vLLM's {"object": "error", ...})
      // pass through as the pod wrote them.
      const bool shaped =
          t.openai ? e.contains("error") || e.value("object", "") == "error" : e.contains("detail");
      EXPECT_TRUE(shaped) << t.name << ": " << r.body.substr(0, 200);
      EXPECT_LT(r.body.size(), 100000u) << t.name;
    }
  }
  for (const auto& [name, n] : sent) {
    std::cerr << name << ": " << n << " requests, " << client_errors[name] << " answered 4xx\n";
    EXPECT_GT(client_errors[name], n / 4) << "the mutations must mostly be invalid";
  }
  // Everyone is still up and ready, and no request made a process balloon.
  EXPECT_EQ(http::HttpClient("127.0.0.1", stack.trainer->port).get("/readyz").status, 200);
  EXPECT_EQ(http::HttpClient("127.0.0.1", stack.predictor_ports[0]).get("/readyz").status, 200);
  EXPECT_EQ(http::HttpClient("127.0.0.1", stack.health_port).get("/readyz").status, 200);
  for (auto [name, pid] : {std::pair<const char*, pid_t>{"trainer", stack.trainer->process->pid()},
                           {"predictor", stack.predictors[0]->pid()},
                           {"epp", stack.epp->pid()}}) {
    const long kib = peak_rss_kib(pid);
    std::cerr << name << " peak RSS " << kib / 1024 << " MiB\n";
    EXPECT_LT(kib, 1024 * 1024) << name << " peak RSS over 1 GiB";
  }
}

}  // namespace
}  // namespace llmd::testing
