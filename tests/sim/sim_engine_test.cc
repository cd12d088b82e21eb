// Pins the behaviour of the simulated vLLM engine (bench/sim): timing model, prefix caching,
// KV pressure (LRU eviction, preemption), scheduling order and determinism. Virtual time only.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <string>

#include "bench/sim/block_pool.h"
#include "bench/sim/sim_engine.h"
#include "bench/sim/tokens.h"

namespace llmd::sim {
namespace {

EngineConfig exact_config() {
  EngineConfig c;
  c.profile.jitter_sigma = 0.0;
  return c;
}

// `n` distinct tokens; different `salt` gives disjoint prompts.
std::vector<TokenId> prompt_tokens(int64_t n, uint64_t salt) {
  std::vector<TokenId> t;
  t.reserve(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    t.push_back(hash_combine(salt, static_cast<uint64_t>(i)));
  }
  return t;
}

SimRequest request(const SimEngine& e, uint64_t id, const std::vector<TokenId>& prompt,
                   int64_t max_out, int priority = 0) {
  auto r = make_request(id, prompt, root_hash(e.config().model_name), max_out);
  r.priority = priority;
  return r;
}

// Runs the engine until idle; returns the finished stats by request id.
std::map<uint64_t, RequestStats> run_to_completion(SimEngine& e,
                                                   std::vector<SimEvent>* log = nullptr) {
  std::map<uint64_t, RequestStats> done;
  for (int guard = 0; guard < 10'000'000 && e.next_event_time() != kNever; ++guard) {
    for (const auto& ev : e.advance_to(e.next_event_time())) {
      if (ev.type == EventType::kFinished) {
        done[ev.request_id] = ev.stats;
      }
      if (log != nullptr) {
        log->push_back(ev);
      }
    }
  }
  return done;
}

TEST(SimTokens, WordsAreTokensAndPrefixesShareBlocks) {
  EXPECT_EQ(count_tokens("  hello   world\nfoo\t"), 3);
  EXPECT_EQ(count_tokens(""), 0);
  EXPECT_EQ(tokenize("a b a"), (std::vector<TokenId>{token_id("a"), token_id("b"), token_id("a")}));

  auto a = prompt_tokens(40, 1);
  auto b = a;
  b[35] = 12345;  // differs in the third (partial) block only
  const auto root = root_hash("m");
  EXPECT_EQ(block_hashes(a, root).size(), 2u);
  EXPECT_EQ(block_hashes(a, root), block_hashes(b, root));
  b[20] = 999;  // now the second block differs, and so does every later hash
  EXPECT_EQ(block_hashes(a, root)[0], block_hashes(b, root)[0]);
  EXPECT_NE(block_hashes(a, root)[1], block_hashes(b, root)[1]);
  EXPECT_NE(block_hashes(a, root)[0], block_hashes(a, root_hash("other-model"))[0]);
}

TEST(SimTokens, VocabularyWordsAreDistinctAndHashToTheirTokens) {
  std::map<std::string, uint32_t> seen;
  for (uint32_t i = 0; i < kVocabSize; ++i) {
    EXPECT_TRUE(seen.emplace(vocab_word(i), i).second) << vocab_word(i);
    EXPECT_EQ(vocab_token(i), token_id(vocab_word(i)));
    EXPECT_EQ(count_tokens(vocab_word(i)), 1);
  }
}

TEST(SimBlockPool, EvictsLeastRecentlyReleasedCachedBlockFirst) {
  BlockPool pool(3);
  auto a = *pool.allocate();
  auto b = *pool.allocate();
  auto c = *pool.allocate();
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  pool.cache(a, 101);
  pool.cache(b, 102);
  pool.cache(c, 103);
  pool.release(b);
  pool.release(a);
  pool.release(c);
  EXPECT_EQ(pool.eviction_order(), (std::vector<BlockHash>{102, 101, 103}));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);  // cached but unreferenced blocks count as free
  // A hit takes the block out of the free queue.
  pool.touch(*pool.lookup(102));
  EXPECT_EQ(pool.num_free(), 2);
  auto d = *pool.allocate();  // evicts 101, the least recently released
  EXPECT_EQ(d, a);
  EXPECT_FALSE(pool.lookup(101).has_value());
  EXPECT_TRUE(pool.lookup(103).has_value());
  EXPECT_EQ(pool.evictions(), 1);
  EXPECT_EQ(pool.cached_prefix(std::vector<BlockHash>{102, 103, 101}, 10), 2);
}

TEST(SimEngine, SingleRequestFollowsTheStepTimeModel) {
  SimEngine e(exact_config());
  ASSERT_TRUE(e.submit(request(e, 1, prompt_tokens(1000, 1), 5)).accepted);
  std::vector<SimEvent> log;
  auto done = run_to_completion(e, &log);
  ASSERT_EQ(done.size(), 1u);
  const auto& s = done[1];
  EXPECT_EQ(s.output_tokens, 5);
  EXPECT_EQ(s.cached_tokens, 0);
  EXPECT_NEAR(s.ttft_ms(), 5.0 + 0.018 * 1000, 1e-9);
  // Decode step k reads a context of 1000 + k tokens.
  double t = s.first_token_ms;
  for (int k = 1; k < 5; ++k) {
    t += 5.0 + 0.003 + 0.00008 * (1000 + k);
  }
  EXPECT_NEAR(s.finished_ms, t, 1e-9);
  ASSERT_EQ(log.size(), 6u);
  EXPECT_EQ(log[0].type, EventType::kFirstToken);
  EXPECT_EQ(log[4].type, EventType::kToken);
  EXPECT_EQ(log[4].token_index, 4);
  EXPECT_EQ(log[5].type, EventType::kFinished);
}

TEST(SimEngine, LongPromptIsPrefilledInChunks) {
  SimEngine e(exact_config());
  ASSERT_TRUE(e.submit(request(e, 1, prompt_tokens(5000, 1), 1)).accepted);
  auto done = run_to_completion(e);
  // 2048 + 2048 + 904 tokens over three steps.
  EXPECT_NEAR(done[1].ttft_ms(), 3 * 5.0 + 0.018 * 5000, 1e-9);
  EXPECT_EQ(e.metrics().steps, 3);
}

TEST(SimEngine, CachedPrefixCutsTtftByTheSkippedPrefill) {
  SimEngine e(exact_config());
  const auto prompt = prompt_tokens(1024, 7);
  ASSERT_TRUE(e.submit(request(e, 1, prompt, 4)).accepted);
  auto first = run_to_completion(e)[1];
  e.advance_to(e.now() + 1000);
  ASSERT_TRUE(e.submit(request(e, 2, prompt, 4)).accepted);
  auto second = run_to_completion(e)[2];

  // 1024 tokens = 64 blocks; the last block is recomputed so a logit can be produced.
  EXPECT_EQ(first.cached_tokens, 0);
  EXPECT_EQ(second.cached_tokens, 1008);
  EXPECT_NEAR(first.ttft_ms(), 5.0 + 0.018 * 1024, 1e-9);
  EXPECT_NEAR(second.ttft_ms(), 5.0 + 0.018 * 16, 1e-9);
  EXPECT_NEAR(first.ttft_ms() - second.ttft_ms(), 0.018 * 1008, 1e-9);
  const auto m = e.metrics();
  EXPECT_EQ(m.prefix_cache_queries, 2048);
  EXPECT_EQ(m.prefix_cache_hits, 1008);

  // A shared system prompt with a different question hits only the shared full blocks.
  auto other = prompt_tokens(1024, 8);
  std::copy(prompt.begin(), prompt.begin() + 500, other.begin());
  ASSERT_TRUE(e.submit(request(e, 3, other, 1)).accepted);
  EXPECT_EQ(run_to_completion(e)[3].cached_tokens, 496);  // 31 full blocks of the 500 shared
}

TEST(SimEngine, GeneratedBlocksAreCachedForTheNextTurn) {
  SimEngine e(exact_config());
  auto turn1 = prompt_tokens(40, 3);
  ASSERT_TRUE(e.submit(request(e, 1, turn1, 40)).accepted);
  std::vector<SimEvent> log;
  run_to_completion(e, &log);
  // The next turn re-sends prompt + answer + a new question.
  auto turn2 = turn1;
  for (const auto& ev : log) {
    if (ev.type == EventType::kFirstToken || ev.type == EventType::kToken) {
      turn2.push_back(token_id(vocab_word(ev.word)));
    }
  }
  auto question = prompt_tokens(20, 4);
  turn2.insert(turn2.end(), question.begin(), question.end());
  ASSERT_TRUE(e.submit(request(e, 2, turn2, 1)).accepted);
  // 40 + 40 = 80 tokens were generated or prompted; the last output token's KV was never
  // computed, so 79 tokens -> 4 full blocks are cached.
  EXPECT_EQ(run_to_completion(e)[2].cached_tokens, 64);
}

TEST(SimEngine, TpotGrowsWithBatchSizeAndContext) {
  auto mean_tpot = [](int batch, int64_t prompt_len) {
    SimEngine e(exact_config());
    for (int i = 0; i < batch; ++i) {
      EXPECT_TRUE(e.submit(request(e, i + 1, prompt_tokens(prompt_len, 100 + i), 64)).accepted);
    }
    double sum = 0;
    for (const auto& [id, s] : run_to_completion(e)) {
      sum += s.tpot_ms();
    }
    return sum / batch;
  };
  const double b1 = mean_tpot(1, 512);
  const double b16 = mean_tpot(16, 512);
  const double b128 = mean_tpot(128, 512);
  EXPECT_LT(b1, b16);
  EXPECT_LT(b16, b128);
  EXPECT_NEAR(b1, 5.0 + 0.003 + 0.00008 * (512 + 32), 0.01);
  const double long_ctx = mean_tpot(16, 8000);
  EXPECT_GT(long_ctx, b16 + 0.00008 * 16 * 7000 * 0.9);
}

TEST(SimEngine, KvCacheFillsAndEvictsLeastRecentlyUsedPrefixFirst) {
  auto cfg = exact_config();
  cfg.profile.num_gpu_blocks = 40;
  SimEngine e(cfg);
  const auto a = prompt_tokens(160, 1);  // 10 blocks each
  const auto b = prompt_tokens(160, 2);
  const auto c = prompt_tokens(160, 3);
  ASSERT_TRUE(e.submit(request(e, 1, a, 2)).accepted);
  ASSERT_TRUE(e.submit(request(e, 2, b, 2)).accepted);
  e.advance_to(e.next_event_time());            // first step scheduled: both admitted
  EXPECT_DOUBLE_EQ(e.metrics().kv_usage, 0.5);  // 2 x 10 of 40 blocks
  run_to_completion(e);
  ASSERT_TRUE(e.submit(request(e, 3, c, 2)).accepted);
  run_to_completion(e);
  EXPECT_DOUBLE_EQ(e.metrics().kv_usage, 0.0);
  EXPECT_EQ(e.metrics().num_cached_blocks, 30);
  EXPECT_EQ(e.metrics().num_evictions, 0);

  // 20 fresh blocks are needed: the 7 never-used ones, then the least recently released
  // blocks. A and B finished together; A was released first, so A's prefix goes.
  ASSERT_TRUE(e.submit(request(e, 4, prompt_tokens(320, 4), 1)).accepted);
  run_to_completion(e);
  EXPECT_GE(e.metrics().num_evictions, 10);
  ASSERT_TRUE(e.submit(request(e, 5, c, 1)).accepted);
  ASSERT_TRUE(e.submit(request(e, 6, a, 1)).accepted);
  auto done = run_to_completion(e);
  EXPECT_EQ(done[5].cached_tokens, 144);  // C, the most recent, survived
  EXPECT_EQ(done[6].cached_tokens, 0);    // A, the least recent, was evicted
}

TEST(SimEngine, PreemptsUnderKvPressureAndStillCompletes) {
  auto cfg = exact_config();
  cfg.profile.num_gpu_blocks = 48;
  SimEngine e(cfg);
  // Each request ends at 100 + 300 tokens = 25 blocks; three cannot all fit.
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(e.submit(request(e, id, prompt_tokens(100, id), 300)).accepted);
  }
  std::vector<SimEvent> log;
  auto done = run_to_completion(e, &log);
  ASSERT_EQ(done.size(), 3u);
  int64_t preemptions = 0;
  for (const auto& [id, s] : done) {
    EXPECT_EQ(s.output_tokens, 300);
    preemptions += s.preemptions;
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(e.metrics().num_preemptions, preemptions);
  EXPECT_TRUE(std::any_of(log.begin(), log.end(),
                          [](const SimEvent& ev) { return ev.type == EventType::kPreempted; }));
  // Token indexes of every request are 0..299, each exactly once, despite the recompute.
  std::map<uint64_t, std::vector<int64_t>> tokens;
  for (const auto& ev : log) {
    if (ev.type == EventType::kFirstToken || ev.type == EventType::kToken) {
      tokens[ev.request_id].push_back(ev.token_index);
    }
  }
  for (auto& [id, idx] : tokens) {
    std::vector<int64_t> expect(300);
    std::iota(expect.begin(), expect.end(), 0);
    EXPECT_EQ(idx, expect) << id;
  }
  EXPECT_TRUE(e.idle());
  EXPECT_DOUBLE_EQ(e.metrics().kv_usage, 0.0);
}

std::vector<uint64_t> first_token_order(SchedulingPolicy policy) {
  auto cfg = exact_config();
  cfg.policy = policy;
  cfg.max_num_seqs = 1;
  SimEngine e(cfg);
  EXPECT_TRUE(e.submit(request(e, 1, prompt_tokens(50, 1), 2, /*priority=*/5)).accepted);
  EXPECT_TRUE(e.submit(request(e, 2, prompt_tokens(50, 2), 2, /*priority=*/0)).accepted);
  EXPECT_TRUE(e.submit(request(e, 3, prompt_tokens(50, 3), 2, /*priority=*/1)).accepted);
  EXPECT_TRUE(e.submit(request(e, 4, prompt_tokens(50, 4), 2, /*priority=*/-3)).accepted);
  std::vector<SimEvent> log;
  run_to_completion(e, &log);
  std::vector<uint64_t> order;
  for (const auto& ev : log) {
    if (ev.type == EventType::kFirstToken) {
      order.push_back(ev.request_id);
    }
  }
  return order;
}

TEST(SimEngine, PriorityOrderIsHonouredOnlyWhenEnabled) {
  EXPECT_EQ(first_token_order(SchedulingPolicy::kPriority), (std::vector<uint64_t>{4, 2, 3, 1}));
  EXPECT_EQ(first_token_order(SchedulingPolicy::kFcfs), (std::vector<uint64_t>{1, 2, 3, 4}));
}

TEST(SimEngine, PriorityPolicyPreemptsTheLeastImportantRequest) {
  auto cfg = exact_config();
  cfg.policy = SchedulingPolicy::kPriority;
  cfg.profile.num_gpu_blocks = 48;
  SimEngine e(cfg);
  ASSERT_TRUE(e.submit(request(e, 1, prompt_tokens(100, 1), 300, 0)).accepted);
  ASSERT_TRUE(e.submit(request(e, 2, prompt_tokens(100, 2), 300, 9)).accepted);
  ASSERT_TRUE(e.submit(request(e, 3, prompt_tokens(100, 3), 300, 1)).accepted);
  auto done = run_to_completion(e);
  EXPECT_EQ(done[1].preemptions, 0);
  EXPECT_GT(done[2].preemptions, 0);
  EXPECT_LT(done[1].finished_ms, done[2].finished_ms);
}

std::vector<std::string> trace(uint64_t seed) {
  auto cfg = EngineConfig{};
  cfg.seed = seed;
  cfg.profile.num_gpu_blocks = 200;
  SimEngine e(cfg);
  std::vector<std::string> out;
  std::vector<SimEvent> events;
  double t = 0;
  for (uint64_t id = 1; id <= 40; ++id) {
    t += 3.0 + static_cast<double>(id % 7);
    e.advance_to(t, events);
    EXPECT_TRUE(
        e.submit(request(e, id, prompt_tokens(50 + 37 * (id % 5), id % 3), 20 + id % 9)).accepted);
  }
  run_to_completion(e, &events);
  for (const auto& ev : events) {
    out.push_back(std::to_string(static_cast<int>(ev.type)) + ":" + std::to_string(ev.request_id) +
                  "@" + std::to_string(ev.time_ms));
  }
  return out;
}

TEST(SimEngine, SameSeedSameTrace) {
  const auto a = trace(42);
  EXPECT_EQ(a, trace(42));
  EXPECT_NE(a, trace(43));  // the jitter differs
  EXPECT_GT(a.size(), 40u * 20);
}

TEST(SimEngine, RejectsImpossibleRequestsAndAbortsFreeBlocks) {
  auto cfg = exact_config();
  cfg.profile.num_gpu_blocks = 10;
  cfg.max_model_len = 1000;
  SimEngine e(cfg);
  EXPECT_FALSE(e.submit(request(e, 1, prompt_tokens(990, 1), 20)).accepted);  // > max_model_len
  EXPECT_FALSE(e.submit(request(e, 1, prompt_tokens(200, 1), 20)).accepted);  // > 10 blocks
  EXPECT_FALSE(e.submit(request(e, 1, {}, 20)).accepted);
  ASSERT_TRUE(e.submit(request(e, 1, prompt_tokens(100, 1), 50)).accepted);
  EXPECT_FALSE(e.submit(request(e, 1, prompt_tokens(100, 1), 50)).accepted);  // duplicate id
  e.advance_to(e.next_event_time());
  EXPECT_GT(e.metrics().kv_usage, 0.0);
  EXPECT_TRUE(e.abort(1));
  EXPECT_FALSE(e.abort(1));
  EXPECT_DOUBLE_EQ(e.metrics().kv_usage, 0.0);
  EXPECT_EQ(e.metrics().requests_aborted, 1);
  run_to_completion(e);
  EXPECT_TRUE(e.idle());
}

TEST(SimEngine, HeadOfLineRequestWaitsForBlocks) {
  auto cfg = exact_config();
  cfg.profile.num_gpu_blocks = 20;
  SimEngine e(cfg);
  ASSERT_TRUE(e.submit(request(e, 1, prompt_tokens(200, 1), 10)).accepted);  // 13 blocks
  e.advance_to(e.next_event_time());
  ASSERT_TRUE(e.submit(request(e, 2, prompt_tokens(150, 2), 10)).accepted);  // 10 blocks
  e.advance_to(e.now() + 1.0);
  EXPECT_EQ(e.metrics().num_waiting, 1);
  EXPECT_EQ(e.metrics().num_running, 1);
  auto done = run_to_completion(e);
  EXPECT_GE(done[2].first_scheduled_ms, done[1].finished_ms);
}

TEST(SimEngine, ProfilesAndConfigValidation) {
  EXPECT_TRUE(profile_by_name("h100").has_value());
  EXPECT_EQ(profile_by_name("slow")->name, "slow");
  EXPECT_FALSE(profile_by_name("tpu").has_value());
  EngineConfig c;
  c.max_num_seqs = 0;
  EXPECT_NE(c.validate().find("max_num_seqs"), std::string::npos);
  EXPECT_THROW(SimEngine{c}, std::invalid_argument);
  // The slow profile is slower on the same request.
  auto ttft = [](GpuProfile p) {
    EngineConfig cfg;
    cfg.profile = p;
    cfg.profile.jitter_sigma = 0;
    SimEngine e(cfg);
    EXPECT_TRUE(e.submit(request(e, 1, prompt_tokens(1000, 1), 1)).accepted);
    return run_to_completion(e)[1].ttft_ms();
  };
  EXPECT_GT(ttft(slow_profile()), 1.5 * ttft(h100_profile()));
}

}  // namespace
}  // namespace llmd::sim
