#pragma once
// Upstream's parameter common to every picker: maxNumOfEndpoints, how many endpoints the pick
// returns (default 1; the gateway tries the others in order when the first fails).
#include <string>

#include "epp/plugins/common/params.h"

namespace llmd::epp {

// Reads maxNumOfEndpoints; "" when absent or 1, else why it is refused.
inline std::string read_max_num_of_endpoints(ParamReader& r) {
  int64_t n = 1;
  r.get("maxNumOfEndpoints", n);
  if (n == 1) {
    return {};
  }
  return "parameter 'maxNumOfEndpoints' must be 1, got " + std::to_string(n) +
         ": this EPP picks one endpoint per request (x-gateway-destination-endpoint carries one "
         "address); in proxy mode a failed connect or 5xx is retried once on the next-best pod";
}

}  // namespace llmd::epp
