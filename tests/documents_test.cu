// The variable-length data mode's data layer (trainer/data/documents.h): document starts found in a
// hand-written text and token array, the document-aligned reader on a hand-made shard (every microbatch
// written out by hand), its sequences inside documents covering each token once in order, the length function
// equal to what the reader reads, the shuffle and determinism, the sequence-length warm-up at a few steps,
// and each error's one line. Host code only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tests/error_message.h"
#include "trainer/data/data.h"
#include "trainer/data/documents.h"

namespace {

constexpr int kEot = kEndOfTextToken;

TokenDataset text(const std::string& bytes) {
  TokenDataset data;
  data.tokens.assign(bytes.begin(), bytes.end());
  data.vocab_size = 256;
  data.format = TokenFormat::text_bytes;
  data.source = "hand.txt";
  return data;
}

TokenDataset shard(const std::vector<uint16_t>& tokens) {
  TokenDataset data;
  data.tokens = tokens;
  data.vocab_size = kGpt2VocabSize;
  data.format = TokenFormat::llmc_shards;
  data.source = "hand.bin";
  return data;
}

// Documents 0..11 of the hand-made shard: [0, 4), [4, 6), [6, 11); token 11 only a target. With maxT = 3 its
// sequences are [0, 3), [3, 4), [4, 6), [6, 9), [9, 11).
TokenDataset hand_shard() { return shard({kEot, 5, 6, 7, kEot, 8, kEot, 9, 10, 11, 12, kEot}); }

// 2000 tokens, token i = i + 1, except end-of-text tokens at irregular, never adjacent, positions: a token
// says where it sits (position_of), documents of 2 to 500 tokens.
TokenDataset numbered_shard() {
  std::vector<uint16_t> tokens(2000);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = uint16_t(i + 1);
  for (size_t i : {0, 2, 9, 11, 40, 43, 100, 257, 261, 300, 555, 560, 901, 1000, 1500, 1700, 1702}) tokens[i] = kEot;
  return shard(tokens);
}
bool separated_at(const TokenDataset& data, size_t i) { return data.tokens[i] == kEot; }
// The index of an input in numbered_shard, from the input and its target (an end-of-text input is followed by
// a numbered token, since no two separators are adjacent).
size_t position_of(int input, int target) { return input == kEot ? size_t(target) - 2 : size_t(input) - 1; }

// One microbatch as read: its T, inputs and targets (B, T).
struct Read {
  size_t T;
  std::vector<int> inputs, targets;
};
Read read(DocumentReader& reader, size_t cap) {
  Read r;
  r.inputs.resize(reader.B * reader.maxT);
  r.targets.resize(reader.B * reader.maxT);
  r.T = read_document_microbatch(reader, cap, r.inputs.data(), r.targets.data());
  r.inputs.resize(reader.B * r.T);
  r.targets.resize(reader.B * r.T);
  return r;
}

}  // namespace

// ---- Document starts ----

TEST(Documents, ChapterStartsOfAText) {
  // Offsets by hand: the lines start at 0, 9, 22, 31 and 41 (53 bytes). Chapters open at 0, 22 ("Ge2:1") and
  // 31 ("1Sa1:1"); "Ge3:1 " inside a line and verse 10 ("SSol1:10") do not.
  const TokenDataset data = text("Ge1:1 A.\nGe1:2 Ge3:1 \nGe2:1 C.\n1Sa1:1 D.\nSSol1:10 E.\n");
  EXPECT_EQ(document_starts(data), (std::vector<uint64_t>{0, 22, 31}));
}

TEST(Documents, TextBeginningInsideAChapterStartsAtZero) {
  EXPECT_EQ(document_starts(text("and.\nGe2:1 C.\n")), (std::vector<uint64_t>{0, 5}));
}

