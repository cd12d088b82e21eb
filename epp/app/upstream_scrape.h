#pragma once
// The Go EPP's scraping flags (--model-server-metrics-*, the engine metric flags) over the
// config file's data layer: a flag given replaces what the file (or its default) says, for
// the default engine's mapping. Run at start and on every reload, so a reloaded file keeps
// the flags' settings.
#include <string>

#include "epp/app/epp_options.h"
#include "epp/datastore/scrape_config.h"

namespace llmd::epp {

// Throws std::invalid_argument naming the flag when a metric name is not a selector.
ScrapeConfig with_upstream_flags(ScrapeConfig config, const UpstreamSettings& flags);

}  // namespace llmd::epp
