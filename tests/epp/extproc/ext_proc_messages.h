#pragma once
// Building and reading Envoy ext_proc messages in tests that play the gateway (the in-process
// ExtProcServer test and the gateway-mode e2e test).
#include <string>

#include "epp/extproc/external_processor.pb.h"

namespace llmd::testing {

inline envoy::service::ext_proc::v3::HeaderValue header(const std::string& k,
                                                        const std::string& v) {
  envoy::service::ext_proc::v3::HeaderValue h;
  h.set_key(k);
  h.set_raw_value(v);
  return h;
}

// The value a header mutation sets for `key` ("" = not set).
inline std::string mutation_value(const envoy::service::ext_proc::v3::HeaderMutation& m,
                                  const std::string& key) {
  for (const auto& o : m.set_headers()) {
    if (o.header().key() == key) {
      return o.header().raw_value().empty() ? o.header().value() : o.header().raw_value();
    }
  }
  return {};
}

}  // namespace llmd::testing
