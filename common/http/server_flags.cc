#include "common/http/server_flags.h"

namespace llmd::http {

void add_server_limit_flags(config::Options& o, const std::string& p) {
  o.add("max-body-bytes", p + "MAX_BODY_BYTES", "16777216", "Largest accepted request body");
  o.add("idle-timeout-ms", p + "IDLE_TIMEOUT_MS", "60000", "Keep-alive idle timeout");
  o.add("header-timeout-ms", p + "HEADER_TIMEOUT_MS", "10000", "Time allowed to send headers");
  o.add("body-budget-bytes", p + "BODY_BUDGET_BYTES", "268435456",
        "Request bodies held at once across connections; beyond it 503 + Retry-After before the "
        "body is read (bounds the memory concurrent large uploads take; 0 = no budget)");
}

void apply_server_limit_flags(const config::Options& o, ServerOptions& s) {
  s.body_limit = static_cast<std::size_t>(o.integer("max-body-bytes", 1024));
  s.idle_timeout = std::chrono::milliseconds(o.integer("idle-timeout-ms", 100));
  s.header_timeout = std::chrono::milliseconds(o.integer("header-timeout-ms", 100));
  s.body_budget = static_cast<std::size_t>(o.integer("body-budget-bytes", 0));
}

bool is_loopback_host(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

}  // namespace llmd::http
