#pragma once
// The HTTP server limits every server executable exposes, with one env prefix per executable
// (e.g. LATENCY_MAX_BODY_BYTES for the trainer, PREDICT_MAX_BODY_BYTES for the predictor).
#include <string>

#include "common/config/options.h"
#include "common/http/server.h"

namespace llmd::http {

void add_server_limit_flags(config::Options& options, const std::string& env_prefix);
void apply_server_limit_flags(const config::Options& options, ServerOptions& server);

// True for an address only this machine reaches (127.x.y.z, ::1, localhost): a server bound
// elsewhere without an admin token says so at start.
bool is_loopback_host(const std::string& host);

}  // namespace llmd::http
