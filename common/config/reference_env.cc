#include "common/config/reference_env.h"

#include <charconv>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/config/options.h"

extern char** environ;

namespace llmd::config {
namespace {

using Kind = ReferenceEnv::Kind;

constexpr const char* kScalerWhy =
    "only bayesian_ridge models have a feature scaler; xgboost, the one model type served here "
    "(LATENCY_MODEL_TYPE), has none, and the reference neither writes nor reads it for xgboost";
constexpr const char* kInFlightWhy =
    "the prefill/decode tokens-in-flight columns are always part of the feature schema";
constexpr const char* kEncoderWhy = "the encoder columns are always part of the TTFT schema";
constexpr const char* kUvicornWhy =
    "a setting of uvicorn, not of this server; start it through the uvicorn entrypoint "
    "(/usr/local/bin/uvicorn), which maps --host, --port, --workers and --log-level";

constexpr ReferenceEnv kTrainer[] = {
    {"POD_NAME", Kind::kIdentity, nullptr, "the pod's name, from metadata.name in the charts"},
    {"SERVER_TYPE", Kind::kIdentity, nullptr, "the sidecar's role as the charts name it"},
    {"LATENCY_TTFT_SCALER_PATH", Kind::kUnused, nullptr, kScalerWhy},
    {"LATENCY_TPOT_SCALER_PATH", Kind::kUnused, nullptr, kScalerWhy},
    {"LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH", Kind::kRefused, nullptr,
     "a target is fitted once LATENCY_MIN_SAMPLES_FOR_RETRAIN samples exist, with or without a "
     "model file; set that instead"},
    {"LATENCY_SAMPLE_WEIGHTING_FOR_PREFIX_CACHE", Kind::kOnly, "false",
     "samples are not weighted by their prefix-cache score"},
    {"LATENCY_TPOT_ZERO_TOKEN_COUNT", Kind::kOnly, "false",
     "TPOT is trained on the real num_tokens_generated, which predictions carry too (no "
     "train/serve skew)"},
    {"LATENCY_ENABLE_TOKEN_IN_FLIGHT_FEATURES", Kind::kOnly, "true", kInFlightWhy},
    {"LATENCY_ENABLE_ENCODER_FEATURES", Kind::kOnly, "true", kEncoderWhy},
    {"UVICORN_*", Kind::kRefused, nullptr, kUvicornWhy},
};

constexpr ReferenceEnv kPredictor[] = {
    {"POD_NAME", Kind::kIdentity, nullptr, "the pod's name, from metadata.name in the charts"},
    {"SERVER_TYPE", Kind::kIdentity, nullptr, "the sidecar's role as the charts name it"},
    {"LOCAL_TTFT_SCALER_PATH", Kind::kUnused, nullptr, kScalerWhy},
    {"LOCAL_TPOT_SCALER_PATH", Kind::kUnused, nullptr, kScalerWhy},
    {"OMP_NUM_THREADS", Kind::kOnly, "1",
     "each prediction call runs on one thread (XGBoost nthread=1); parallel calls come from "
     "--workers (UVICORN_WORKERS)"},
    {"DOWNLOAD_RETRIES", Kind::kRefused, nullptr,
     "a failed download keeps the current model and is tried again at the next sync round "
     "(MODEL_SYNC_INTERVAL_SEC)"},
    {"LATENCY_ENSEMBLE_MODE", Kind::kOnly, "true",
     "the predictor serves the ensemble whenever the trainer publishes it; switch it off on the "
     "trainer (LATENCY_ENSEMBLE_MODE=false there)"},
    {"LATENCY_ENABLE_TOKEN_IN_FLIGHT_FEATURES", Kind::kOnly, "true", kInFlightWhy},
    {"LATENCY_ENABLE_ENCODER_FEATURES", Kind::kOnly, "true", kEncoderWhy},
    {"UVICORN_*", Kind::kRefused, nullptr, kUvicornWhy},
};

bool parse_int(std::string_view text, long long& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

// kOnly: throws unless `value` means the same as `entry.only`.
void check_only(const ReferenceEnv& entry, const std::string& name, const std::string& value) {
  const std::string_view only = entry.only;
  bool same = false;
  if (only == "true" || only == "false") {
    auto b = parse_boolean(value);
    if (!b) {
      throw std::invalid_argument(fmt::format("{}: expected true/false, got '{}'", name, value));
    }
    same = *b == (only == "true");
  } else {
    long long got = 0;
    long long want = 0;
    if (!parse_int(value, got)) {
      throw std::invalid_argument(fmt::format("{}: expected an integer, got '{}'", name, value));
    }
    same = parse_int(only, want) && got == want;
  }
  if (!same) {
    throw std::invalid_argument(
        fmt::format("{}={} is not supported, only {}: {}", name, value, entry.only, entry.why));
  }
}

// The entry covering `name`: an exact entry first, then a prefix entry (unless an option reads
// `name`); null when none does.
const ReferenceEnv* entry_for(std::span<const ReferenceEnv> table, const std::string& name,
                              const std::set<std::string>& option_envs) {
  for (const auto& e : table) {
    if (name == e.name) {
      return &e;
    }
  }
  if (option_envs.count(name) > 0) {
    return nullptr;
  }
  for (const auto& e : table) {
    std::string_view n = e.name;
    if (n.ends_with('*') && std::string_view(name).starts_with(n.substr(0, n.size() - 1))) {
      return &e;
    }
  }
  return nullptr;
}

}  // namespace

Environment current_environment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string_view::npos && eq + 1 < kv.size()) {
      env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    }
  }
  return env;
}

std::vector<std::string> check_reference_env(std::span<const ReferenceEnv> table,
                                             const Environment& env,
                                             const std::set<std::string>& option_envs) {
  std::vector<std::string> lines;
  for (const auto& [name, value] : env) {
    const ReferenceEnv* e = entry_for(table, name, option_envs);
    if (e == nullptr || value.empty()) {
      continue;
    }
    switch (e->kind) {
      case Kind::kIdentity:
        lines.push_back(fmt::format("{}={} ({})", name, value, e->why));
        break;
      case Kind::kUnused:
        lines.push_back(fmt::format("{}={} is accepted and unused: {}", name, value, e->why));
        break;
      case Kind::kOnly:
        check_only(*e, name, value);
        lines.push_back(
            fmt::format("{}={}, which is what this server does: {}", name, value, e->why));
        break;
      case Kind::kRefused:
        throw std::invalid_argument(
            fmt::format("{}={} is not supported: {}; unset it", name, value, e->why));
    }
  }
  return lines;
}

void log_reference_env(std::span<const ReferenceEnv> table,
                       const std::set<std::string>& option_envs) {
  for (const auto& line : check_reference_env(table, current_environment(), option_envs)) {
    spdlog::info("{}", line);
  }
}

std::span<const ReferenceEnv> trainer_reference_env() {
  return kTrainer;
}
std::span<const ReferenceEnv> predictor_reference_env() {
  return kPredictor;
}

}  // namespace llmd::config
