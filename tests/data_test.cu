// The trainer's data: llm.c shards written here read back and concatenate by glob, each malformed
// shard gives its one-line error, text is one token per byte and splits 95/5, the microbatch reader
// follows llm.c's sequential order (with wrap) or a seeded shuffle, and resumes from its position.
// Also the tokenizer that decodes samples. Runs in both builds (host code only).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/error_message.h"
#include "trainer/data/data.h"
#include "trainer/data/tokenizer.h"

namespace {

// A fresh directory from mkdtemp, removed with everything in it at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/data_test_XXXXXX";
    if (mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = name;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// An llm.c shard as its Python writer makes it; the header fields can be set wrong on purpose.
std::string shard_bytes(const std::vector<uint16_t>& tokens, int32_t magic = 20240520, int32_t version = 1,
                        int32_t count = -1) {
  int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = count >= 0 ? count : static_cast<int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header), sizeof(header));
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(uint16_t));
  return bytes;
}

// Tokens 0, 1, ..., n-1 offset by first: each token says where it sits.
std::vector<uint16_t> counting_tokens(size_t n, uint16_t first = 0) {
  std::vector<uint16_t> tokens(n);
  for (size_t i = 0; i < n; i++) tokens[i] = static_cast<uint16_t>(first + i);
  return tokens;
}

// The first token of every microbatch of reader k = from, ..., to - 1.
std::vector<int> window_starts(BatchReader& reader, uint64_t from, uint64_t to) {
  std::vector<int> inputs(reader.B * reader.T), targets(reader.B * reader.T), starts;
  reader.next_microbatch = from;
  for (uint64_t k = from; k < to; k++) {
    read_microbatch(reader, inputs.data(), targets.data());
    starts.push_back(inputs[0]);
  }
  return starts;
}

}  // namespace

TEST(Data, ShardReadsBackItsTokens) {
  TempDir dir;
  const std::vector<uint16_t> tokens = {50256, 464, 0, 3290, 318, 50256, 7};
  write_bytes(dir.file("one.bin"), shard_bytes(tokens));

  const TokenDataset data = load_token_shards(dir.file("one.bin"), 50257);

  EXPECT_EQ(data.tokens, tokens);
  EXPECT_EQ(data.vocab_size, 50257);
  EXPECT_EQ(data.format, TokenFormat::llmc_shards);
  EXPECT_EQ(data.source, dir.file("one.bin"));
}

TEST(Data, GlobConcatenatesShardsInNameOrder) {
  TempDir dir;
  // Written out of order, with a file the pattern does not match.
  write_bytes(dir.file("train_000002.bin"), shard_bytes(counting_tokens(5, 200)));
  write_bytes(dir.file("train_000000.bin"), shard_bytes(counting_tokens(3, 0)));
  write_bytes(dir.file("val_000000.bin"), shard_bytes(counting_tokens(4, 900)));
  write_bytes(dir.file("train_000001.bin"), shard_bytes(counting_tokens(2, 100)));

  const TokenDataset data = load_token_data(dir.file("train_*.bin"), 1000);

  const std::vector<uint16_t> expected = {0, 1, 2, 100, 101, 200, 201, 202, 203, 204};
  EXPECT_EQ(data.tokens, expected);
  EXPECT_EQ(data.source, dir.file("train_*.bin") + " (3 shards)");
  ASSERT_EQ(data.shards.size(), 3u);
  EXPECT_EQ(data.shards[1].path, dir.file("train_000001.bin"));
  EXPECT_EQ(data.shards[1].first, 3u);
  EXPECT_EQ(data.shards[2].first, 5u);
  EXPECT_EQ(data.shards[2].count, 5u);
}

TEST(Data, PatternMatchingNoFileIsAnError) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("none_*.bin"), 50257); }),
            dir.file("none_*.bin") + ": no file matches this pattern");
}

