#include "epp/plugins/producer/approx_prefix_cache/approx_prefix_cache_producer.h"

#include <map>

namespace llmd::epp {

std::string ApproxPrefixCacheProducer::Config::validate() const {
  if (blockSizeTokens < 1) {
    return param_error("blockSizeTokens", blockSizeTokens, ">= 1");
  }
  if (lruCapacityPerServer < 1) {
    return param_error("lruCapacityPerServer", lruCapacityPerServer, ">= 1");
  }
  if (maxPrefixBlocksToMatch < 1) {
    return param_error("maxPrefixBlocksToMatch", maxPrefixBlocksToMatch, ">= 1");
  }
  if (charsPerToken < 1) {
    return param_error("charsPerToken", charsPerToken, ">= 1");
  }
  return {};
}

PluginOrError ApproxPrefixCacheProducer::create(const std::string& name,
                                                const nlohmann::json& params,
                                                const Handle& handle) {
  Config c;
  ParamReader r(params);
  r.get("autoTune", c.autoTune)
      .get("blockSizeTokens", c.blockSizeTokens)
      .get("lruCapacityPerServer", c.lruCapacityPerServer)
      .get("maxPrefixBlocksToMatch", c.maxPrefixBlocksToMatch)
      .get("charsPerToken", c.charsPerToken);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<ApproxPrefixCacheProducer>(name, c, handle.prefix_index), {}};
}

ApproxPrefixCacheProducer::ApproxPrefixCacheProducer(std::string name, Config config,
                                                     PrefixIndex& index)
    : PluginBase(kType, std::move(name)), config_(config), index_(index) {}

int64_t ApproxPrefixCacheProducer::block_size(const Endpoint& e) const {
  return config_.autoTune && e.metrics().block_size > 0 ? e.metrics().block_size
                                                      : config_.blockSizeTokens;
}

std::size_t ApproxPrefixCacheProducer::capacity(const Endpoint& e) const {
  return static_cast<std::size_t>(config_.autoTune && e.metrics().num_gpu_blocks > 0
                                      ? e.metrics().num_gpu_blocks
                                      : config_.lruCapacityPerServer);
}

void ApproxPrefixCacheProducer::produce(CycleContext& ctx, std::vector<Endpoint>& endpoints) const {
  // Pods usually share one block size: hash the prompt once per distinct size.
  std::map<int64_t, std::vector<uint64_t>> by_block_size;
  for (auto& e : endpoints) {
    int64_t bs = block_size(e);
    auto it = by_block_size.find(bs);
    if (it == by_block_size.end()) {
      it = by_block_size
               .emplace(bs, PrefixIndex::block_hashes(
                                ctx.request.model, ctx.request.prompt_text,
                                static_cast<std::size_t>(bs * config_.charsPerToken),
                                static_cast<std::size_t>(config_.maxPrefixBlocksToMatch)))
               .first;
    }
    const auto& hashes = it->second;
    e.prefix = PrefixCacheMatchInfo{index_.match(e.name(), hashes), hashes.size()};
  }
}

void ApproxPrefixCacheProducer::on_picked(CycleContext& ctx, const Endpoint& picked) const {
  // Re-hashing (microseconds for <= 256 blocks) keeps the plugin free of per-request state.
  auto hashes = PrefixIndex::block_hashes(
      ctx.request.model, ctx.request.prompt_text,
      static_cast<std::size_t>(block_size(picked) * config_.charsPerToken),
      static_cast<std::size_t>(config_.maxPrefixBlocksToMatch));
  if (!hashes.empty()) {
    index_.insert(picked.name(), hashes, capacity(picked));
  }
}

void ApproxPrefixCacheProducer::on_response_complete(CycleContext& ctx, const Endpoint& pod) const {
  on_picked(ctx, pod);
}

}  // namespace llmd::epp
