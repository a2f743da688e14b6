// Checks of llm.c's model file and our training-state file (model/checkpoint_format.h). Files
// are written under a fresh temporary directory; the malformed ones are made here byte
// by byte.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/checkpoint_format.h"
#include "model/config.h"
#include "model/parameters.h"
#include "tests/file_tools.h"

namespace {

template <typename T>
void append(std::vector<char>& bytes, const T* values, size_t count) {
  const char* begin = reinterpret_cast<const char*>(values);
  bytes.insert(bytes.end(), begin, begin + count * sizeof(T));
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// L=2, NH=2, C=8, maxT=5, V=11 (Vp=128): 2824 parameters, counted by hand:
// wte 128*8 + wpe 5*8 + 2 * (ln1 2*8 + qkv 24*8+24 + attproj 8*8+8 + ln2 2*8 + fc 32*8+32 + fcproj 8*32+8) + lnf 2*8.
const GPTConfig kTiny = {5, 11, 128, 2, 2, 8};
constexpr size_t kTinyParameters = 2824;
constexpr size_t kModelHeaderBytes = 1024;

// Values that exercise the bits: normals of several magnitudes, signed zeros, a subnormal,
// the largest float and values halfway between two bf16 numbers.
std::vector<float> varied_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = normal(rng) * std::ldexp(1.0f, int(i % 20) - 10);
  const float specials[] = {
      0.0f, -0.0f, 1e-40f, 3.4028235e38f, 1.0f + 0x1.0p-8f, 1.0f + 3 * 0x1.0p-8f, -(1.0f + 0x1.0p-8f)};
  for (size_t i = 0; i < std::size(specials) && i < n; ++i) values[i] = specials[i];
  return values;
}

// A model file as llm.c writes it, built here from its description.
std::vector<char> llmc_model_file(const std::vector<int32_t>& leading_header_ints, const std::vector<float>& params) {
  std::vector<int32_t> header(256, 0);
  std::copy(leading_header_ints.begin(), leading_header_ints.end(), header.begin());
  std::vector<char> bytes;
  append(bytes, header.data(), header.size());
  append(bytes, params.data(), params.size());
  return bytes;
}
// magic, version 3, maxT, V, L, NH, C, Vp of kTiny
const std::vector<int32_t> kTinyHeader = {20240326, 3, 5, 11, 2, 2, 8, 128};

}  // namespace

// ---- llm.c's model file ----

TEST(Checkpoint, ModelFileIsLaidOutAsLlmCs) {
  TempDir dir;
  const std::vector<float> params = varied_values(kTinyParameters, 1);
  write_model_file(dir.file("model.bin"), kTiny, params, CheckpointDtype::fp32);
  EXPECT_EQ(read_bytes(dir.file("model.bin")), llmc_model_file(kTinyHeader, params));
}

// kTiny has as many layers as heads (as GPT-2 124M has), so it cannot tell those two fields
// apart; here all six differ, and each must sit at its own index of llm.c's header.
TEST(Checkpoint, ModelFileHeaderHoldsEachFieldAtLlmCsIndex) {
  TempDir dir;
  const GPTConfig config = {7, 11, 128, 3, 2, 8};  // maxT, V, Vp, L, NH, C
  const std::vector<float> params = varied_values(num_parameters(config), 2);
  write_model_file(dir.file("model.bin"), config, params, CheckpointDtype::fp32);
  EXPECT_EQ(read_bytes(dir.file("model.bin")), llmc_model_file({20240326, 3, 7, 11, 3, 2, 8, 128}, params));
}

TEST(Checkpoint, ReadsAFileWrittenAsLlmCWritesIt) {
  TempDir dir;
  const std::vector<float> params = varied_values(kTinyParameters, 2);
  write_bytes(dir.file("llmc.bin"), llmc_model_file(kTinyHeader, params));
  const ModelFile model = read_model_file(dir.file("llmc.bin"));
  EXPECT_EQ(model.dtype, CheckpointDtype::fp32);
  EXPECT_EQ(model.config.max_seq_len, 5);
  EXPECT_EQ(model.config.vocab_size, 11);
  EXPECT_EQ(model.config.num_layers, 2);
  EXPECT_EQ(model.config.num_heads, 2);
  EXPECT_EQ(model.config.channels, 8);
  EXPECT_EQ(model.config.padded_vocab_size, 128);
  EXPECT_TRUE(bitwise_equal(model.parameters, params));
}

