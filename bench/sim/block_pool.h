#pragma once
// KV-cache block pool with prefix caching (vLLM V1's BlockPool, simplified).
// Blocks are reference-counted. A block whose reference count drops to zero joins the tail of
// the free queue but keeps its hash, so a later request with the same prefix can take it back
// (a prefix-cache hit). Allocation pops the head of the free queue, i.e. the least recently
// released block, evicting its cached hash: LRU eviction among unreferenced blocks.
// Plain value type, not thread-safe; copyable (an engine copy carries its cache).
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "bench/sim/tokens.h"

namespace llmd::sim {

using BlockId = int32_t;

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_.size()); }
  // Unreferenced blocks, cached or not (what vLLM counts as free).
  int64_t num_free() const { return num_free_; }
  // Blocks that currently hold a cached hash (referenced or not).
  int64_t num_cached() const { return static_cast<int64_t>(by_hash_.size()); }
  // 1 - free/total, vLLM's kv_cache_usage_perc.
  double usage() const;
  int64_t evictions() const { return evictions_; }

  // Block holding `hash`, if cached.
  std::optional<BlockId> lookup(BlockHash hash) const;
  // Number of leading hashes that are cached (stops at the first miss), at most `max_blocks`.
  int64_t cached_prefix(std::span<const BlockHash> hashes, int64_t max_blocks) const;
  int32_t ref_count(BlockId id) const { return ref_[static_cast<std::size_t>(id)]; }

  // Takes a reference on a cached block (removing it from the free queue if unreferenced).
  void touch(BlockId id);
  // Pops the LRU free block (evicting its hash) with one reference; nullopt when none is free.
  std::optional<BlockId> allocate();
  // Records that `id` holds the full block `hash`. Ignored when another block already holds it.
  void cache(BlockId id, BlockHash hash);
  // Drops one reference; at zero the block becomes the most recently used free block.
  void release(BlockId id);

  // Hashes of the free (unreferenced) cached blocks in eviction order, LRU first (for tests).
  std::vector<BlockHash> eviction_order() const;

 private:
  static constexpr BlockId kNone = -1;
  void unlink(BlockId id);
  void push_back(BlockId id);

  std::vector<int32_t> ref_;
  std::vector<BlockId> prev_;
  std::vector<BlockId> next_;
  std::vector<BlockHash> hash_;
  std::vector<uint8_t> has_hash_;
  std::unordered_map<BlockHash, BlockId> by_hash_;
  BlockId head_ = kNone;
  BlockId tail_ = kNone;
  int64_t num_free_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace llmd::sim
