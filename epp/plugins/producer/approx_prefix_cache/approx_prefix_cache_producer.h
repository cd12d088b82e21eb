#pragma once
// approx-prefix-cache-producer: estimates per pod how much of the prompt's prefix is already in
// its KV cache (PrefixCacheMatchInfo) from the EPP's own past picks, and records each pick.
// Immutable after creation; the shared PrefixIndex does its own locking.
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
    bool autoTune = true;                 // take block size / capacity from the pod's metrics
    int64_t blockSizeTokens = 16;         // >= 1; used when autoTune is off or a pod reports <= 0
    int64_t lruCapacityPerServer = 31250; // >= 1 blocks per pod; same fallback rule
    int64_t maxPrefixBlocksToMatch = 256; // >= 1
    int64_t charsPerToken = 4;            // >= 1; a block is blockSize x charsPerToken characters
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

 private:
  int64_t block_size(const Endpoint& e) const;
  std::size_t capacity(const Endpoint& e) const;

  Config config_;
  PrefixIndex& index_;
};

}  // namespace llmd::epp
