// Document starts (chapters of the text corpus, end-of-text tokens of llm.c shards), the
// document-aligned reader and its length function, the sequence-length warm-up. See documents.h.
#include "trainer/data/documents.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace {

bool is_digit(uint16_t c) { return c >= '0' && c <= '9'; }
bool is_letter(uint16_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// Whether the line at `at` opens with a chapter's first verse: digits?, letters, digits, ":1 ".
bool opens_chapter(const std::vector<uint16_t>& text, size_t at) {
  const size_t n = text.size();
  size_t i = at;
  while (i < n && is_digit(text[i])) i++;
  const size_t letters = i;
  while (i < n && is_letter(text[i])) i++;
  if (i == letters) return false;
  const size_t chapter = i;
  while (i < n && is_digit(text[i])) i++;
  if (i == chapter) return false;
  return i + 2 < n && text[i] == ':' && text[i + 1] == '1' && text[i + 2] == ' ';
}

bool is_separator(const TokenDataset& data, size_t i) {
  if (data.format == TokenFormat::llmc_shards) return data.tokens[i] == kEndOfTextToken;
  return (i == 0 || data.tokens[i - 1] == '\n') && opens_chapter(data.tokens, i);
}

const char* separator_name(TokenFormat format) {
  return format == TokenFormat::llmc_shards ? "the end-of-text token 50256"
                                            : "a chapter's first verse, a line starting \"Ge1:1 \"";
}

uint64_t sequence_count(const DocumentReader& reader) { return reader.sequences_before.back(); }

// Sequence j: its first input's index and its length (at most maxT).
struct Sequence {
  uint64_t start;
  size_t length;
};
Sequence sequence_at(const DocumentReader& reader, uint64_t j) {
  const std::vector<uint64_t>& before = reader.sequences_before;
  const size_t d = size_t(std::upper_bound(before.begin(), before.end(), j) - before.begin()) - 1;
  const uint64_t start = reader.starts[d] + (j - before[d]) * reader.maxT;
  const uint64_t end = d + 1 < reader.starts.size() ? reader.starts[d + 1] : reader.data->tokens.size() - 1;
  return {start, size_t(std::min<uint64_t>(reader.maxT, end - start))};
}

// Sequence i (of B) of microbatch k.
uint64_t sequence_index(DocumentReader& reader, uint64_t k, size_t i) {
  const uint64_t S = sequence_count(reader);
  if (!reader.shuffle) return (k * reader.B + i) % S;
  const uint64_t groups = S / reader.B;
  const uint64_t epoch = k / groups;
  if (epoch != reader.order_epoch) {
    reader.group_order.resize(groups);
    shuffled_order(reader.seed, epoch, reader.group_order);
    reader.order_epoch = epoch;
  }
  return reader.group_order[k % groups] * reader.B + i;
}

void check_cap(const DocumentReader& reader, size_t cap) {
  if (cap == 0 || cap > reader.maxT) {
    throw std::runtime_error(reader.data->source + ": microbatch length " + std::to_string(cap) +
                             " is not in [1, maxT = " + std::to_string(reader.maxT) + "]");
  }
}

// Throws naming the first shard of data that holds no end-of-text token.
void check_every_shard_separated(const TokenDataset& data) {
  for (const ShardSpan& shard : data.shards) {
    const auto first = data.tokens.begin() + shard.first;
    if (std::find(first, first + shard.count, kEndOfTextToken) == first + shard.count) {
      throw std::runtime_error(shard.path + ": no document separator (" + separator_name(data.format) + ") in " +
                               std::to_string(shard.count) + " tokens");
    }
  }
}

}  // namespace

std::vector<uint64_t> document_starts(const TokenDataset& data) {
  check_every_shard_separated(data);
  std::vector<uint64_t> starts{0};
  bool separated = false;
  for (size_t i = 0; i + 1 < data.tokens.size(); i++) {
    if (!is_separator(data, i)) continue;
    separated = true;
    if (i > 0) starts.push_back(i);
  }
  if (!separated) {
    throw std::runtime_error(data.source + ": no document separator (" + separator_name(data.format) + ") in " +
                             std::to_string(data.tokens.size()) + " tokens");
  }
  return starts;
}