TEST(Documents, EndOfTextTokensOfAShard) {
  EXPECT_EQ(document_starts(hand_shard()), (std::vector<uint64_t>{0, 4, 6}));  // 11: the last token
  EXPECT_EQ(document_starts(shard({1, 2, kEot, 3})), (std::vector<uint64_t>{0, 2}));
}

TEST(Documents, TheDefaultCorpusHasTheBiblesChapters) {
  const std::string path = "data/kjv.txt";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not built (make data/kjv.txt)";
  const std::vector<uint64_t> starts = document_starts(load_text_bytes(path, 256));
  EXPECT_EQ(starts.size(), 1189u) << "the King James Bible has 1189 chapters";
}

TEST(Documents, DataWithoutASeparatorIsAnError) {
  EXPECT_EQ(error_of([] { document_starts(text("In the beginning\nGe1:2 And\n")); }),
            "hand.txt: no document separator (a chapter's first verse, a line "
            "starting \"Ge1:1 \") in 27 tokens");
  EXPECT_EQ(error_of([] {
              document_starts(shard({1, 2, 3}));
            }),
            "hand.bin: no document separator (the end-of-text token 50256) in "
            "3 tokens");
}

TEST(Documents, AShardWithoutASeparatorIsNamed) {
  TokenDataset data = shard({kEot, 1, 2, 3, 4, kEot, 5});
  data.shards = {{"a.bin", 0, 3}, {"b.bin", 3, 2}, {"c.bin", 5, 2}};  // b.bin: tokens 3 and 4
  EXPECT_EQ(error_of([&] { document_starts(data); }),
            "b.bin: no document separator (the end-of-text token 50256) in 2 tokens");
  data.shards = {{"a.bin", 0, 3}, {"b.bin", 3, 4}};
  EXPECT_EQ(document_starts(data), (std::vector<uint64_t>{0, 5}));
}

// ---- The document-aligned reader ----

TEST(DocumentReader, MicrobatchesOfAHandMadeShard) {
  const TokenDataset data = hand_shard();
  DocumentReader reader = make_document_reader(data, 2, 3, false, 0);
  const int _ = kMaskedTarget;

  Read r = read(reader, 3);  // sequences 0 and 1
  EXPECT_EQ(r.T, 3u);
  EXPECT_EQ(r.inputs, (std::vector<int>{kEot, 5, 6, /**/ 7, 0, 0}));
  EXPECT_EQ(r.targets, (std::vector<int>{5, 6, 7, /**/ kEot, _, _}));
  r = read(reader, 3);  // sequences 2 and 3
  EXPECT_EQ(r.T, 3u);
  EXPECT_EQ(r.inputs, (std::vector<int>{kEot, 8, 0, /**/ kEot, 9, 10}));
  EXPECT_EQ(r.targets, (std::vector<int>{8, kEot, _, /**/ 9, 10, 11}));
  r = read(reader, 3);  // sequences 4 and 0: the data wraps
  EXPECT_EQ(r.T, 3u);
  EXPECT_EQ(r.inputs, (std::vector<int>{11, 12, 0, /**/ kEot, 5, 6}));
  EXPECT_EQ(r.targets, (std::vector<int>{12, kEot, _, /**/ 5, 6, 7}));
  r = read(reader, 3);  // sequences 1 and 2: both short
  EXPECT_EQ(r.T, 2u);
  EXPECT_EQ(r.inputs, (std::vector<int>{7, 0, /**/ kEot, 8}));
  EXPECT_EQ(r.targets, (std::vector<int>{kEot, _, /**/ 8, kEot}));
}

TEST(DocumentReader, ACapKeepsEachSequencesFirstTokens) {
  const TokenDataset data = hand_shard();
  DocumentReader reader = make_document_reader(data, 2, 3, false, 0);
  Read r = read(reader, 2);  // sequences 0 (cut to 2) and 1
  EXPECT_EQ(r.T, 2u);
  EXPECT_EQ(r.inputs, (std::vector<int>{kEot, 5, /**/ 7, 0}));
  EXPECT_EQ(r.targets, (std::vector<int>{5, 6, /**/ kEot, kMaskedTarget}));
  r = read(reader, 1);  // sequences 2 and 3 cut to their first token
  EXPECT_EQ(r.inputs, (std::vector<int>{kEot, kEot}));
  EXPECT_EQ(r.targets, (std::vector<int>{8, 9}));
}

