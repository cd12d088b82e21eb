#pragma once
// Environment names of the reference Python sidecars (GIE latencypredictor/, llm-d's
// llm-d-latency-predictor) and of the charts that run them, that are no option of ours. Each is
// honoured with the reference's meaning or refused at start with the reason, so that a value
// from a chart is never silently ignored. Names that are our options too (LATENCY_MODEL_TYPE,
// PREDICT_PORT, ...) are not listed: Options reads and checks them.
// docs/coming-from-upstream.md is the user's view of these tables.
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace llmd::config {

struct ReferenceEnv {
  enum class Kind {
    kIdentity,  // who this sidecar is (POD_NAME, SERVER_TYPE): logged
    kUnused,    // the reference reads it only in a mode that is refused here anyway: logged
    kOnly,      // one value is what we implement (`only`); any other value is refused
    kRefused,   // not supported: refused whatever its value
  };
  // A name ending in '*' is a prefix: it covers every variable so named that no option reads.
  const char* name;
  Kind kind;
  const char* only;  // kOnly: "true" or "false" (a boolean), else an integer such as "1"
  const char* why;
};

using Environment = std::map<std::string, std::string>;

// This process's environment (empty values count as unset, as in Options).
Environment current_environment();

// Checks every variable of `env` that `table` names. Throws std::invalid_argument naming the
// first refused or malformed one and why; otherwise returns one line per variable set, for the
// start-up log. `option_envs` (Options::env_names()) are exempt from prefix entries.
std::vector<std::string> check_reference_env(std::span<const ReferenceEnv> table,
                                             const Environment& env,
                                             const std::set<std::string>& option_envs);

// check_reference_env() on this process's environment, each line logged at info.
void log_reference_env(std::span<const ReferenceEnv> table,
                       const std::set<std::string>& option_envs);

// The names each sidecar accepts or refuses besides its options.
std::span<const ReferenceEnv> trainer_reference_env();
std::span<const ReferenceEnv> predictor_reference_env();

}  // namespace llmd::config