TEST(Data, ShardShorterThanItsHeaderIsAnError) {
  TempDir dir;
  write_bytes(dir.file("short.bin"), shard_bytes({}).substr(0, 1000));
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("short.bin"), 50257); }),
            dir.file("short.bin") + ": too short (1000 bytes) for the 1024-byte header of an llm.c token shard");
}

TEST(Data, ShardWithWrongMagicIsAnError) {
  TempDir dir;
  write_bytes(dir.file("magic.bin"), shard_bytes(counting_tokens(4), 20240326));
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("magic.bin"), 50257); }),
            dir.file("magic.bin") + ": header magic 20240326 is not 20240520 (llm.c token shard)");
}

TEST(Data, ShardWithWrongVersionIsAnError) {
  TempDir dir;
  write_bytes(dir.file("version.bin"), shard_bytes(counting_tokens(4), 20240520, 2));
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("version.bin"), 50257); }),
            dir.file("version.bin") + ": header version 2 is not 1");
}

TEST(Data, ShardWhoseSizeDisagreesWithItsCountIsAnError) {
  TempDir dir;
  write_bytes(dir.file("truncated.bin"), shard_bytes(counting_tokens(9), 20240520, 1, 10));
  write_bytes(dir.file("longer.bin"), shard_bytes(counting_tokens(11), 20240520, 1, 10));
  write_bytes(dir.file("odd.bin"), shard_bytes(counting_tokens(10)) + "x");
  write_bytes(dir.file("negative.bin"),
              shard_bytes({}, 20240520, 1, 0).substr(0, 8) + std::string(4, '\xff') + std::string(1012, '\0'));

  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("truncated.bin"), 50257); }),
            dir.file("truncated.bin") + ": size 1042 bytes is not 1024 + 2 * 10 (the header's token count)");
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("longer.bin"), 50257); }),
            dir.file("longer.bin") + ": size 1046 bytes is not 1024 + 2 * 10 (the header's token count)");
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("odd.bin"), 50257); }),
            dir.file("odd.bin") + ": size 1045 bytes is not 1024 + 2 * 10 (the header's token count)");
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("negative.bin"), 50257); }),
            dir.file("negative.bin") + ": size 1024 bytes is not 1024 + 2 * -1 (the header's token count)");
}

TEST(Data, ShardTokenAtOrAboveTheVocabularyIsAnError) {
  TempDir dir;
  write_bytes(dir.file("vocab.bin"), shard_bytes({1, 2, 50256, 50257, 3}));
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("vocab.bin"), 50257); }),
            dir.file("vocab.bin") + ": token 50257 at index 3 is >= the vocabulary size 50257");
}

TEST(Data, BadShardAmongGoodOnesIsNamed) {
  TempDir dir;
  write_bytes(dir.file("s_0.bin"), shard_bytes(counting_tokens(4)));
  write_bytes(dir.file("s_1.bin"), shard_bytes(counting_tokens(4), 7));
  write_bytes(dir.file("s_2.bin"), shard_bytes(counting_tokens(4)));
  EXPECT_EQ(error_of([&] { load_token_shards(dir.file("s_*.bin"), 50257); }),
            dir.file("s_1.bin") + ": header magic 7 is not 20240520 (llm.c token shard)");
}

TEST(Data, MissingFileIsAnError) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { load_text_bytes(dir.file("absent.txt"), 256); }),
            dir.file("absent.txt") + ": cannot open (No such file or directory)");
}

TEST(Data, TextIsOneTokenPerByte) {
  TempDir dir;
  write_bytes(dir.file("t.txt"), std::string("In the\n\xff\x00", 9));

  const TokenDataset data = load_token_data(dir.file("t.txt"), 256);

  const std::vector<uint16_t> expected = {'I', 'n', ' ', 't', 'h', 'e', '\n', 255, 0};
  EXPECT_EQ(data.tokens, expected);
  EXPECT_EQ(data.vocab_size, 256);
  EXPECT_EQ(data.format, TokenFormat::text_bytes);
}

