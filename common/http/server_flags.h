#pragma once
// The HTTP server limits every server executable exposes, with one env prefix per executable
// (e.g. LATENCY_MAX_BODY_BYTES for the trainer, PREDICT_MAX_BODY_BYTES for the predictor).
#include <string>

#include "common/config/options.h"
#include "common/http/server.h"

namespace llmd::http {

void add_server_limit_flags(config::Options& options, const std::string& env_prefix);
void apply_server_limit_flags(const config::Options& options, ServerOptions& server);

}  // namespace llmd::http