// A length multiple (tp with --sequence-parallel): each microbatch's T rounded up to it, the rows
// padded as behind any shorter sequence; the real tokens unchanged.
TEST(DocumentReader, LengthsRoundedUpToTheMultipleArePadded) {
  const TokenDataset data = hand_shard();
  DocumentReader reader = make_document_reader(data, 2, 3, false, 0, 3);
  const int _ = kMaskedTarget;
  reader.next_microbatch = 3;
  const Read r = read(reader, 3);  // sequences 1 and 2: both short, T = 2 rounded up to 3
  EXPECT_EQ(r.T, 3u);
  EXPECT_EQ(r.inputs, (std::vector<int>{7, 0, 0, /**/ kEot, 8, 0}));
  EXPECT_EQ(r.targets, (std::vector<int>{kEot, _, _, /**/ 8, kEot, _}));
  EXPECT_EQ(microbatch_length(reader, 3, 3), 3u);
  EXPECT_EQ(microbatch_real_tokens(reader, 3, 3), 3u);
  EXPECT_EQ(error_of([&] { make_document_reader(data, 2, 3, false, 0, 2); }),
            "hand.bin: microbatch lengths in multiples of 2 do not reach maxT = 3");
}

TEST(DocumentReader, SequencesCoverEveryDocumentOnceInOrderWithoutCrossingOne) {
  const TokenDataset data = numbered_shard();
  for (size_t maxT : {1, 5, 16, 64}) {
    DocumentReader reader = make_document_reader(data, 3, maxT, false, 0);
    std::vector<size_t> covered;  // every real input's position, in reading order
    size_t next_position = 0;
    while (next_position < data.tokens.size() - 1) {
      const Read r = read(reader, maxT);
      ASSERT_LE(r.T, maxT);
      size_t longest = 0;
      for (size_t b = 0; b < reader.B; b++) {
        const int* inputs = &r.inputs[b * r.T];
        const int* targets = &r.targets[b * r.T];
        size_t length = 0;
        while (length < r.T && targets[length] != kMaskedTarget) length++;
        longest = std::max(longest, length);
        const size_t first = position_of(inputs[0], targets[0]);
        for (size_t t = 0; t < r.T; t++) {
          if (t >= length) {
            ASSERT_EQ(targets[t], kMaskedTarget) << "padding only after the sequence";
            ASSERT_EQ(inputs[t], 0);
            continue;
          }
          ASSERT_EQ(inputs[t], data.tokens[first + t]) << "maxT " << maxT << " row " << b << " t " << t;
          ASSERT_EQ(targets[t], data.tokens[first + t + 1]);
          if (t > 0) {
            ASSERT_FALSE(separated_at(data, first + t)) << "a sequence crosses the document start " << first + t;
          }
        }
        if (next_position == data.tokens.size() - 1) continue;  // the rows after the data wrapped
        for (size_t t = 0; t < length; t++) covered.push_back(first + t);
        next_position = first + length;
        if (length < maxT && next_position < data.tokens.size() - 1) {
          ASSERT_TRUE(separated_at(data, next_position)) << "a sequence shorter than maxT ends at a document's end";
        }
      }
      ASSERT_EQ(r.T, longest) << "T is the longest sequence of the microbatch";
    }
    ASSERT_EQ(covered.size(), data.tokens.size() - 1) << "maxT " << maxT;
    for (size_t p = 0; p < covered.size(); p++) ASSERT_EQ(covered[p], p) << "maxT " << maxT;
  }
}

