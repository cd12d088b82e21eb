#include "bench/sim/tokens.h"

#include <array>

namespace llmd::sim {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Pronounceable 2-4 syllable words built from the index, all distinct by construction
// (the index is written in a mixed radix of consonant-vowel syllables).
std::array<std::string, kVocabSize> build_vocab() {
  static constexpr std::string_view kConsonants = "bdfgklmnprstvz";  // 14
  static constexpr std::string_view kVowels = "aeiou";               // 5 -> 70 syllables
  std::array<std::string, kVocabSize> words;
  for (uint32_t i = 0; i < kVocabSize; ++i) {
    std::string w;
    uint32_t v = i;
    // 70^2 = 4900 >= 4096: two syllables always suffice; a third one (from the low bits) makes
    // the words look less uniform without breaking uniqueness (it is a suffix).
    for (int s = 0; s < 2; ++s) {
      const uint32_t syl = v % 70;
      v /= 70;
      w += kConsonants[syl % 14];
      w += kVowels[syl / 14];
    }
    if (i % 3 == 0) {
      w += kConsonants[(i / 3) % 14];
    }
    words[i] = std::move(w);
  }
  return words;
}

const std::array<std::string, kVocabSize>& vocab() {
  static const auto words = build_vocab();
  return words;
}

const std::array<TokenId, kVocabSize>& vocab_tokens() {
  static const auto tokens = [] {
    std::array<TokenId, kVocabSize> t{};
    for (uint32_t i = 0; i < kVocabSize; ++i) {
      t[i] = token_id(vocab()[i]);
    }
    return t;
  }();
  return tokens;
}

}  // namespace

uint64_t hash_bytes(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return splitmix64(h);
}

uint64_t hash_combine(uint64_t a, uint64_t b) {
  return splitmix64(a ^ (splitmix64(b) + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2)));
}

int64_t count_tokens(std::string_view text) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : text) {
    if (is_space(c)) {
      in_word = false;
    } else if (!in_word) {
      in_word = true;
      ++n;
    }
  }
  return n;
}

void tokenize(std::string_view text, std::vector<TokenId>& out) {
  std::size_t i = 0;
  const std::size_t n = text.size();
  while (i < n) {
    while (i < n && is_space(text[i])) {
      ++i;
    }
    const std::size_t start = i;
    while (i < n && !is_space(text[i])) {
      ++i;
    }
    if (i > start) {
      out.push_back(token_id(text.substr(start, i - start)));
    }
  }
}

BlockHash root_hash(std::string_view model_name) {
  return hash_combine(0x6c6c6d2d73696dull /* "llm-sim" */, hash_bytes(model_name));
}

BlockHash block_hash(BlockHash parent, std::span<const TokenId> block_tokens) {
  uint64_t h = parent;
  for (TokenId t : block_tokens) {
    h = hash_combine(h, t);
  }
  return hash_combine(h, block_tokens.size());
}

std::vector<BlockHash> block_hashes(std::span<const TokenId> tokens, BlockHash root,
                                    int block_size) {
  std::vector<BlockHash> out;
  if (block_size <= 0) {
    return out;
  }
  const std::size_t bs = static_cast<std::size_t>(block_size);
  out.reserve(tokens.size() / bs);
  BlockHash parent = root;
  for (std::size_t i = 0; i + bs <= tokens.size(); i += bs) {
    parent = block_hash(parent, tokens.subspan(i, bs));
    out.push_back(parent);
  }
  return out;
}

const std::string& vocab_word(uint32_t index) {
  return vocab()[index % kVocabSize];
}

TokenId vocab_token(uint32_t index) {
  return vocab_tokens()[index % kVocabSize];
}

uint32_t output_word_index(uint64_t output_seed, int64_t k) {
  return static_cast<uint32_t>(hash_combine(output_seed, static_cast<uint64_t>(k)) % kVocabSize);
}

}  // namespace llmd::sim