TEST(Data, TextErrorsNameTheFile) {
  TempDir dir;
  write_bytes(dir.file("empty.txt"), "");
  write_bytes(dir.file("high.txt"), "ab\xc3");
  EXPECT_EQ(error_of([&] { load_text_bytes(dir.file("empty.txt"), 256); }),
            dir.file("empty.txt") + ": empty text file");
  EXPECT_EQ(error_of([&] { load_text_bytes(dir.file("high.txt"), 128); }),
            dir.file("high.txt") + ": byte 195 at index 2 is >= the vocabulary size 128");
}

TEST(Data, FormatAndDefaultVocabularyFollowTheName) {
  EXPECT_TRUE(is_shard_pattern("fineweb_train_*.bin"));
  EXPECT_FALSE(is_shard_pattern("data/kjv.txt"));
  EXPECT_EQ(default_vocab_size("data/tiny_shakespeare_val.bin"), 50257);
  EXPECT_EQ(default_vocab_size("data/kjv.txt"), 256);
}

TEST(Data, TextSplitsFirst95PercentForTrainingLast5ForValidation) {
  TokenDataset all;
  all.tokens = counting_tokens(1000);
  all.vocab_size = 1000;
  all.source = "c.txt";

  const TrainValSplit split = split_train_val(all);

  EXPECT_EQ(split.train.tokens, counting_tokens(950, 0));
  EXPECT_EQ(split.val.tokens, counting_tokens(50, 950));
  EXPECT_EQ(split.val.vocab_size, 1000);
  EXPECT_EQ(split.train.source, "c.txt (first 95%)");
  EXPECT_EQ(split.val.source, "c.txt (last 5%)");
}

TEST(Data, SequentialMicrobatchKReadsTokensFromKTimesBTWrappingAtTheEnd) {
  TokenDataset data;
  data.tokens = counting_tokens(1000);  // token i is i, so each read says where it came from
  const size_t B = 3, T = 7;            // B*T = 21 does not divide 1000: windows straddle the end
  BatchReader reader = make_batch_reader(data, B, T, false, 1337);
  std::vector<int> inputs(B * T), targets(B * T);

  for (uint64_t k = 0; k < 150; k++) {  // about three passes over the data
    read_microbatch(reader, inputs.data(), targets.data());
    for (size_t j = 0; j < B * T; j++) {
      ASSERT_EQ(inputs[j], static_cast<int>((k * B * T + j) % 1000)) << "k " << k << " j " << j;
      ASSERT_EQ(targets[j], static_cast<int>((k * B * T + j + 1) % 1000)) << "k " << k << " j " << j;
    }
  }
  EXPECT_EQ(reader.next_microbatch, 150u);
}

TEST(Data, TargetsAreInputsShiftedByOne) {
  TokenDataset data;
  data.tokens = {5, 9, 2, 7, 7, 1, 0, 3, 8, 6, 4};
  BatchReader reader = make_batch_reader(data, 2, 2, false, 0);
  std::vector<int> inputs(4), targets(4);

  read_microbatch(reader, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<int>{5, 9, 2, 7}));
  EXPECT_EQ(targets, (std::vector<int>{9, 2, 7, 7}));
  read_microbatch(reader, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<int>{7, 1, 0, 3}));
  EXPECT_EQ(targets, (std::vector<int>{1, 0, 3, 8}));
  read_microbatch(reader, inputs.data(), targets.data());
  EXPECT_EQ(inputs, (std::vector<int>{8, 6, 4, 5}));
  EXPECT_EQ(targets, (std::vector<int>{6, 4, 5, 9}));
}

