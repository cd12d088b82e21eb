#include "epp/plugins/producer/approx_prefix_cache/approx_prefix_cache_producer.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace llmd::epp {

std::string ApproxPrefixCacheProducer::Config::validate() const {
  if (blockSizeTokens < 1) {
    return param_error("blockSizeTokens", blockSizeTokens, ">= 1");
  }
  if (lruCapacityPerServer < 1) {
    return param_error("lruCapacityPerServer", lruCapacityPerServer, ">= 1");
  }
  if (maxPrefixBlocksToMatch < 0) {
    return param_error("maxPrefixBlocksToMatch", maxPrefixBlocksToMatch, ">= 0");
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
      .get("charsPerToken", c.charsPerToken)
      .get("measuredCapacity", c.measuredCapacity);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (c.measuredCapacity && !r.has("maxPrefixBlocksToMatch")) {
    c.maxPrefixBlocksToMatch = 0;  // as deep as the pod can hold a prompt
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

double ApproxPrefixCacheProducer::chars_per_token() const {
  if (config_.measuredCapacity) {
    const int64_t tokens = measured_tokens_.load(std::memory_order_relaxed);
    if (tokens > 0) {
      return static_cast<double>(measured_chars_.load(std::memory_order_relaxed)) /
             static_cast<double>(tokens);
    }
  }
  return static_cast<double>(config_.charsPerToken);
}

std::size_t ApproxPrefixCacheProducer::capacity(const Endpoint& e) const {
  const int64_t pod_blocks = config_.autoTune && e.metrics().num_gpu_blocks > 0
                                 ? e.metrics().num_gpu_blocks
                                 : config_.lruCapacityPerServer;
  // The pod holds pod_blocks x block_size tokens, i.e. that many x chars_per_token() characters
  // of prompt text; the index's blocks are block_size x charsPerToken characters each.
  const double blocks = static_cast<double>(pod_blocks) * chars_per_token() /
                        static_cast<double>(config_.charsPerToken);
  return static_cast<std::size_t>(std::max(1.0, std::floor(blocks)));
}

std::size_t ApproxPrefixCacheProducer::depth(const Endpoint& e) const {
  return config_.maxPrefixBlocksToMatch > 0
             ? static_cast<std::size_t>(config_.maxPrefixBlocksToMatch)
             : capacity(e);
}

std::vector<uint64_t> ApproxPrefixCacheProducer::hashes(const SchedulingRequest& request,
                                                        int64_t block_size,
                                                        std::size_t max_blocks) const {
  return PrefixIndex::block_hashes(request.model, request.prompt_text,
                                   static_cast<std::size_t>(block_size * config_.charsPerToken),
                                   max_blocks);
}

void ApproxPrefixCacheProducer::produce(CycleContext& ctx, std::vector<Endpoint>& endpoints) const {
  // Pods usually share one block size: hash the prompt once per distinct size, as deep as the
  // deepest of those pods needs; each pod matches its own depth of it.
  std::map<int64_t, std::size_t> deepest;
  for (const auto& e : endpoints) {
    auto& d = deepest[block_size(e)];
    d = std::max(d, depth(e));
  }
  std::map<int64_t, std::vector<uint64_t>> by_block_size;
  for (const auto& [bs, d] : deepest) {
    by_block_size.emplace(bs, hashes(ctx.request, bs, d));
  }
  for (auto& e : endpoints) {
    const auto& all = by_block_size.at(block_size(e));
    const std::span<const uint64_t> mine(all.data(), std::min(all.size(), depth(e)));
    e.prefix =
        PrefixCacheMatchInfo{index_.match(e.name(), mine), mine.size(),
                             static_cast<std::size_t>(block_size(e) * config_.charsPerToken)};
  }
}

void ApproxPrefixCacheProducer::on_picked(CycleContext& ctx, const Endpoint& picked) const {
  // Re-hashing (microseconds per thousand blocks) keeps the plugin free of per-request state.
  auto h = hashes(ctx.request, block_size(picked), depth(picked));
  if (!h.empty()) {
    index_.insert(picked.name(), h, capacity(picked));
  }
}

void ApproxPrefixCacheProducer::on_response_complete(CycleContext& ctx, const Endpoint& pod) const {
  if (const auto& m = ctx.request.measured_text; m && m->chars > 0 && m->tokens > 0) {
    measured_chars_.fetch_add(m->chars, std::memory_order_relaxed);
    measured_tokens_.fetch_add(m->tokens, std::memory_order_relaxed);
  }
  on_picked(ctx, pod);
}

}  // namespace llmd::epp
