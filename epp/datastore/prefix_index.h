#pragma once
// Approximate prefix-cache index: which prompt blocks the EPP believes each pod still holds in its
// KV cache. It is approximate because it only sees the EPP's own picks (not evictions inside
// vLLM); the per-pod LRU capacity (the pod's num_gpu_blocks) bounds both memory and staleness.
//
// Hashing: the prompt bytes are cut into blocks of block_size x chars_per_token characters (only
// full blocks count, at most max_blocks); block i hashes to XXH64(block bytes, seed = hash of
// block i-1), block 0 is seeded with XXH64(model name, seed 0). Chaining makes a block's hash
// identify the whole prefix up to it, so "leading blocks held" is a per-block lookup. XXH64 is a
// fast non-cryptographic 64-bit hash (bit-exact with the reference xxHash, tested); collisions
// only cost a wrong routing hint, never correctness.
//
// Threading: thread-safe. The pod map is guarded by a shared mutex; each pod's LRU by its own
// mutex, so scheduling threads matching different pods, or the same pod, rarely contend.
// match() does not change recency (a pick followed by insert() does).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llmd::epp {

// XXH64 of `data` with `seed` (reference-compatible).
uint64_t xxh64(std::string_view data, uint64_t seed);

class PrefixIndex {
 public:
  static constexpr std::size_t kDefaultCapacity = 31250;  // vLLM num_gpu_blocks default here
  static constexpr std::size_t kDefaultMaxBlocks = 256;

  // Chained block hashes of `prompt` (see file comment). block_chars = 0 yields no blocks.
  static std::vector<uint64_t> block_hashes(std::string_view model, std::string_view prompt,
                                            std::size_t block_chars,
                                            std::size_t max_blocks = kDefaultMaxBlocks);

  // Records that `pod` now holds `hashes` (most recent last), evicting least recently used
  // blocks beyond `capacity` (0 = kDefaultCapacity). A changed capacity applies from this call.
  void insert(const std::string& pod, std::span<const uint64_t> hashes,
              std::size_t capacity = kDefaultCapacity);
  // What another EPP replica of the same pool learned (active-active): recorded like insert()
  // but not reported to the observer, so peers never echo each other's blocks.
  void insert_from_peer(const std::string& pod, std::span<const uint64_t> hashes,
                        std::size_t capacity = kDefaultCapacity);
  // Called after every insert() (not insert_from_peer()) on the inserting thread, outside the
  // index's locks: how a replica collects the blocks it learned to share them. Set before
  // traffic; null = none.
  using InsertObserver = std::function<void(
      const std::string& pod, std::span<const uint64_t> hashes, std::size_t capacity)>;
  void set_insert_observer(InsertObserver observer) { observer_ = std::move(observer); }
  // Number of leading hashes the pod holds.
  std::size_t match(const std::string& pod, std::span<const uint64_t> hashes) const;
  void remove_pod(const std::string& pod);

  struct Stats {
    std::size_t pods = 0;
    std::size_t blocks = 0;       // entries over all pods
    uint64_t queried_blocks = 0;  // sum of hashes.size() over match() calls
    uint64_t matched_blocks = 0;  // sum of match() results (hit ratio = matched / queried)
  };
  Stats stats() const;

 private:
  class PodLru;
  std::shared_ptr<PodLru> find(const std::string& pod) const;

  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<PodLru>> pods_;  // guarded by mu_
  mutable std::atomic<uint64_t> queried_{0};
  mutable std::atomic<uint64_t> matched_{0};
  InsertObserver observer_;  // set before traffic
};

}  // namespace llmd::epp