TEST(Data, ShuffleVisitsEveryChunkOncePerEpoch) {
  TokenDataset data;
  data.tokens = counting_tokens(1000);
  BatchReader reader = make_batch_reader(data, 3, 7, true, 1337);  // floor(1000 / 21) = 47 chunks
  std::set<int> expected;
  for (int c = 0; c < 47; c++) expected.insert(c * 21);

  for (uint64_t epoch = 0; epoch < 3; epoch++) {
    const std::vector<int> starts = window_starts(reader, epoch * 47, epoch * 47 + 47);
    EXPECT_EQ(std::set<int>(starts.begin(), starts.end()), expected) << "epoch " << epoch;
  }
  EXPECT_NE(window_starts(reader, 0, 47), window_starts(reader, 47, 94)) << "each epoch has its own order";
}

TEST(Data, ShuffledWindowIsContiguousAndTargetsShifted) {
  TokenDataset data;
  data.tokens = counting_tokens(84);  // exactly 4 chunks of 21: the last chunk's last target wraps to 0
  BatchReader reader = make_batch_reader(data, 3, 7, true, 5);
  std::vector<int> inputs(21), targets(21);

  for (int k = 0; k < 8; k++) {
    read_microbatch(reader, inputs.data(), targets.data());
    for (int j = 0; j < 21; j++) {
      ASSERT_EQ(inputs[j], inputs[0] + j);
      ASSERT_EQ(targets[j], (inputs[0] + j + 1) % 84);
    }
  }
}

TEST(Data, ShuffleOrderIsFixedBySeed) {
  TokenDataset data;
  data.tokens = counting_tokens(1000);
  BatchReader first = make_batch_reader(data, 3, 7, true, 1337);
  BatchReader again = make_batch_reader(data, 3, 7, true, 1337);
  BatchReader other = make_batch_reader(data, 3, 7, true, 1338);
  BatchReader sequential = make_batch_reader(data, 3, 7, false, 1337);

  const std::vector<int> order = window_starts(first, 0, 100);
  EXPECT_EQ(window_starts(again, 0, 100), order);
  EXPECT_NE(window_starts(other, 0, 100), order);
  EXPECT_NE(window_starts(sequential, 0, 100), order);
}

TEST(Data, SettingThePositionResumesIdentically) {
  TokenDataset data;
  data.tokens = counting_tokens(1000);
  for (bool shuffle : {false, true}) {
    BatchReader uninterrupted = make_batch_reader(data, 3, 7, shuffle, 42);
    std::vector<int> inputs(21), targets(21), resumed_inputs(21), resumed_targets(21);
    for (int k = 0; k < 40; k++) read_microbatch(uninterrupted, inputs.data(), targets.data());
    const uint64_t saved = uninterrupted.next_microbatch;
    BatchReader resumed = make_batch_reader(data, 3, 7, shuffle, 42);
    resumed.next_microbatch = saved;

    for (int k = 40; k < 100; k++) {  // crosses the end of the first epoch (47 chunks) when shuffled
      read_microbatch(uninterrupted, inputs.data(), targets.data());
      read_microbatch(resumed, resumed_inputs.data(), resumed_targets.data());
      ASSERT_EQ(resumed_inputs, inputs) << "shuffle " << shuffle << " k " << k;
      ASSERT_EQ(resumed_targets, targets) << "shuffle " << shuffle << " k " << k;
    }
  }
}

TEST(Data, DataSmallerThanOneMicrobatchIsAnError) {
  TokenDataset data;
  data.tokens = counting_tokens(21);
  data.source = "tiny.txt (last 5%)";
  EXPECT_EQ(error_of([&] { make_batch_reader(data, 3, 7, false, 0); }),
            "tiny.txt (last 5%): 21 tokens, fewer than one microbatch reads (B*T+1 = 22)");
}

// ---- Tokenizer ----

