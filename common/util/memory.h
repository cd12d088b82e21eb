#pragma once
// Process-wide allocator settings for servers that hold large request bodies for a while.

namespace llmd::util {

// Blocks of 1 MiB and more (request bodies, long prompts, parse buffers) are mapped on their own
// and returned to the system when freed. glibc's default raises that threshold up to 32 MiB
// after the first such block is freed, after which a burst of large bodies stays in the heap
// (hundreds of MiB of RSS long after the burst). Call once at start, before other threads.
void return_large_blocks_to_the_system();

// Turns glibc's fastbins off; small blocks are still cached per thread (tcache). With fastbins,
// every allocation above the tcache's sizes (the EPP's per-request candidate tables, feature
// rows and predictions run to a few KiB) first consolidates the fastbins freed since the last
// one: ~6 % of the EPP's CPU at 3,000 req/s, and 9 % less CPU per request without them
// (bench/epp_overhead, 100 pods, in process). Call once at start, before other threads.
void serve_small_blocks_without_fastbins();

}  // namespace llmd::util