TEST(Checkpoint, Fp32RoundTripIsBitwise) {
  TempDir dir;
  const std::vector<float> params = varied_values(kTinyParameters, 3);
  write_model_file(dir.file("model.bin"), kTiny, params, CheckpointDtype::fp32);
  const ModelFile model = read_model_file(dir.file("model.bin"));
  EXPECT_EQ(model.dtype, CheckpointDtype::fp32);
  EXPECT_TRUE(bitwise_equal(model.parameters, params));
}

TEST(Checkpoint, Bf16RoundTripEqualsBf16RoundingOfTheInput) {
  TempDir dir;
  const std::vector<float> params = varied_values(kTinyParameters, 4);
  write_model_file(dir.file("model.bin"), kTiny, params, CheckpointDtype::bf16);
  const std::vector<char> bytes = read_bytes(dir.file("model.bin"));
  ASSERT_EQ(bytes.size(), kModelHeaderBytes + 2 * kTinyParameters);
  int32_t version;
  std::memcpy(&version, bytes.data() + 4, sizeof(version));
  EXPECT_EQ(version, 5);
  // NVIDIA's round-to-nearest-even conversion is the reference.
  std::vector<float> expected(params.size());
  for (size_t i = 0; i < params.size(); ++i) expected[i] = __bfloat162float(__float2bfloat16_rn(params[i]));
  const ModelFile model = read_model_file(dir.file("model.bin"));
  EXPECT_EQ(model.dtype, CheckpointDtype::bf16);
  EXPECT_TRUE(bitwise_equal(model.parameters, expected));
}

// ---- malformed model files: every one names the file and the field ----

namespace {

// A model file under a fresh directory, written from bytes made by the test.
struct ModelFileCase {
  // The message reading a file of these bytes gives.
  std::string read_error(const std::vector<char>& bytes) {
    write_bytes(path, bytes);
    return error_of([&] { read_model_file(path); });
  }
  std::vector<char> with_header_int(int index, int32_t value) {
    std::vector<int32_t> header = kTinyHeader;
    header[index] = value;
    return llmc_model_file(header, params);
  }
  TempDir dir;
  const std::string path = dir.file("model.bin");
  const std::vector<float> params = varied_values(kTinyParameters, 5);
};

}  // namespace

TEST(Checkpoint, ModelFileMissing) {
  ModelFileCase c;
  EXPECT_EQ(error_of([&] { read_model_file(c.dir.file("absent.bin")); }),
            c.dir.file("absent.bin") + ": open failed: No such file or directory");
}

TEST(Checkpoint, ModelFileShorterThanTheHeader) {
  ModelFileCase c;
  EXPECT_EQ(c.read_error(std::vector<char>(100)), c.path + ": file is 100 bytes, shorter than the 1024-byte header");
}

TEST(Checkpoint, ModelFileWrongMagic) {
  ModelFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_int(0, 20240520)),
            c.path + ": header magic 20240520 is not 20240326 (llm.c model file)");
}

TEST(Checkpoint, ModelFileUnknownVersion) {
  ModelFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_int(1, 4)), c.path + ": header version 4 is not 3 (fp32) or 5 (bf16)");
}

TEST(Checkpoint, ModelFileFieldThatIsNotPositive) {
  ModelFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_int(4, 0)), c.path + ": header num_layers 0 is not positive");
  EXPECT_EQ(c.read_error(c.with_header_int(2, -5)), c.path + ": header max_seq_len -5 is not positive");
}

TEST(Checkpoint, ModelFileChannelsNotDivisibleByHeads) {
  ModelFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_int(5, 3)), c.path + ": header channels 8 is not divisible by num_heads 3");
}