namespace {

// An llm.c tokenizer file: header {magic, version, vocab size, eot}, then each piece as length + bytes.
std::string tokenizer_bytes(const std::vector<std::string>& pieces, uint32_t version = 2, uint32_t eot = 0,
                            uint32_t magic = 20240328) {
  uint32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<uint32_t>(pieces.size());
  header[3] = eot;
  std::string bytes(reinterpret_cast<const char*>(header), sizeof(header));
  for (const std::string& piece : pieces) bytes += static_cast<char>(piece.size()) + piece;
  return bytes;
}

}  // namespace

TEST(Tokenizer, BytesDecodeToTheText) {
  const std::vector<int> tokens = {'A', 'm', 'e', 'n', '.', '\n', 0xE2, 0x80, 0x94};
  EXPECT_EQ(decode(byte_tokenizer(), tokens.data(), tokens.size()), "Amen.\n\xE2\x80\x94");
}

TEST(Tokenizer, IdsDecodeToDecimalsSeparatedBySpaces) {
  const std::vector<int> tokens = {464, 0, 50256};
  EXPECT_EQ(decode(id_tokenizer(50257), tokens.data(), tokens.size()), "464 0 50256");
}

TEST(Tokenizer, FileDecodesPiecesAndKnowsItsEndOfText) {
  TempDir dir;
  write_bytes(dir.file("tok.bin"), tokenizer_bytes({"<|end|>", "In", " the", " beginning", "\n"}, 2, 0));

  const Tokenizer tokenizer = load_tokenizer(dir.file("tok.bin"));

  const std::vector<int> tokens = {1, 2, 3, 4, 0};
  EXPECT_EQ(decode(tokenizer, tokens.data(), tokens.size()), "In the beginning\n<|end|>");
  EXPECT_EQ(tokenizer.vocab_size, 5);
  EXPECT_EQ(tokenizer.eot_token, 0);
}

TEST(Tokenizer, Version1IsGpt2WithEndOfTextLast) {
  TempDir dir;
  std::vector<std::string> pieces(50257, "x");
  pieces[50256] = "<|endoftext|>";
  write_bytes(dir.file("gpt2.bin"), tokenizer_bytes(pieces, 1, 0));

  const Tokenizer tokenizer = load_tokenizer(dir.file("gpt2.bin"));

  EXPECT_EQ(tokenizer.eot_token, 50256);
  const int eot = 50256;
  EXPECT_EQ(decode(tokenizer, &eot, 1), "<|endoftext|>");
}

TEST(Tokenizer, MalformedFilesNameTheProblem) {
  TempDir dir;
  // Long enough that the cut files still hold the 2 bytes per token the header's count promises.
  const std::vector<std::string> pieces = {"a", "bcdef", "d"};
  const std::string good = tokenizer_bytes(pieces, 2, 2);
  struct Case {
    std::string name, bytes, message;
  };
  const std::vector<Case> cases = {
      {"short.bin", good.substr(0, 1000), ": too short for the 1024-byte header of an llm.c tokenizer file"},
      {"magic.bin", tokenizer_bytes(pieces, 2, 2, 20240520),
       ": header magic 20240520 is not 20240328 (llm.c tokenizer)"},
      {"version.bin", tokenizer_bytes(pieces, 3, 2), ": header version 3 is not 1 or 2"},
      {"v1.bin", tokenizer_bytes(pieces, 1, 2),
       ": header vocabulary size 3 is not GPT-2's 50257, which version 1 requires"},
      {"empty.bin", tokenizer_bytes({}, 2, 0), ": header vocabulary size 0 is not in [1, 16777216]"},
      {"eot.bin", tokenizer_bytes(pieces, 2, 3), ": header eot token 3 is not below the vocabulary size 3"},
      {"zero.bin", tokenizer_bytes({"a", "", "def"}, 2, 0), ": token 1 has length 0"},
      {"promise.bin", good.substr(0, 1029),
       ": header vocabulary size 3 needs at least 1030 bytes (1024 + 2 per token), the file has 1029"},
      {"cut_length.bin", good.substr(0, good.size() - 2), ": ends before token 2 of 3"},
      {"cut_piece.bin", good.substr(0, good.size() - 3), ": ends inside token 1 of 3"},
      {"trailing.bin", good + "z", ": bytes after the last of 3 tokens"},
  };
  for (const Case& c : cases) {
    write_bytes(dir.file(c.name), c.bytes);
    EXPECT_EQ(error_of([&] { load_tokenizer(dir.file(c.name)); }), dir.file(c.name) + c.message);
  }
}

