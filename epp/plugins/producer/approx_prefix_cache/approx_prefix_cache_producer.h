#pragma once
// approx-prefix-cache-producer: estimates per pod how much of the prompt's prefix is already in
// its KV cache (PrefixCacheMatchInfo) from the EPP's own past picks, and records each pick.
// The configuration is immutable after creation; the only mutable state is the characters-per-
// token measurement (two atomic sums, any thread). The shared PrefixIndex does its own locking.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/datastore/prefix_index.h"
#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class ApproxPrefixCacheProducer final : public PluginBase<DataProducer> {
 public:
  static constexpr std::string_view kType = "approx-prefix-cache-producer";

  struct Config {
    bool autoTune = true;                  // take block size / capacity from the pod's metrics
    int64_t blockSizeTokens = 16;          // >= 1; used when autoTune is off or a pod reports <= 0
    int64_t lruCapacityPerServer = 31250;  // >= 1 blocks per pod; same fallback rule
    // >= 0 blocks hashed, matched and inserted per prompt; 0 = as many as the pod can hold
    // (capacity() below). measuredCapacity makes 0 the default.
    int64_t maxPrefixBlocksToMatch = 256;
    int64_t charsPerToken = 4;  // >= 1; a block is blockSize x charsPerToken characters
    // The index follows the pod: its capacity, in the index's own blocks, counts the characters
    // per token the pods report (usage.prompt_tokens of finished requests; charsPerToken until
    // the first report), and prompts are followed as deep as that capacity. Off (upstream):
    // capacity = the pod's block count, depth = maxPrefixBlocksToMatch.
    bool measuredCapacity = false;
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  ApproxPrefixCacheProducer(std::string name, Config config, PrefixIndex& index);

  // DataProducer
  void produce(CycleContext& ctx, std::vector<Endpoint>& endpoints) const override;
  void on_picked(CycleContext& ctx, const Endpoint& picked) const override;
  // The answer is in the pod's cache too: the next turn, which re-sends it, matches this pod.
  void on_response_complete(CycleContext& ctx, const Endpoint& pod) const override;
  std::vector<AttributeKey> produces() const override { return {AttributeKey::kPrefixCacheMatch}; }

  const Config& config() const { return config_; }
  // Prompt characters per token: measured (measuredCapacity, after a report) or configured.
  double chars_per_token() const;
  // Blocks of the index (blockSize x charsPerToken characters) the pod's KV cache holds.
  std::size_t capacity(const Endpoint& e) const;
  // Blocks of a prompt hashed, matched and inserted for this pod.
  std::size_t depth(const Endpoint& e) const;

 private:
  int64_t block_size(const Endpoint& e) const;
  std::vector<uint64_t> hashes(const SchedulingRequest& request, int64_t block_size,
                               std::size_t max_blocks) const;

  Config config_;
  PrefixIndex& index_;
  mutable std::atomic<int64_t> measured_chars_{0};  // sums over reported prompts
  mutable std::atomic<int64_t> measured_tokens_{0};
};

}  // namespace llmd::epp
