#pragma once
// The latest of a small trivially copyable value (several fields that must be read together),
// stored by one writer at a time and read by any thread without a lock.
//
// Why not a plain sequence lock: a writer descheduled in the middle of its store would make
// every reader spin until it runs again. Here the writer fills the slot readers are not
// directed to and then redirects them, so a read only retries when two whole stores completed
// while it was copying (it then takes the newer one); it never waits for a writer.
//
// Threading: store() must be serialized by the caller (e.g. a mutex held only by writers);
// load() is safe from any thread, concurrently with a store.
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace llmd::epp {

template <class T>
requires std::is_trivially_copyable_v<T> && std::is_default_constructible_v<T>
class LatestValue {
 public:
  explicit LatestValue(const T& initial = T{}) { write(slots_[0], initial, 0); }
  LatestValue(const LatestValue&) = delete;
  LatestValue& operator=(const LatestValue&) = delete;

  void store(const T& value) {
    const uint64_t n = count_.load(std::memory_order_relaxed) + 1;
    write(slots_[n & 1], value, n);
    count_.store(n, std::memory_order_release);
  }

  T load() const {
    while (true) {
      const uint64_t n = count_.load(std::memory_order_acquire);
      const Slot& slot = slots_[n & 1];
      const uint64_t before = slot.seq.load(std::memory_order_acquire);
      std::array<uint64_t, kWords> words;
      for (std::size_t i = 0; i < kWords; ++i) {
        words[i] = slot.words[i].load(std::memory_order_relaxed);
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (before == 2 * n && slot.seq.load(std::memory_order_relaxed) == before) {
        T out;
        std::memcpy(static_cast<void*>(&out), words.data(), sizeof(T));  // T is trivially copyable
        return out;
      }
      // Store n + 2 began on this slot while we copied it: store n + 1 is complete.
    }
  }

 private:
  static constexpr std::size_t kWords = (sizeof(T) + sizeof(uint64_t) - 1) / sizeof(uint64_t);
  struct Slot {
    std::atomic<uint64_t> seq{0};  // 2n once store n is complete in it, odd while writing
    std::array<std::atomic<uint64_t>, kWords> words{};
  };

  // The classic sequence-lock write: seq odd, fence, the words, seq even (release).
  static void write(Slot& slot, const T& value, uint64_t n) {
    std::array<uint64_t, kWords> words{};
    std::memcpy(words.data(), &value, sizeof(T));
    slot.seq.store(2 * n - 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    for (std::size_t i = 0; i < kWords; ++i) {
      slot.words[i].store(words[i], std::memory_order_relaxed);
    }
    slot.seq.store(2 * n, std::memory_order_release);
  }

  std::atomic<uint64_t> count_{0};  // stores completed; the latest is in slots_[count_ & 1]
  std::array<Slot, 2> slots_;
};

}  // namespace llmd::epp
