#include "uvicorn/command_line.h"

#include <charconv>
#include <optional>
#include <string_view>

namespace llmd::uvicorn {
namespace {

// A uvicorn option this entrypoint maps, and the variable uvicorn reads for it.
struct Setting {
  std::string_view flag;
  std::string_view env;
};
constexpr Setting kHost{"--host", "UVICORN_HOST"};
constexpr Setting kPort{"--port", "UVICORN_PORT"};
constexpr Setting kWorkers{"--workers", "UVICORN_WORKERS"};
constexpr Setting kLogLevel{"--log-level", "UVICORN_LOG_LEVEL"};
constexpr Setting kSettings[] = {kHost, kPort, kWorkers, kLogLevel};
constexpr std::string_view kAppEnv = "UVICORN_APP";

// The reference applications: the module's last component (any package before it, as in
// llm_d_latency_predictor.prediction_server:app) names the server.
struct Target {
  std::string_view module;
  const char* program;
  const char* workers_flag;
};
constexpr Target kTargets[] = {{"prediction_server", "predictor", "--workers"},
                               {"training_server", "trainer", "--io-threads"}};

// uvicorn's levels -> ours.
constexpr std::pair<std::string_view, const char*> kLogLevels[] = {
    {"critical", "critical"}, {"error", "error"}, {"warning", "warn"},
    {"info", "info"},         {"debug", "debug"}, {"trace", "trace"}};

struct Parsed {
  bool help = false;
  std::map<std::string, std::string, std::less<>> flags;  // "--host" -> value (last one wins)
  std::vector<std::string> positionals;
};

bool supported(std::string_view flag) {
  for (const auto& s : kSettings) {
    if (s.flag == flag) {
      return true;
    }
  }
  return false;
}

Parsed split(const std::vector<std::string>& args) {
  Parsed p;
  bool only_positionals = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positionals || a.size() < 2 || a[0] != '-') {
      p.positionals.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positionals = true;
      continue;
    }
    if (a == "--help") {
      p.help = true;
      continue;
    }
    const auto eq = a.find('=');
    const std::string flag = a.substr(0, eq);
    if (!supported(flag)) {
      throw UsageError("no such option: " + flag +
                       " (this entrypoint starts our trainer or "
                       "predictor and takes only --host, --port, --workers and --log-level)");
    }
    if (eq != std::string::npos) {
      p.flags[flag] = a.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      p.flags[flag] = args[++i];
    } else {
      throw UsageError("option " + flag + " requires an argument");
    }
  }
  return p;
}

// The value of `s` (flag, then its variable, then `fallback_env`) and where it came from.
struct Value {
  std::string text;
  std::string source;  // "--port" or "UVICORN_PORT"
};
std::optional<Value> lookup(const Parsed& p, const Environment& env, const Setting& s,
                            std::string_view fallback_env = {}) {
  if (auto it = p.flags.find(s.flag); it != p.flags.end()) {
    return Value{it->second, std::string(s.flag)};
  }
  for (std::string_view name : {s.env, fallback_env}) {
    if (auto it = env.find(std::string(name));
        !name.empty() && it != env.end() && !it->second.empty()) {
      return Value{it->second, std::string(name)};
    }
  }
  return std::nullopt;
}

