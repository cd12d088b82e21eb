#include "bench/sim/block_pool.h"

#include <cassert>

namespace llmd::sim {

BlockPool::BlockPool(int64_t num_blocks)
    : ref_(static_cast<std::size_t>(num_blocks), 0),
      prev_(static_cast<std::size_t>(num_blocks), kNone),
      next_(static_cast<std::size_t>(num_blocks), kNone),
      hash_(static_cast<std::size_t>(num_blocks), 0),
      has_hash_(static_cast<std::size_t>(num_blocks), 0) {
  by_hash_.reserve(static_cast<std::size_t>(num_blocks));
  for (BlockId id = 0; id < static_cast<BlockId>(num_blocks); ++id) {
    push_back(id);
  }
}

double BlockPool::usage() const {
  if (ref_.empty()) {
    return 0.0;
  }
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(ref_.size());
}

std::optional<BlockId> BlockPool::lookup(BlockHash hash) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) {
    return std::nullopt;
  }
  return it->second;
}

int64_t BlockPool::cached_prefix(std::span<const BlockHash> hashes, int64_t max_blocks) const {
  int64_t n = 0;
  for (BlockHash h : hashes) {
    if (n >= max_blocks || by_hash_.find(h) == by_hash_.end()) {
      break;
    }
    ++n;
  }
  return n;
}

void BlockPool::touch(BlockId id) {
  auto& r = ref_[static_cast<std::size_t>(id)];
  if (r == 0) {
    unlink(id);
  }
  ++r;
}

std::optional<BlockId> BlockPool::allocate() {
  if (head_ == kNone) {
    return std::nullopt;
  }
  const BlockId id = head_;
  unlink(id);
  const auto i = static_cast<std::size_t>(id);
  if (has_hash_[i] != 0) {
    by_hash_.erase(hash_[i]);
    has_hash_[i] = 0;
    ++evictions_;
  }
  ref_[i] = 1;
  return id;
}

void BlockPool::cache(BlockId id, BlockHash hash) {
  const auto i = static_cast<std::size_t>(id);
  if (has_hash_[i] != 0) {
    return;
  }
  if (by_hash_.emplace(hash, id).second) {
    hash_[i] = hash;
    has_hash_[i] = 1;
  }
}

void BlockPool::release(BlockId id) {
  auto& r = ref_[static_cast<std::size_t>(id)];
  assert(r > 0);
  if (--r == 0) {
    push_back(id);
  }
}

std::vector<BlockHash> BlockPool::eviction_order() const {
  std::vector<BlockHash> out;
  for (BlockId id = head_; id != kNone; id = next_[static_cast<std::size_t>(id)]) {
    if (has_hash_[static_cast<std::size_t>(id)] != 0) {
      out.push_back(hash_[static_cast<std::size_t>(id)]);
    }
  }
  return out;
}

void BlockPool::unlink(BlockId id) {
  const auto i = static_cast<std::size_t>(id);
  const BlockId p = prev_[i];
  const BlockId n = next_[i];
  if (p != kNone) {
    next_[static_cast<std::size_t>(p)] = n;
  } else {
    head_ = n;
  }
  if (n != kNone) {
    prev_[static_cast<std::size_t>(n)] = p;
  } else {
    tail_ = p;
  }
  prev_[i] = kNone;
  next_[i] = kNone;
  --num_free_;
}

void BlockPool::push_back(BlockId id) {
  const auto i = static_cast<std::size_t>(id);
  prev_[i] = tail_;
  next_[i] = kNone;
  if (tail_ != kNone) {
    next_[static_cast<std::size_t>(tail_)] = id;
  } else {
    head_ = id;
  }
  tail_ = id;
  ++num_free_;
}

}  // namespace llmd::sim