TEST(Checkpoint, ModelFilePaddedVocabularyBelowVocabulary) {
  ModelFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_int(7, 8)),
            c.path + ": header padded_vocab_size 8 is smaller than vocab_size 11");
}

TEST(Checkpoint, ModelFileTruncated) {
  ModelFileCase c;
  std::vector<char> bytes = llmc_model_file(kTinyHeader, c.params);
  bytes.pop_back();
  EXPECT_EQ(c.read_error(bytes),
            c.path + ": file is 12319 bytes but its header describes 1024 + 4 x 2824 parameter bytes (truncated)");
}

TEST(Checkpoint, ModelFileTrailingByte) {
  ModelFileCase c;
  std::vector<char> bytes = llmc_model_file(kTinyHeader, c.params);
  bytes.push_back(0);
  EXPECT_EQ(
      c.read_error(bytes),
      c.path + ": file is 12321 bytes but its header describes 1024 + 4 x 2824 parameter bytes (1 trailing byte)");
}

TEST(Checkpoint, ModelFileBf16FileOfFp32Size) {
  ModelFileCase c;
  EXPECT_EQ(
      c.read_error(c.with_header_int(1, 5)),
      c.path + ": file is 12320 bytes but its header describes 1024 + 2 x 2824 parameter bytes (5648 trailing bytes)");
}

TEST(Checkpoint, ModelFileHugeFieldsDoNotWrapAround) {
  ModelFileCase c;
  // L = C = 2^30: 12 L C^2 is about 2^93 parameters, which size_t would wrap around.
  EXPECT_EQ(c.read_error(llmc_model_file({20240326, 3, 5, 11, 1 << 30, 1, 1 << 30, 128}, c.params)),
            c.path + ": header parameter count 1.49e+28 is 2^59 or more (16 bytes each with gradients and moments)");
}

TEST(Checkpoint, ModelFileHeaderDisagreesWithTheFlags) {
  ModelFileCase c;
  write_bytes(c.path, llmc_model_file(kTinyHeader, c.params));
  const GPTConfig header = read_model_file(c.path).config;
  EXPECT_EQ(error_of([&] { check_model_config_against_flags(c.path, header, make_gpt_config(2, 2, 16, 5, 11)); }),
            c.path + ": header channels 8 disagrees with --dim 16");
  EXPECT_EQ(error_of([&] { check_model_config_against_flags(c.path, header, make_gpt_config(3, 2, 8, 5, 11)); }),
            c.path + ": header num_layers 2 disagrees with --layers 3");
  EXPECT_EQ(error_of([&] { check_model_config_against_flags(c.path, header, make_gpt_config(2, 1, 8, 5, 11)); }),
            c.path + ": header num_heads 2 disagrees with --heads 1");
  EXPECT_EQ(error_of([&] { check_model_config_against_flags(c.path, header, make_gpt_config(2, 2, 8, 5, 12)); }),
            c.path + ": header vocab_size 11 disagrees with --vocab 12");
  EXPECT_EQ(error_of([&] { check_model_config_against_flags(c.path, header, make_gpt_config(2, 2, 8, 6, 11)); }),
            c.path + ": header max_seq_len 5 is smaller than --seq-len 6");
  // A shorter training sequence than the model's maxT is allowed.
  EXPECT_EQ(error_of([&] { check_model_config_against_flags(c.path, header, make_gpt_config(2, 2, 8, 4, 11)); }),
            "(no error)");
}

// ---- training state ----

namespace {

TrainingState sample_state(uint64_t seed) {
  TrainingState state;
  state.config = kTiny;
  state.step = 123456789012;
  state.data_position = (uint64_t(1) << 63) + 5;  // above int64's range: stored as bits
  std::mt19937_64 rng(seed);
  state.rng.resize(313);
  for (uint64_t& word : state.rng) word = rng();
  state.m = varied_values(kTinyParameters, seed + 1);
  state.v = varied_values(kTinyParameters, seed + 2);
  return state;
}

}  // namespace

TEST(Checkpoint, StateFileSitsNextToTheModelFile) {
  EXPECT_EQ(training_state_path("run/model.bin"), "run/model.bin.state");
}

