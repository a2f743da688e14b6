// Loading llm.c token shards and byte text into a TokenDataset, the 95/5 train/validation split,
// and the microbatch reader (sequential as llm.c, or a seeded shuffle of chunks). See data.h.
#include "trainer/data/data.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

namespace {

using File = std::unique_ptr<FILE, int (*)(FILE*)>;

File open_for_reading(const std::string& path) {
  File file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  return file;
}

size_t file_size(FILE* file, const std::string& path) {
  if (std::fseek(file, 0, SEEK_END) != 0)
    throw std::runtime_error(path + ": cannot seek (" + std::strerror(errno) + ")");
  const long size = std::ftell(file);
  if (size < 0) throw std::runtime_error(path + ": cannot tell its size (" + std::strerror(errno) + ")");
  std::rewind(file);
  return static_cast<size_t>(size);
}

void read_exactly(FILE* file, void* destination, size_t bytes, const std::string& path) {
  if (std::fread(destination, 1, bytes, file) != bytes) {
    throw std::runtime_error(path + ": read failed after " + std::to_string(std::ftell(file)) + " bytes");
  }
}

// Throws naming the first token at or above vocab_size and its index within source.
void check_tokens_below(const uint16_t* tokens, size_t count, int vocab_size, const std::string& source,
                        const char* what) {
  for (size_t i = 0; i < count; i++) {
    if (tokens[i] >= vocab_size) {
      throw std::runtime_error(source + ": " + what + " " + std::to_string(tokens[i]) + " at index " +
                               std::to_string(i) + " is >= the vocabulary size " + std::to_string(vocab_size));
    }
  }
}

void check_vocab_size(int vocab_size, int largest, const std::string& source) {
  if (vocab_size <= 0 || vocab_size > largest) {
    throw std::runtime_error(source + ": vocabulary size " + std::to_string(vocab_size) + " is not in [1, " +
                             std::to_string(largest) + "]");
  }
}

// Appends one shard's tokens after checking its header, its size and every token.
void append_shard(const std::string& path, int vocab_size, std::vector<uint16_t>& tokens) {
  File file = open_for_reading(path);
  const size_t size = file_size(file.get(), path);
  if (size < kShardHeaderBytes) {
    throw std::runtime_error(path + ": too short (" + std::to_string(size) +
                             " bytes) for the 1024-byte header of an llm.c token shard");
  }
  int32_t header[256];
  read_exactly(file.get(), header, sizeof(header), path);
  if (header[0] != kShardMagic) {
    throw std::runtime_error(path + ": header magic " + std::to_string(header[0]) + " is not " +
                             std::to_string(kShardMagic) + " (llm.c token shard)");
  }
  if (header[1] != kShardVersion) {
    throw std::runtime_error(path + ": header version " + std::to_string(header[1]) + " is not " +
                             std::to_string(kShardVersion));
  }
  const int32_t count = header[2];
  if (count < 0 || size != kShardHeaderBytes + 2 * static_cast<size_t>(count)) {
    throw std::runtime_error(path + ": size " + std::to_string(size) + " bytes is not 1024 + 2 * " +
                             std::to_string(count) + " (the header's token count)");
  }
  const size_t offset = tokens.size();
  tokens.resize(offset + static_cast<size_t>(count));
  read_exactly(file.get(), tokens.data() + offset, 2 * static_cast<size_t>(count), path);
  check_tokens_below(tokens.data() + offset, static_cast<size_t>(count), vocab_size, path, "token");
}

// Sorted bytewise so that the order does not depend on the locale's collation.
std::vector<std::string> matching_files(const std::string& pattern) {
  glob_t matches{};
  const int status = glob(pattern.c_str(), GLOB_NOSORT, nullptr, &matches);
  std::vector<std::string> paths(matches.gl_pathv, matches.gl_pathv + (status == 0 ? matches.gl_pathc : 0));
  globfree(&matches);
  if (status == GLOB_NOMATCH) throw std::runtime_error(pattern + ": no file matches this pattern");
  if (status != 0) throw std::runtime_error(pattern + ": cannot list the matching files (glob error)");
  std::sort(paths.begin(), paths.end());
  return paths;
}

// splitmix64's finaliser: spreads (seed, epoch) over the whole 64-bit seed space.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

size_t chunk_count(const BatchReader& reader) { return reader.data->tokens.size() / (reader.B * reader.T); }

void shuffle_chunks_for_epoch(BatchReader& reader, uint64_t epoch) {
  reader.chunk_order.resize(chunk_count(reader));
  shuffled_order(reader.seed, epoch, reader.chunk_order);
  reader.order_epoch = epoch;
}

}  // namespace