std::string checked_int(const Value& v, int min, int max) {
  int n = 0;
  const char* end = v.text.data() + v.text.size();
  auto [ptr, ec] = std::from_chars(v.text.data(), end, n);
  if (v.text.empty() || ec != std::errc() || ptr != end) {
    throw UsageError("invalid value for " + v.source + ": '" + v.text + "' is not an integer");
  }
  if (n < min || n > max) {
    throw UsageError("invalid value for " + v.source + ": " + v.text + " is not in [" +
                     std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return std::to_string(n);
}

const char* our_log_level(const Value& v) {
  for (const auto& [theirs, ours] : kLogLevels) {
    if (v.text == theirs) {
      return ours;
    }
  }
  throw UsageError("invalid value for " + v.source + ": '" + v.text +
                   "' is not one of critical, error, warning, info, debug, trace");
}

const Target& target_of(const std::string& app) {
  const auto colon = app.find(':');
  if (colon == std::string::npos || app.substr(colon + 1) != "app") {
    throw UsageError("APP must be <module>:app, got '" + app + "'");
  }
  std::string_view module = std::string_view(app).substr(0, colon);
  if (const auto dot = module.rfind('.'); dot != std::string_view::npos) {
    module.remove_prefix(dot + 1);
  }
  for (const auto& t : kTargets) {
    if (module == t.module) {
      return t;
    }
  }
  throw UsageError("APP '" + app +
                   "' is not a reference sidecar (prediction_server:app or "
                   "training_server:app, with any package before the module)");
}

// UVICORN_* variables: those mapped here are unset before the exec; any other is refused, since
// uvicorn would act on it and our server would not.
std::vector<std::string> consumed_envs(const Environment& env) {
  std::vector<std::string> out;
  for (const auto& [name, value] : env) {
    if (!name.starts_with("UVICORN_") || value.empty()) {
      continue;
    }
    bool mapped = name == kAppEnv;
    for (const auto& s : kSettings) {
      mapped = mapped || name == s.env;
    }
    if (!mapped) {
      throw UsageError(name +
                       " is a uvicorn setting this entrypoint does not support (it maps "
                       "UVICORN_HOST, UVICORN_PORT, UVICORN_WORKERS, UVICORN_LOG_LEVEL and "
                       "UVICORN_APP)");
    }
    out.push_back(name);
  }
  return out;
}

}  // namespace

Launch parse_command_line(const std::vector<std::string>& args, const Environment& env) {
  const Parsed p = split(args);
  Launch l;
  if (p.help) {
    l.help = true;
    return l;
  }
  l.consumed_envs = consumed_envs(env);
  std::string app;
  if (p.positionals.size() > 1) {
    throw UsageError("unexpected extra argument '" + p.positionals[1] + "'");
  }
  if (!p.positionals.empty()) {
    app = p.positionals[0];
  } else if (auto it = env.find(std::string(kAppEnv)); it != env.end() && !it->second.empty()) {
    app = it->second;
  } else {
    throw UsageError("missing argument APP (prediction_server:app or training_server:app)");
  }
  const Target& t = target_of(app);
  l.program = t.program;
  const auto host = lookup(p, env, kHost);
  const auto port = lookup(p, env, kPort);
  l.args = {"--host", host ? host->text : "127.0.0.1", "--port",
            port ? checked_int(*port, 0, 65535) : "8000"};
  if (const auto workers = lookup(p, env, kWorkers, "WEB_CONCURRENCY")) {
    l.args.insert(l.args.end(), {t.workers_flag, checked_int(*workers, 1, 256)});
  }
  if (const auto level = lookup(p, env, kLogLevel)) {
    l.args.insert(l.args.end(), {"--log-level", our_log_level(*level)});
  }
  return l;
}

std::string usage() {
  return "Usage: uvicorn [OPTIONS] APP\n"
         "\n"
         "uvicorn's command line for the C++ latency sidecars: APP prediction_server:app starts\n"
         "`predictor`, training_server:app starts `trainer` (any package before the module is\n"
         "accepted), found next to this program or on PATH. Options (uvicorn's defaults):\n"
         "  --host TEXT       bind address (UVICORN_HOST; default 127.0.0.1)\n"
         "  --port INTEGER    port (UVICORN_PORT; default 8000)\n"
         "  --workers INTEGER worker processes become threads of one server: the predictor's\n"
         "                    --workers, the trainer's --io-threads (UVICORN_WORKERS, then\n"
         "                    WEB_CONCURRENCY; default: the server's own)\n"
         "  --log-level TEXT  critical|error|warning|info|debug|trace (UVICORN_LOG_LEVEL)\n"
         "  --help            show this message and exit\n"
         "Any other option or UVICORN_* variable exits 2 naming it; the server's own flags and\n"
         "environment (e.g. `predictor --help`) configure the rest.\n";
}

}  // namespace llmd::uvicorn
