#pragma once
// The Go EPP's command line on ours, so that a GIE (v1.5.0) or llm-d-router chart runs this EPP
// with its own args. Every upstream flag is accepted with upstream's meaning:
// - an alias where ours is the same setting (--grpc-port = --ext-proc-port, --config-file =
//   --config, --ha-enable-leader-election = --leader-elect, --endpoint-selector =
//   --pool-selector, --grpc-health-port = --health-port, whose port answers gRPC health too);
// - a flag of its own where we had none (--pool-group, --config-text, --zap-*, -v,
//   --secure-serving, --cert-path, the scraping flags, ...), landing in EppOptions::upstream or
//   in a component's options;
// - refused with a message naming it and why where the feature does not exist here (e.g.
//   --emit-endpoint-scores=true, --tls-cipher-suites).
// They are listed apart in --help ("Upstream (GIE / llm-d) flags"). docs/coming-from-upstream.md
// has the table.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/config/flag_table.h"

namespace llmd::epp {

struct EppOptions;

// Raw values read by the rows and resolved by resolve_upstream_flags().
struct UpstreamFlagValues {
  std::string config_text, pool_group, target_ports, zap_encoder, zap_log_level;
  std::string zap_stacktrace_level, zap_time_encoding, grpc_max_recv, grpc_max_send;
  std::string tls_min_version, tls_cipher_suites, metrics_client_ca, metrics_cert_dir;
  std::chrono::milliseconds refresh_interval{50}, staleness{2000};
  int64_t verbosity = 2;
  bool tracing = false, emit_endpoint_scores = false, disable_subset_filter = false;
};

// Adds the rows; `e`'s fields and `raw` must outlive the table.
void add_upstream_flags(config::FlagTable& t, EppOptions& e, UpstreamFlagValues& raw);
// After FlagTable::read(): checks and moves `raw` into `e` (throws std::invalid_argument
// naming the flag).
void resolve_upstream_flags(const config::FlagTable& t, EppOptions& e,
                            const UpstreamFlagValues& raw);

// "10MiB", "25MB", "4194304" -> bytes (Kubernetes/Go quantity suffixes); nullopt when not one.
std::optional<std::size_t> parse_byte_size(const std::string& text);

}  // namespace llmd::epp