TEST(Checkpoint, StateRoundTripIsBitwise) {
  TempDir dir;
  const TrainingState state = sample_state(10);
  write_training_state(dir.file("model.bin.state"), state);
  const TrainingState read = read_training_state(dir.file("model.bin.state"));
  EXPECT_EQ(std::memcmp(&read.config, &state.config, sizeof(GPTConfig)), 0);
  EXPECT_EQ(read.step, state.step);
  EXPECT_EQ(read.data_position, state.data_position);
  EXPECT_EQ(read.rng, state.rng);
  EXPECT_TRUE(bitwise_equal(read.m, state.m));
  EXPECT_TRUE(bitwise_equal(read.v, state.v));
}

TEST(Checkpoint, StateWithMasterWeightsAndRoundingSeedRoundTripsBitwise) {
  TempDir dir;
  TrainingState state = sample_state(13);
  state.master = varied_values(kTinyParameters, 14);
  state.rounding_seed = ~uint64_t(0) - 6;  // above int64's range: stored as bits
  write_training_state(dir.file("s"), state);
  // header 512 + rng 8 * 313 + m, v and master 3 * 4 * 2824
  EXPECT_EQ(read_bytes(dir.file("s")).size(), 512u + 2504 + 3 * 4 * kTinyParameters);
  const TrainingState read = read_training_state(dir.file("s"));
  EXPECT_EQ(read.rounding_seed, state.rounding_seed);
  EXPECT_TRUE(bitwise_equal(read.master, state.master));
  EXPECT_TRUE(bitwise_equal(read.m, state.m));
  EXPECT_TRUE(bitwise_equal(read.v, state.v));
}

TEST(Checkpoint, StateWithoutRngWordsRoundTrips) {
  TempDir dir;
  TrainingState state = sample_state(11);
  state.rng.clear();
  write_training_state(dir.file("s"), state);
  EXPECT_TRUE(read_training_state(dir.file("s")).rng.empty());
}

TEST(Checkpoint, StateWriteRejectsMasterWeightsOfTheWrongSize) {
  TempDir dir;
  TrainingState state = sample_state(15);
  state.master.assign(kTinyParameters + 1, 0.0f);
  EXPECT_EQ(error_of([&] { write_training_state(dir.file("s"), state); }),
            dir.file("s") + ": 2825 master weights to write, the config has 2824 parameters");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Checkpoint, StateWriteRejectsMomentsOfTheWrongSize) {
  TempDir dir;
  TrainingState state = sample_state(12);
  state.v.pop_back();
  EXPECT_EQ(error_of([&] { write_training_state(dir.file("s"), state); }),
            dir.file("s") + ": moments of 2824 and 2823 values to write, the config has 2824 parameters");
  EXPECT_TRUE(dir.entries().empty());
}

namespace {

// A good state file under a fresh directory, and variants of its bytes.
struct StateFileCase {
  StateFileCase() {
    write_training_state(path, sample_state(20));
    good = read_bytes(path);
  }
  std::string read_error(const std::vector<char>& bytes) {
    write_bytes(path, bytes);
    return error_of([&] { read_training_state(path); });
  }
  std::vector<char> with_header_word(int index, int64_t value) {
    std::vector<char> bytes = good;
    std::memcpy(bytes.data() + 8 * index, &value, sizeof(value));
    return bytes;
  }
  TempDir dir;
  const std::string path = dir.file("model.bin.state");
  std::vector<char> good;
  // header 512 + rng 8 * 313 + m and v 2 * 4 * 2824
  static constexpr size_t kGoodBytes = 512 + 2504 + 22592;
};

}  // namespace

TEST(Checkpoint, StateFileShorterThanTheHeader) {
  StateFileCase c;
  EXPECT_EQ(c.read_error(std::vector<char>(c.good.begin(), c.good.begin() + 511)),
            c.path + ": file is 511 bytes, shorter than the 512-byte header");
}

TEST(Checkpoint, StateFileWrongMagic) {
  StateFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_word(0, 20240326)),
            c.path + ": header magic 20240326 is not 20261122 (training state)");
}