// Fisher-Yates with std::mt19937_64 (its output is fixed by the standard, unlike the distributions');
// the modulo's bias, below order.size() / 2^64, is negligible.
void shuffled_order(uint64_t seed, uint64_t epoch, std::vector<uint64_t>& order) {
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::mt19937_64 rng(mix64(seed ^ mix64(epoch)));
  for (size_t n = order.size(); n > 1; n--) std::swap(order[n - 1], order[rng() % n]);
}

bool is_shard_pattern(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".bin") == 0;
}

int default_vocab_size(const std::string& path) { return is_shard_pattern(path) ? kGpt2VocabSize : kByteVocabSize; }

TokenDataset load_token_shards(const std::string& pattern, int vocab_size) {
  check_vocab_size(vocab_size, 65536, pattern);
  const std::vector<std::string> paths = matching_files(pattern);
  TokenDataset data;
  data.vocab_size = vocab_size;
  data.format = TokenFormat::llmc_shards;
  for (const std::string& path : paths) {
    const size_t first = data.tokens.size();
    append_shard(path, vocab_size, data.tokens);
    data.shards.push_back({path, first, data.tokens.size() - first});
  }
  data.source = paths.size() == 1 ? paths[0] : pattern + " (" + std::to_string(paths.size()) + " shards)";
  return data;
}

TokenDataset load_text_bytes(const std::string& path, int vocab_size) {
  check_vocab_size(vocab_size, 65536, path);
  File file = open_for_reading(path);
  const size_t size = file_size(file.get(), path);
  if (size == 0) throw std::runtime_error(path + ": empty text file");
  std::vector<unsigned char> bytes(size);
  read_exactly(file.get(), bytes.data(), size, path);
  TokenDataset data;
  data.tokens.assign(bytes.begin(), bytes.end());
  check_tokens_below(data.tokens.data(), size, vocab_size, path, "byte");
  data.vocab_size = vocab_size;
  data.format = TokenFormat::text_bytes;
  data.source = path;
  return data;
}

TokenDataset load_token_data(const std::string& path, int vocab_size) {
  return is_shard_pattern(path) ? load_token_shards(path, vocab_size) : load_text_bytes(path, vocab_size);
}

TrainValSplit split_train_val(const TokenDataset& all) {
  const size_t val_count = all.tokens.size() * kValidationPercent / 100;
  const size_t train_count = all.tokens.size() - val_count;
  TrainValSplit split;
  split.train.tokens.assign(all.tokens.begin(), all.tokens.begin() + train_count);
  split.val.tokens.assign(all.tokens.begin() + train_count, all.tokens.end());
  for (TokenDataset* part : {&split.train, &split.val}) {
    part->vocab_size = all.vocab_size;
    part->format = all.format;
  }
  split.train.source = all.source + " (first " + std::to_string(100 - kValidationPercent) + "%)";
  split.val.source = all.source + " (last " + std::to_string(kValidationPercent) + "%)";
  return split;
}

BatchReader make_batch_reader(const TokenDataset& data, size_t B, size_t T, bool shuffle, uint64_t seed) {
  if (B == 0 || T == 0) throw std::runtime_error(data.source + ": microbatch of B = 0 or T = 0 tokens");
  if (data.tokens.size() < B * T + 1) {
    throw std::runtime_error(data.source + ": " + std::to_string(data.tokens.size()) +
                             " tokens, fewer than one microbatch reads (B*T+1 = " + std::to_string(B * T + 1) + ")");
  }
  BatchReader reader;
  reader.data = &data;
  reader.B = B;
  reader.T = T;
  reader.shuffle = shuffle;
  reader.seed = seed;
  return reader;
}

uint64_t microbatch_start(BatchReader& reader, uint64_t k) {
  const uint64_t tokens_per_microbatch = reader.B * reader.T;
  if (!reader.shuffle) return k * tokens_per_microbatch % reader.data->tokens.size();
  const uint64_t chunks = chunk_count(reader);
  const uint64_t epoch = k / chunks;
  if (epoch != reader.order_epoch) shuffle_chunks_for_epoch(reader, epoch);
  return reader.chunk_order[k % chunks] * tokens_per_microbatch;
}

void read_microbatch(BatchReader& reader, int* inputs, int* targets) {
  const std::vector<uint16_t>& tokens = reader.data->tokens;
  const size_t n = tokens.size();
  const size_t count = reader.B * reader.T;
  size_t index = microbatch_start(reader, reader.next_microbatch);
  int previous = tokens[index];
  for (size_t i = 0; i < count; i++) {
    index = index + 1 == n ? 0 : index + 1;
    inputs[i] = previous;
    targets[i] = tokens[index];
    previous = tokens[index];
  }
  reader.next_microbatch++;
}
