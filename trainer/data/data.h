// The tokens the trainer reads: llm.c token shards and plain text as bytes, held in memory,
// and the reader that cuts them into microbatches of B*T inputs and B*T targets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// llm.c token shard: a header of 256 int32 {magic, version, token count, 0...}, then the tokens as uint16.
constexpr int kShardMagic = 20240520;
constexpr int kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 256 * sizeof(int32_t);
constexpr int kByteVocabSize = 256;
constexpr int kGpt2VocabSize = 50257;
// The share of a single data source held out for validation when no --val-data is given: its last 5%.
constexpr size_t kValidationPercent = 5;

enum class TokenFormat { text_bytes, llmc_shards };

// Where one llm.c shard's tokens sit in a TokenDataset, for messages about that file.
struct ShardSpan {
  std::string path;
  size_t first = 0;  // index of its first token
  size_t count = 0;
};

struct TokenDataset {
  std::vector<uint16_t> tokens;  // (N,) every shard concatenated in name order, or every byte of the text
  int vocab_size = 0;            // every token is below it (checked when loading)
  TokenFormat format = TokenFormat::text_bytes;
  std::string source;  // where the tokens came from, for messages: "data/kjv.txt (last 5%)"
  // Each shard as loaded (load_token_shards); empty for text and for the parts of a split, whose
  // shards may be cut (check the whole data's shards before splitting it).
  std::vector<ShardSpan> shards;
};

// A path ending in ".bin" is a glob pattern of llm.c shards; anything else is one text file.
bool is_shard_pattern(const std::string& path);
// The vocabulary a data source implies when --vocab is not given: 256 for text, GPT-2's 50257 for shards.
int default_vocab_size(const std::string& path);

// Every shard matching the glob pattern, sorted by name (bytewise), concatenated. Throws a one-line
// error naming the file and the problem: no match, too short, magic, version, size, token >= vocab_size.
TokenDataset load_token_shards(const std::string& pattern, int vocab_size);
// Every byte of the file is one token; throws if the file is empty or a byte is >= vocab_size.
TokenDataset load_text_bytes(const std::string& path, int vocab_size);
// load_token_shards or load_text_bytes, as is_shard_pattern decides.
TokenDataset load_token_data(const std::string& path, int vocab_size);

// The first 100 - kValidationPercent % of the tokens for training, the rest for validation.
struct TrainValSplit {
  TokenDataset train;
  TokenDataset val;
};
TrainValSplit split_train_val(const TokenDataset& all);

// Microbatch k of a run (counting across steps and accumulation) is a window of B*T+1 tokens;
// inputs are its first B*T tokens and targets the B*T tokens one further. Token indices are taken
// modulo N, so the windows wrap around the end of the data.
//   Sequential (llm.c's order without shuffling): window k starts at k*B*T.
//   Shuffled: the data has floor(N / (B*T)) chunks starting at multiples of B*T; epoch e = k / chunks
//   visits each chunk once, in the order of a Fisher-Yates permutation drawn from std::mt19937_64
//   seeded with a mix of (seed, e), and window k starts at the chunk at position k % chunks.
// next_microbatch is the reader's whole state: save it to resume, set it to 0 to re-read from the start.
struct BatchReader {
  const TokenDataset* data = nullptr;
  size_t B = 0;
  size_t T = 0;
  bool shuffle = false;
  uint64_t seed = 0;
  uint64_t next_microbatch = 0;  // k of the next read_microbatch
  // Cache of the shuffled epoch's chunk order (derived from seed and epoch, not state).
  uint64_t order_epoch = UINT64_MAX;
  std::vector<uint64_t> chunk_order;  // (chunks,) chunk indices in visiting order
};

// The shuffle's visiting order for one epoch: order (its size set by the caller) becomes a
// Fisher-Yates permutation of 0 .. order.size()-1 drawn from std::mt19937_64 seeded with a mix of
// (seed, epoch). The batch reader's chunks and the document reader's groups (documents.h) use it.
void shuffled_order(uint64_t seed, uint64_t epoch, std::vector<uint64_t>& order);

// Throws if the data holds fewer than B*T+1 tokens (less than one window).
BatchReader make_batch_reader(const TokenDataset& data, size_t B, size_t T, bool shuffle, uint64_t seed);
// First token index of microbatch k's window (before wrapping the window's later tokens).
uint64_t microbatch_start(BatchReader& reader, uint64_t k);
// Writes microbatch next_microbatch into the host arrays and advances next_microbatch by one.
void read_microbatch(BatchReader& reader, int* inputs, int* targets);  // inputs, targets (B, T)