DocumentReader make_document_reader(const TokenDataset& data, size_t B, size_t maxT, bool shuffle, uint64_t seed,
                                    size_t length_multiple) {
  if (B == 0 || maxT == 0) throw std::runtime_error(data.source + ": microbatch of B = 0 or maxT = 0 tokens");
  if (length_multiple == 0 || maxT % length_multiple != 0)
    throw std::runtime_error(data.source + ": microbatch lengths in multiples of " + std::to_string(length_multiple) +
                             " do not reach maxT = " + std::to_string(maxT));
  DocumentReader reader;
  reader.length_multiple = length_multiple;
  reader.data = &data;
  reader.B = B;
  reader.maxT = maxT;
  reader.shuffle = shuffle;
  reader.seed = seed;
  reader.starts = document_starts(data);
  const size_t D = reader.starts.size();
  reader.sequences_before.assign(D + 1, 0);
  for (size_t d = 0; d < D; d++) {
    const uint64_t end = d + 1 < D ? reader.starts[d + 1] : data.tokens.size() - 1;
    reader.sequences_before[d + 1] = reader.sequences_before[d] + (end - reader.starts[d] + maxT - 1) / maxT;
  }
  if (sequence_count(reader) < B) {
    throw std::runtime_error(data.source + ": " + std::to_string(sequence_count(reader)) +
                             " sequences of at most maxT = " + std::to_string(maxT) +
                             " tokens, fewer than one microbatch (B = " + std::to_string(B) + ")");
  }
  return reader;
}

namespace {

// The longest of microbatch k's sequences, each cut to cap.
size_t longest_sequence(DocumentReader& reader, uint64_t k, size_t cap) {
  size_t T = 0;
  for (size_t i = 0; i < reader.B; i++) T = std::max(T, sequence_at(reader, sequence_index(reader, k, i)).length);
  return std::min(T, cap);
}

}  // namespace

size_t microbatch_length(DocumentReader& reader, uint64_t k, size_t cap) {
  check_cap(reader, cap);
  const size_t multiple = reader.length_multiple;
  return (longest_sequence(reader, k, cap) + multiple - 1) / multiple * multiple;
}

size_t microbatch_real_tokens(DocumentReader& reader, uint64_t k, size_t cap) {
  check_cap(reader, cap);
  size_t real = 0;
  for (size_t i = 0; i < reader.B; i++) real += std::min(sequence_at(reader, sequence_index(reader, k, i)).length, cap);
  return real;
}

size_t read_document_microbatch(DocumentReader& reader, size_t cap, int* inputs, int* targets) {
  const uint64_t k = reader.next_microbatch;
  const size_t T = microbatch_length(reader, k, cap);
  const std::vector<uint16_t>& tokens = reader.data->tokens;
  for (size_t b = 0; b < reader.B; b++) {
    const Sequence sequence = sequence_at(reader, sequence_index(reader, k, b));
    const size_t length = std::min(sequence.length, cap);
    for (size_t t = 0; t < T; t++) {
      const bool real = t < length;
      inputs[b * T + t] = real ? tokens[sequence.start + t] : 0;
      targets[b * T + t] = real ? tokens[sequence.start + t + 1] : kMaskedTarget;
    }
  }
  reader.next_microbatch++;
  return T;
}

SeqLenWarmup make_seq_len_warmup(size_t start, size_t max, uint64_t steps, size_t multiple) {
  if (start == 0 || start > max) {
    throw std::runtime_error("--seq-len-warmup: start length " + std::to_string(start) + " is not in [1, maxT = " +
                             std::to_string(max) + "]");
  }
  if (multiple == 0 || max % multiple != 0)
    throw std::runtime_error("--seq-len-warmup: lengths in multiples of " + std::to_string(multiple) +
                             " do not reach maxT = " + std::to_string(max));
  return {start, max, steps, multiple};
}

size_t warmup_seq_len(const SeqLenWarmup& warmup, uint64_t step) {
  if (step >= warmup.steps) return warmup.max;
  const size_t grown = warmup.start + size_t((warmup.max - warmup.start) * step / warmup.steps);
  const size_t length = std::max(warmup.start, grown / kSeqLenWarmupMultiple * kSeqLenWarmupMultiple);
  return (length + warmup.multiple - 1) / warmup.multiple * warmup.multiple;
}
