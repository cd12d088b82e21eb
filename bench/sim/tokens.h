#pragma once
// Simulated tokenizer and prefix-cache block hashing. Pure functions, thread-safe.
//
// A token is a whitespace-separated word (the EPP counts input tokens the same way); its id is a
// hash of the word. KV blocks hold `block_size` tokens; a full block's hash chains the parent
// block's hash with the block's token ids, starting from a root seeded by the model name, so two
// prompts share exactly their common leading full blocks (vLLM's prefix-caching scheme).
// Synthetic output text uses a fixed vocabulary whose words hash to the ids the engine emits, so
// a conversation that re-sends an answer hits the blocks cached while that answer was generated.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llmd::sim {

using TokenId = uint64_t;
using BlockHash = uint64_t;

inline constexpr int kDefaultBlockSize = 16;

// 64-bit FNV-1a of the bytes, finished with a splitmix64 avalanche.
uint64_t hash_bytes(std::string_view bytes);
// Strong 64-bit mix of two values (order matters).
uint64_t hash_combine(uint64_t a, uint64_t b);

// Token id of one word.
inline TokenId token_id(std::string_view word) {
  return hash_bytes(word);
}
// Number of whitespace-separated words (the project's token count).
int64_t count_tokens(std::string_view text);
// Token ids of the whitespace-separated words of `text`, appended to `out`.
void tokenize(std::string_view text, std::vector<TokenId>& out);
inline std::vector<TokenId> tokenize(std::string_view text) {
  std::vector<TokenId> out;
  tokenize(text, out);
  return out;
}

// Root of the hash chain for a model (different models never share blocks).
BlockHash root_hash(std::string_view model_name);
// Hash of one full block given its parent's hash (the root for the first block).
BlockHash block_hash(BlockHash parent, std::span<const TokenId> block_tokens);
// Chained hashes of every full block of `tokens`; the partial tail block is not hashed.
std::vector<BlockHash> block_hashes(std::span<const TokenId> tokens, BlockHash root,
                                    int block_size = kDefaultBlockSize);

// Synthetic output vocabulary: `vocab_word(i)` for i in [0, kVocabSize) are distinct short
// lowercase words; `vocab_token(i)` == token_id(vocab_word(i)).
inline constexpr uint32_t kVocabSize = 4096;
const std::string& vocab_word(uint32_t index);
TokenId vocab_token(uint32_t index);
// Deterministic choice of the k-th output word of a request with the given seed.
uint32_t output_word_index(uint64_t output_seed, int64_t k);

}  // namespace llmd::sim
