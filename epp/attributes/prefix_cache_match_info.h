#pragma once
// Written by approx-prefix-cache-producer; read by prefix-cache-affinity-filter, the
// prefix-cache scorer and the composite fallback. Absent means "no prefix information":
// consumers treat it as score 0.
#include <cstddef>

namespace llmd::epp {

struct PrefixCacheMatchInfo {
  std::size_t matched_blocks = 0;  // leading prompt blocks the pod is believed to hold
  std::size_t total_blocks = 0;    // full blocks of the prompt (0 when shorter than one block)
  std::size_t block_chars = 0;     // prompt characters per block (0: not told)
  double score() const {
    return total_blocks == 0
               ? 0.0
               : static_cast<double>(matched_blocks) / static_cast<double>(total_blocks);
  }
};

}  // namespace llmd::epp