TEST(DocumentReader, LengthAndRealTokenFunctionsGiveWhatTheReaderReads) {
  const TokenDataset data = numbered_shard();
  for (bool shuffle : {false, true}) {
    for (size_t cap : {64, 40, 8}) {
      DocumentReader reader = make_document_reader(data, 4, 64, shuffle, 7);
      DocumentReader lengths = make_document_reader(data, 4, 64, shuffle, 7);
      std::set<size_t> seen;
      for (uint64_t k = 0; k < 300; k++) {  // several epochs of the shuffle's groups
        const size_t T = microbatch_length(lengths, 299 - k, cap);  // out of order: no hidden state
        reader.next_microbatch = 299 - k;
        const Read r = read(reader, cap);
        ASSERT_EQ(T, r.T) << "shuffle " << shuffle << " cap " << cap << " k " << 299 - k;
        size_t longest = 0;
        for (size_t b = 0; b < reader.B; b++)
          longest = std::max<size_t>(
              longest, std::find(&r.targets[b * T], &r.targets[b * T] + T, kMaskedTarget) - &r.targets[b * T]);
        ASSERT_EQ(longest, T) << "one row is all real tokens";
        const size_t real = size_t(std::count_if(r.targets.begin(), r.targets.begin() + reader.B * T,
                                                 [](int target) { return target != kMaskedTarget; }));
        ASSERT_EQ(microbatch_real_tokens(lengths, 299 - k, cap), real)
            << "shuffle " << shuffle << " cap " << cap << " k " << 299 - k << ": the targets other than -1";
        seen.insert(T);
      }
      // At cap 8 every microbatch holds a sequence of 8 or more: all are 8.
      if (cap > 8) {
        EXPECT_GT(seen.size(), 1u) << "microbatches of different lengths, shuffle " << shuffle << " cap " << cap;
      }
    }
  }
}

TEST(DocumentReader, ShuffleVisitsEveryGroupOncePerEpochInAnOrderFixedBySeed) {
  const TokenDataset data = numbered_shard();
  // The first input's position of each microbatch k in [from, to).
  auto first_positions = [&](uint64_t seed, bool shuffle, uint64_t from, uint64_t to) {
    DocumentReader reader = make_document_reader(data, 1, 16, shuffle, seed);
    reader.next_microbatch = from;
    std::vector<size_t> positions;
    for (uint64_t k = from; k < to; k++) {
      const Read r = read(reader, 16);
      positions.push_back(position_of(r.inputs[0], r.targets[0]));
    }
    return positions;
  };
  // With B = 1 a group is a sequence: the sequential order wraps after all G of them.
  const std::vector<size_t> sequential = first_positions(1, false, 0, 2000);
  const uint64_t G = uint64_t(std::find(sequential.begin() + 1, sequential.end(), 0) - sequential.begin());
  ASSERT_LT(G, 2000u) << "the sequential order wraps";
  const std::set<size_t> every_group(sequential.begin(), sequential.begin() + G);
  ASSERT_EQ(every_group.size(), G);
  for (uint64_t epoch = 0; epoch < 3; epoch++) {
    const std::vector<size_t> order = first_positions(1337, true, epoch * G, epoch * G + G);
    EXPECT_EQ(std::set<size_t>(order.begin(), order.end()), every_group) << "epoch " << epoch;
  }
  EXPECT_EQ(first_positions(1337, true, 0, 3 * G), first_positions(1337, true, 0, 3 * G));
  EXPECT_NE(first_positions(1337, true, 0, G), first_positions(1338, true, 0, G));
  EXPECT_NE(first_positions(1337, true, 0, G), first_positions(1337, true, G, 2 * G)) << "each epoch its order";
}