TEST(Checkpoint, StateFileUnknownVersion) {
  StateFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_word(1, 3)), c.path + ": header version 3 is not 1 or 2");
}

// Version 1, written before bf16 training, had zeros where version 2 keeps the master weights
// word and the rounding seed: it reads as a state without master weights.
TEST(Checkpoint, StateFileOfVersion1Reads) {
  StateFileCase c;
  write_bytes(c.path, c.with_header_word(1, 1));
  const TrainingState read = read_training_state(c.path);
  const TrainingState written = sample_state(20);
  EXPECT_TRUE(read.master.empty());
  EXPECT_EQ(read.rounding_seed, 0u);
  EXPECT_EQ(read.rng, written.rng);
  EXPECT_TRUE(bitwise_equal(read.v, written.v));
}

TEST(Checkpoint, StateFileMasterWeightsWordOtherThan0Or1) {
  StateFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_word(12, 2)), c.path + ": header master weights 2 is not 0 or 1");
}

// The word says master weights follow, and the file has none.
TEST(Checkpoint, StateFileMissingItsMasterWeights) {
  StateFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_word(12, 1)),
            c.path +
                ": file is 25608 bytes but its header describes 512 + 8 x 313 rng bytes + 2 x 4 x 2824 moment "
                "bytes + 4 x 2824 master weight bytes (truncated)");
}

TEST(Checkpoint, StateFileBadConfigField) {
  StateFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_word(5, 3)), c.path + ": header channels 8 is not divisible by num_heads 3");
  EXPECT_EQ(c.read_error(c.with_header_word(6, int64_t(1) << 40)),
            c.path + ": header channels 1099511627776 does not fit an int");
}

TEST(Checkpoint, StateFileNegativeStep) {
  StateFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_word(8, -1)), c.path + ": header step -1 is negative");
}

TEST(Checkpoint, StateFileParameterCountOfAnotherConfig) {
  StateFileCase c;
  EXPECT_EQ(c.read_error(c.with_header_word(11, 2825)),
            c.path + ": header parameters 2825 disagrees with the config's 2824");
}

TEST(Checkpoint, StateFileTruncated) {
  StateFileCase c;
  ASSERT_EQ(c.good.size(), c.kGoodBytes);
  EXPECT_EQ(c.read_error(std::vector<char>(c.good.begin(), c.good.end() - 4)),
            c.path +
                ": file is 25604 bytes but its header describes 512 + 8 x 313 rng bytes + 2 x 4 x 2824 moment "
                "bytes (truncated)");
}

TEST(Checkpoint, StateFileTrailingByte) {
  StateFileCase c;
  std::vector<char> bytes = c.good;
  bytes.push_back(1);
  EXPECT_EQ(c.read_error(bytes), c.path +
                                     ": file is 25609 bytes but its header describes 512 + 8 x 313 rng bytes + "
                                     "2 x 4 x 2824 moment bytes (1 trailing byte)");
}

TEST(Checkpoint, StateFileConfigDisagreesWithTheModelFile) {
  StateFileCase c;
  const GPTConfig state = read_training_state(c.path).config;
  EXPECT_EQ(error_of([&] { check_state_config_against_model(c.path, state, make_gpt_config(2, 2, 16, 5, 11)); }),
            c.path + ": header channels 8 disagrees with the model file's 16");
  EXPECT_EQ(error_of([&] {
              check_state_config_against_model(c.path, state, {5, 11, 256, 2, 2, 8});
            }),
            c.path + ": header padded_vocab_size 128 disagrees with the model file's 256");
  EXPECT_EQ(error_of([&] { check_state_config_against_model(c.path, state, kTiny); }), "(no error)");
}

TEST(Checkpoint, ModelWriteRejectsAParameterCountOfAnotherConfig) {
  TempDir dir;
  const std::vector<float> params(kTinyParameters - 1);
  EXPECT_EQ(error_of([&] { write_model_file(dir.file("m"), kTiny, params, CheckpointDtype::fp32); }),
            dir.file("m") + ": 2823 parameters to write, the config has 2824");
  EXPECT_TRUE(dir.entries().empty());
}
