#pragma once
// Process-wide allocator settings for servers that hold large request bodies for a while.

namespace llmd::util {

// Blocks of 1 MiB and more (request bodies, long prompts, parse buffers) are mapped on their own
// and returned to the system when freed. glibc's default raises that threshold up to 32 MiB
// after the first such block is freed, after which a burst of large bodies stays in the heap
// (hundreds of MiB of RSS long after the burst). Call once at start, before other threads.
void return_large_blocks_to_the_system();

}  // namespace llmd::util
