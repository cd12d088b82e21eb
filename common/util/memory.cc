#include "common/util/memory.h"

#include <malloc.h>

namespace llmd::util {

void return_large_blocks_to_the_system() {
  // Setting it fixes the threshold (no dynamic adjustment).
  mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
}

void serve_small_blocks_without_fastbins() {
  mallopt(M_MXFAST, 0);
}

}  // namespace llmd::util
