#include "epp/datastore/prefix_index.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace llmd::epp {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
// Little-endian loads (x86/ARM hosts); memcpy keeps unaligned reads defined.
inline uint64_t read64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t read32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  return rotl(acc, 31) * kP1;
}
inline uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round(0, val);
  return acc * kP1 + kP4;
}

}  // namespace

uint64_t xxh64(std::string_view data, uint64_t seed) {
  const char* p = data.data();
  const char* end = p + data.size();
  uint64_t h;
  if (data.size() >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    const char* limit = end - 32;
    do {
      v1 = round(v1, read64(p));
      v2 = round(v2, read64(p + 8));
      v3 = round(v3, read64(p + 16));
      v4 = round(v4, read64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge_round(h, v1);
    h = merge_round(h, v2);
    h = merge_round(h, v3);
    h = merge_round(h, v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<uint64_t>(data.size());
  for (; p + 8 <= end; p += 8) {
    h ^= round(0, read64(p));
    h = rotl(h, 27) * kP1 + kP4;
  }
  if (p + 4 <= end) {
    h ^= static_cast<uint64_t>(read32(p)) * kP1;
    h = rotl(h, 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) {
    h ^= static_cast<uint64_t>(static_cast<unsigned char>(*p)) * kP5;
    h = rotl(h, 11) * kP1;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

// One pod's LRU of block hashes: nodes in a vector linked by index (16 bytes per block plus the
// hash map entry), so memory per pod is bounded by its capacity.
class PrefixIndex::PodLru {
 public:
  void insert(std::span<const uint64_t> hashes, std::size_t capacity) {
    std::unique_lock lock(mu_);
    capacity_ = capacity;
    // Reverse order: the leading blocks end up most recent, so eviction trims a prompt's tail
    // first and the prefix chain that match() walks stays intact longest (as vLLM evicts).
    for (auto it = hashes.rbegin(); it != hashes.rend(); ++it) {
      touch(*it);
    }
    while (index_.size() > capacity_) {
      evict_tail();
    }
  }

  std::size_t match(std::span<const uint64_t> hashes) const {
    std::shared_lock lock(mu_);
    std::size_t n = 0;
    while (n < hashes.size() && index_.count(hashes[n]) != 0) {
      ++n;
    }
    return n;
  }

  std::size_t size() const {
    std::shared_lock lock(mu_);
    return index_.size();
  }

 private:
  static constexpr uint32_t kNil = std::numeric_limits<uint32_t>::max();
  struct Node {
    uint64_t hash;
    uint32_t prev;
    uint32_t next;
  };

  void touch(uint64_t hash) {
    auto found = index_.find(hash);
    if (found != index_.end()) {
      unlink(found->second);
      push_front(found->second);
      return;
    }
    if (index_.size() >= capacity_) {
      evict_tail();
    }
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
      nodes_[slot].hash = hash;
    } else {
      slot = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back(Node{hash, kNil, kNil});
    }
    index_.emplace(hash, slot);
    push_front(slot);
  }

  void evict_tail() {
    if (tail_ == kNil) {
      return;
    }
    uint32_t slot = tail_;
    unlink(slot);
    index_.erase(nodes_[slot].hash);
    free_.push_back(slot);
  }

  void unlink(uint32_t slot) {
    Node& n = nodes_[slot];
    (n.prev == kNil ? head_ : nodes_[n.prev].next) = n.next;
    (n.next == kNil ? tail_ : nodes_[n.next].prev) = n.prev;
    n.prev = n.next = kNil;
  }

  void push_front(uint32_t slot) {
    Node& n = nodes_[slot];
    n.prev = kNil;
    n.next = head_;
    if (head_ != kNil) {
      nodes_[head_].prev = slot;
    }
    head_ = slot;
    if (tail_ == kNil) {
      tail_ = slot;
    }
  }

  mutable std::shared_mutex mu_;
  // All guarded by mu_.
  std::size_t capacity_ = kDefaultCapacity;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  std::unordered_map<uint64_t, uint32_t> index_;
  uint32_t head_ = kNil;  // most recent
  uint32_t tail_ = kNil;  // least recent
};

std::vector<uint64_t> PrefixIndex::block_hashes(std::string_view model, std::string_view prompt,
                                                std::size_t block_chars, std::size_t max_blocks) {
  std::vector<uint64_t> out;
  if (block_chars == 0) {
    return out;
  }
  std::size_t n = std::min(prompt.size() / block_chars, max_blocks);
  out.reserve(n);
  uint64_t h = xxh64(model, 0);
  for (std::size_t i = 0; i < n; ++i) {
    h = xxh64(prompt.substr(i * block_chars, block_chars), h);
    out.push_back(h);
  }
  return out;
}

std::shared_ptr<PrefixIndex::PodLru> PrefixIndex::find(const std::string& pod) const {
  std::shared_lock lock(mu_);
  auto it = pods_.find(pod);
  return it == pods_.end() ? nullptr : it->second;
}

void PrefixIndex::insert(const std::string& pod, std::span<const uint64_t> hashes,
                         std::size_t capacity) {
  insert_from_peer(pod, hashes, capacity);
  if (observer_) {
    observer_(pod, hashes, capacity);
  }
}

void PrefixIndex::insert_from_peer(const std::string& pod, std::span<const uint64_t> hashes,
                                   std::size_t capacity) {
  if (capacity == 0) {
    capacity = kDefaultCapacity;
  }
  auto lru = find(pod);
  if (!lru) {
    std::unique_lock lock(mu_);
    auto& slot = pods_[pod];
    if (!slot) {
      slot = std::make_shared<PodLru>();
    }
    lru = slot;
  }
  // Outside the map lock: a concurrent remove_pod() only drops the map's reference.
  lru->insert(hashes, capacity);
}

std::size_t PrefixIndex::match(const std::string& pod, std::span<const uint64_t> hashes) const {
  auto lru = find(pod);
  std::size_t n = lru ? lru->match(hashes) : 0;
  queried_.fetch_add(hashes.size(), std::memory_order_relaxed);
  matched_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

void PrefixIndex::remove_pod(const std::string& pod) {
  std::unique_lock lock(mu_);
  pods_.erase(pod);
}

PrefixIndex::Stats PrefixIndex::stats() const {
  Stats s;
  std::shared_lock lock(mu_);
  s.pods = pods_.size();
  for (const auto& [name, lru] : pods_) {
    s.blocks += lru->size();
  }
  s.queried_blocks = queried_.load(std::memory_order_relaxed);
  s.matched_blocks = matched_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace llmd::epp