TEST(DocumentReader, BadInputIsAnError) {
  const TokenDataset data = hand_shard();
  DocumentReader reader = make_document_reader(data, 2, 3, false, 0);
  std::vector<int> inputs(6), targets(6);
  EXPECT_EQ(error_of([&] { microbatch_length(reader, 0, 4); }),
            "hand.bin: microbatch length 4 is not in [1, maxT = 3]");
  EXPECT_EQ(error_of([&] { read_document_microbatch(reader, 0, inputs.data(), targets.data()); }),
            "hand.bin: microbatch length 0 is not in [1, maxT = 3]");
  EXPECT_EQ(error_of([&] { make_document_reader(data, 0, 3, false, 0); }),
            "hand.bin: microbatch of B = 0 or maxT = 0 tokens");
  EXPECT_EQ(error_of([&] { make_document_reader(data, 6, 3, false, 0); }),
            "hand.bin: 5 sequences of at most maxT = 3 tokens, fewer than one microbatch (B = 6)");
}

// ---- Sequence-length warm-up ----

TEST(SeqLenWarmup, GrowsLinearlyInMultiplesOfEight) {
  const SeqLenWarmup warmup = make_seq_len_warmup(8, 64, 100);  // 8 + 56 * step / 100, rounded down
  EXPECT_EQ(warmup_seq_len(warmup, 0), 8u);
  EXPECT_EQ(warmup_seq_len(warmup, 14), 8u);   // 8 + 7.84
  EXPECT_EQ(warmup_seq_len(warmup, 15), 16u);  // 8 + 8.4
  EXPECT_EQ(warmup_seq_len(warmup, 50), 32u);  // 36
  EXPECT_EQ(warmup_seq_len(warmup, 99), 56u);  // 63.44
  EXPECT_EQ(warmup_seq_len(warmup, 100), 64u);
  EXPECT_EQ(warmup_seq_len(warmup, 5000), 64u);
  EXPECT_EQ(warmup_seq_len(make_seq_len_warmup(8, 64, 0), 0), 64u) << "no warm-up";
}

TEST(SeqLenWarmup, NeverBelowItsStartAndEndsAtAMaximumOfAnyLength) {
  const SeqLenWarmup warmup = make_seq_len_warmup(20, 100, 10);  // 20 + 8 * step
  EXPECT_EQ(warmup_seq_len(warmup, 0),
            20u);                             // 20 rounds down to 16, below the start
  EXPECT_EQ(warmup_seq_len(warmup, 5), 56u);  // 60
  EXPECT_EQ(warmup_seq_len(warmup, 9), 88u);  // 92
  EXPECT_EQ(warmup_seq_len(warmup, 10), 100u);
}

// A multiple (tp with --sequence-parallel) rounds each length up: a start below it, and the
// multiples of 8 of a tp that does not divide 8.
TEST(SeqLenWarmup, LengthsRoundedUpToTheMultiple) {
  const SeqLenWarmup warmup = make_seq_len_warmup(5, 96, 11, 3);  // 5 + 91 * step / 11
  EXPECT_EQ(warmup_seq_len(warmup, 0), 6u);   // 5
  EXPECT_EQ(warmup_seq_len(warmup, 1), 9u);   // 13.3, down to 8
  EXPECT_EQ(warmup_seq_len(warmup, 3), 24u);  // 29.8, down to 24: a multiple already
  EXPECT_EQ(warmup_seq_len(warmup, 10), 81u);  // 87.7, down to 80
  EXPECT_EQ(warmup_seq_len(warmup, 11), 96u);
  EXPECT_EQ(error_of([] { make_seq_len_warmup(8, 64, 100, 3); }),
            "--seq-len-warmup: lengths in multiples of 3 do not reach maxT = 64");
}

TEST(SeqLenWarmup, StartOfZeroOrAboveTheMaximumIsAnError) {
  EXPECT_EQ(error_of([] { make_seq_len_warmup(0, 64, 100); }),
            "--seq-len-warmup: start length 0 is not in [1, maxT = 64]");
  EXPECT_EQ(error_of([] { make_seq_len_warmup(65, 64, 100); }),
            "--seq-len-warmup: start length 65 is not in [1, maxT = 64]");
}