TEST(Tokenizer, TokenOutsideTheVocabularyIsAnError) {
  const int token = 256;
  EXPECT_EQ(error_of([&] { decode(byte_tokenizer(), &token, 1); }),
            "token 256 is outside the byte tokenizer's 256 tokens");
  const int negative = -1;
  EXPECT_EQ(error_of([&] { decode(id_tokenizer(50257), &negative, 1); }),
            "token -1 is outside the token-id tokenizer's 50257 tokens");
}

TEST(Tokenizer, SampleTokenizerFollowsTheData) {
  TempDir dir;
  write_bytes(dir.file("tok.bin"), tokenizer_bytes({"a", "b", "c"}, 2, 2));

  EXPECT_EQ(sample_tokenizer(TokenFormat::text_bytes, 256, "").kind, TokenizerKind::bytes);
  EXPECT_EQ(sample_tokenizer(TokenFormat::llmc_shards, 50257, "").kind, TokenizerKind::ids);
  EXPECT_EQ(sample_tokenizer(TokenFormat::llmc_shards, 3, dir.file("tok.bin")).kind, TokenizerKind::pieces);
  EXPECT_EQ(error_of([&] { sample_tokenizer(TokenFormat::llmc_shards, 4, dir.file("tok.bin")); }),
            dir.file("tok.bin") + ": 3 tokens, but the model's vocabulary has 4");
  EXPECT_EQ(
      error_of([&] { sample_tokenizer(TokenFormat::text_bytes, 300, ""); }),
      "byte text decodes 256 tokens, but the model's vocabulary has 300 (use a vocabulary of 256 or a tokenizer file)");
}

// A byte model's sample is printed through printable: the terminal gets valid UTF-8.
TEST(Tokenizer, PrintableKeepsWellFormedUtf8WithItsLinesAndTabs) {
  // e-acute (2 bytes), n-ary sum (3), U+FFFD (3), a smiling face (4), U+10FFFF (4): the edges of each length.
  const std::string text = "In the beginning\tGod\n\xc3\xa9 \xe2\x88\x91 \xef\xbf\xbd \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf \\x41";
  EXPECT_EQ(printable(text), text);
}

TEST(Tokenizer, PrintableEscapesEveryByteOfWhatIsNotUtf8) {
  EXPECT_EQ(printable("a\xff\xfe b"), "a\\xff\\xfe b");          // never in UTF-8
  EXPECT_EQ(printable("\x80\xbf"), "\\x80\\xbf");                 // continuations without a lead
  EXPECT_EQ(printable("cut \xe2\x88"), "cut \\xe2\\x88");         // a sequence the sample's end cut short
  EXPECT_EQ(printable("\xe2x\xe2\x88\xe2\x88\x91"), "\\xe2x\\xe2\\x88\xe2\x88\x91");  // broken, then whole
  EXPECT_EQ(printable("\xc0\xaf \xe0\x80\xaf"), "\\xc0\\xaf \\xe0\\x80\\xaf");  // overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");         // a UTF-16 surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
}

TEST(Tokenizer, PrintableEscapesControlCharactersATerminalWouldObey) {
  EXPECT_EQ(printable(std::string("c\x1b[2J\x7f\x00\r", 8)), "c\\x1b[2J\\x7f\\x00\\x0d");
  EXPECT_EQ(printable("\xc2\x9b" "2J \xc2\xa0"), "\\xc2\\x9b2J \xc2\xa0");  // C1's CSI escaped, no-break space kept
}
