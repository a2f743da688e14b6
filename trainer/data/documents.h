// The variable-length data mode (issue 34): where a TokenDataset's documents start, the reader that
// cuts them into sequences that never cross a document start, each microbatch at its own length T,
// and the sequence-length warm-up. A microbatch's T is a pure function of its index (and the cap),
// computed from the document starts alone, so every rank can compute every microbatch's shape for
// a whole step without reading tokens or talking to another rank.
//
// Document starts. Index 0 always (data may begin inside a document: the validation part of a
// split), and every separator:
//   text (the default corpus, the King James Bible as Debian's `bible` prints it, one verse a
//     line: "Ge1:1 In the beginning ..."): a chapter, the start of a line whose reference has
//     verse 1: optional digits, letters, the chapter's digits, ":1 " ("Ge1:1 ", "1Sa3:1 ");
//   llm.c shards: every end-of-text token (50256, GPT-2's <|endoftext|>), which llm.c's shard
//     writers put before each document.
// Document d spans the inputs [start(d), start(d+1)); the last one ends at N - 1, since the last token
// has no next token to be its target. A document's last input has as target the token after it, the
// next document's first: for shards its end-of-text token (the model learns where a document ends,
// as in llm.c), for text the next chapter's reference.
//
// Sequences. Each document is cut from its start into pieces of maxT inputs, the last one shorter;
// sequence j is the j-th piece in data order (S of them). Microbatch k is B of them:
//   sequential: sequences kB, ..., kB+B-1 (modulo S: the data wraps as the batch reader's does);
//   shuffled: the data holds floor(S / B) groups of B consecutive sequences; epoch e = k / groups
//     visits each group once, in data.h's shuffled_order(seed, e) (the batch reader's scheme).
// Padding. Microbatch k's T is the longest of its B sequences, rounded up to a multiple of the
// reader's length_multiple (tp with --sequence-parallel, whose tp ranks each hold B T / tp rows;
// else 1); inputs and targets are (B, T), row b
// holding sequence b's tokens, then padding: input 0 (any token would do) and target
// kMaskedTarget, which the loss skips. Padding sits at the end of a row, so causal attention keeps
// every real position blind to it.
// The cap (sequence-length warm-up). Reading at a cap below maxT keeps each sequence's first cap
// tokens and skips the rest, as the truncating form of DeepSpeed's sequence-length curriculum does
// (Li et al. 2022, "The Stability-Efficiency Dilemma"); the cut points stay those of maxT, so a
// microbatch's tokens and T depend only on (k, cap), never on the caps of earlier steps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainer/data/data.h"

// The target of a padding position: no loss, no gradient.
constexpr int kMaskedTarget = -1;
// GPT-2's <|endoftext|>, the separator of llm.c's token shards.
constexpr uint16_t kEndOfTextToken = 50256;

// The document starts of data, ascending, 0 first; a separator on the last token (an empty document)
// is left out. Throws "<file>: no document separator (...)" when a shard of data.shards holds none,
// "<source>: ..." when the data holds none.
std::vector<uint64_t> document_starts(const TokenDataset& data);

struct DocumentReader {
  const TokenDataset* data = nullptr;
  size_t B = 0;
  size_t maxT = 0;
  bool shuffle = false;
  uint64_t seed = 0;
  size_t length_multiple = 1;              // every microbatch's T a multiple of it (padded)
  uint64_t next_microbatch = 0;            // k of the next read_document_microbatch: the whole state
  std::vector<uint64_t> starts;            // (D,) document_starts(*data)
  std::vector<uint64_t> sequences_before;  // (D+1,) sequences in documents 0..d-1; the last is S
  // Cache of the shuffled epoch's group order (derived from seed and epoch, not state).
  uint64_t order_epoch = UINT64_MAX;
  std::vector<uint64_t> group_order;  // (S / B,) group indices in visiting order
};

// Throws (one line naming data.source) for B or maxT of 0, a length_multiple that does not divide
// maxT, data without separators, and data with fewer than B sequences.
DocumentReader make_document_reader(const TokenDataset& data, size_t B, size_t maxT, bool shuffle, uint64_t seed,
                                    size_t length_multiple = 1);
// The T of microbatch k read at cap (the longest of its sequences, each cut to cap tokens, rounded
// up to a multiple of length_multiple), from the document starts alone: B binary searches. Throws
// if cap is 0 or above maxT.
size_t microbatch_length(DocumentReader& reader, uint64_t k, size_t cap);
// The real (unpadded) targets of microbatch k read at cap: the sum of its B sequences' lengths,
// each cut to cap, from the document starts alone (what a step's loss is the mean over).
size_t microbatch_real_tokens(DocumentReader& reader, uint64_t k, size_t cap);
// Writes microbatch next_microbatch at cap, advances next_microbatch by one and returns its T.
// inputs, targets: (B, T) row-major, room for B * maxT each.
size_t read_document_microbatch(DocumentReader& reader, size_t cap, int* inputs, int* targets);

// Sequence-length warm-up (--seq-len-warmup STEPS): T_max grows linearly from start to max over
// `steps` steps, rounded down to a multiple of kSeqLenWarmupMultiple (never below start), then
// stays at max: the fixed_linear schedule of DeepSpeed's curriculum learning (Li et al. 2022),
// with its usual smallest length and step of 8 (MosaicML's SeqLengthWarmup defaults to the same:
// a multiple of 8 keeps the matrix products on the tensor cores' tiles). Then rounded up to a
// multiple of `multiple` (tp with --sequence-parallel, else 1): only a start, or the lengths of a
// tp that does not divide 8, change.
constexpr size_t kSeqLenWarmupStart = 8;
constexpr size_t kSeqLenWarmupMultiple = 8;
struct SeqLenWarmup {
  size_t start = kSeqLenWarmupStart;
  size_t max = 0;
  uint64_t steps = 0;  // 0: no warm-up, max from the first step
  size_t multiple = 1;
};
// Throws a one-line error if start is 0 or above max, or multiple does not divide max.
SeqLenWarmup make_seq_len_warmup(size_t start, size_t max, uint64_t steps, size_t multiple = 1);
// The cap of the step after `step` completed ones (0 for the first step).
size_t warmup_seq_len(const SeqLenWarmup& warmup, uint64_t step);
