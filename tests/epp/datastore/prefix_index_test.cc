#include "epp/datastore/prefix_index.h"

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace llmd::epp {
namespace {

// Reference values from libxxhash 0.8.1 (XXH64).
TEST(Xxh64Test, MatchesReferenceImplementation) {
  EXPECT_EQ(xxh64("", 0), 0xef46db3751d8e999ULL);
  EXPECT_EQ(xxh64("a", 0), 0xd24ec4f1a98c6e5bULL);
  EXPECT_EQ(xxh64("abc", 0), 0x44bc2cf5ad770999ULL);
  EXPECT_EQ(xxh64("abcd", 0), 0xde0327b0d25d92ccULL);
  EXPECT_EQ(xxh64("Nobody inspects the spammish repetition", 0), 0xfbcea83c8a378bf1ULL);
  EXPECT_EQ(xxh64(std::string(100, 'x'), 12345), 0xddf7fdada5a39389ULL);
  std::string all;
  for (int i = 0; i < 256; ++i) {
    all.push_back(static_cast<char>(i));
  }
  EXPECT_EQ(xxh64(all, 0xDEADBEEFCAFEBABEULL), 0x3c9a7dd91e1b0ae0ULL);
}

TEST(PrefixIndexTest, BlockHashesAreChainedAndSeededByModel) {
  std::string prompt(64 * 3 + 10, 'a');  // 3 full blocks of 64 chars + a partial one
  auto h = PrefixIndex::block_hashes("m1", prompt, 64);
  ASSERT_EQ(h.size(), 3u);
  // Same bytes in every block, yet different hashes: each one covers the prefix before it.
  EXPECT_NE(h[0], h[1]);
  EXPECT_NE(h[1], h[2]);
  EXPECT_EQ(h[0], xxh64(prompt.substr(0, 64), xxh64("m1", 0)));
  EXPECT_EQ(h[1], xxh64(prompt.substr(64, 64), h[0]));
  EXPECT_NE(PrefixIndex::block_hashes("m2", prompt, 64)[0], h[0]);
  EXPECT_TRUE(PrefixIndex::block_hashes("m1", std::string(63, 'a'), 64).empty());
  EXPECT_TRUE(PrefixIndex::block_hashes("m1", prompt, 0).empty());
}

TEST(PrefixIndexTest, BlockHashesAreCappedAtMaxBlocks) {
  std::string prompt(64 * 300, 'b');
  EXPECT_EQ(PrefixIndex::block_hashes("m", prompt, 64).size(), 256u);
  EXPECT_EQ(PrefixIndex::block_hashes("m", prompt, 64, 10).size(), 10u);
}

TEST(PrefixIndexTest, MatchCountsLeadingBlocksOnly) {
  PrefixIndex index;
  std::vector<uint64_t> a = {1, 2, 3, 4};
  index.insert("pod-a", std::vector<uint64_t>{1, 2, 3});
  EXPECT_EQ(index.match("pod-a", a), 3u);
  EXPECT_EQ(index.match("pod-b", a), 0u);
  // A held block after a missing one does not count: the prefix chain is broken.
  EXPECT_EQ(index.match("pod-a", std::vector<uint64_t>{9, 2, 3}), 0u);
  auto s = index.stats();
  EXPECT_EQ(s.pods, 1u);
  EXPECT_EQ(s.blocks, 3u);
  EXPECT_EQ(s.queried_blocks, 11u);
  EXPECT_EQ(s.matched_blocks, 3u);
}

TEST(PrefixIndexTest, LruEvictsLeastRecentAndKeepsLeadingBlocksLongest) {
  PrefixIndex index;
  index.insert("p", std::vector<uint64_t>{1, 2, 3}, 4);
  index.insert("p", std::vector<uint64_t>{10, 11}, 4);  // evicts the oldest: 3, the tail of 1-2-3
  EXPECT_EQ(index.match("p", std::vector<uint64_t>{1, 2, 3}), 2u);
  EXPECT_EQ(index.match("p", std::vector<uint64_t>{10, 11}), 2u);
  EXPECT_EQ(index.stats().blocks, 4u);
  // Re-inserting refreshes recency: 1,2 become newest; next eviction takes 11 then 10.
  index.insert("p", std::vector<uint64_t>{1, 2}, 4);
  index.insert("p", std::vector<uint64_t>{20, 21}, 4);
  EXPECT_EQ(index.match("p", std::vector<uint64_t>{1, 2}), 2u);
  EXPECT_EQ(index.match("p", std::vector<uint64_t>{10}), 0u);
}

TEST(PrefixIndexTest, ShrinkingCapacityEvictsAndMemoryStaysBounded) {
  PrefixIndex index;
  std::vector<uint64_t> many;
  for (uint64_t i = 0; i < 1000; ++i) {
    many.push_back(i + 1);
  }
  index.insert("p", many, 100);
  EXPECT_EQ(index.stats().blocks, 100u);
  EXPECT_EQ(index.match("p", many), 100u);  // the leading 100 blocks survive
  index.insert("p", std::vector<uint64_t>{}, 10);
  EXPECT_EQ(index.stats().blocks, 10u);
  EXPECT_EQ(index.match("p", many), 10u);
}

TEST(PrefixIndexTest, RemovePodForgetsIt) {
  PrefixIndex index;
  index.insert("p", std::vector<uint64_t>{1, 2});
  index.remove_pod("p");
  EXPECT_EQ(index.match("p", std::vector<uint64_t>{1, 2}), 0u);
  EXPECT_EQ(index.stats().pods, 0u);
}

TEST(PrefixIndexTest, ConcurrentInsertAndMatchAreSafe) {
  PrefixIndex index;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&index, t] {
      for (uint64_t i = 0; i < 2000; ++i) {
        std::vector<uint64_t> h = {i, i + 1, i + 2};
        std::string pod = "pod-" + std::to_string((t + i) % 3);
        index.insert(pod, h, 50);
        index.match(pod, h);
        if (i % 500 == 0) {
          index.remove_pod(pod);
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_LE(index.stats().blocks, 150u);
}

}  // namespace
}  // namespace llmd::epp
