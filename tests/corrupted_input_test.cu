// Every parser against corrupted input (issue 14, item 6): thousands of seeded mutations of a
// valid model file (v3 and v5), state file, token shard, text, tokenizer file and command line
// (every numeric option, --layers-per-stage) each give a valid result or one clear line,
// std::runtime_error, never another exception. Under `make sanitize` the same runs would also
// report an out-of-bounds read or undefined behaviour; tests/fuzz/ holds the libFuzzer targets
// for the same parsers (tests/fuzz/parser_inputs.h feeds both).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "file_tools.h"
#include "fuzz/parser_inputs.h"
#include "trainer/checkpoints/save_and_resume.h"

using namespace parser_inputs;

namespace {

constexpr int kMutationsPerParser = 4000;

// Values that break naive header checks: signs, int32/int64 limits, powers of two whose
// products wrap, and neighbours of the field's own value.
std::vector<int64_t> interesting_values(int64_t field) {
  const uint64_t original = uint64_t(field);  // unsigned, so that the neighbours wrap as the field would
  auto wrapped = [](uint64_t value) { return int64_t(value); };
  return {0,          1,          -1,        2,         3,         127,       128,       255,
          256,        32767,      65535,     65536,     65537,     1 << 20,   1 << 24,   (1 << 24) + 1,
          INT32_MAX,  INT32_MIN,  1u << 31,  UINT32_MAX, 1ll << 32, 3037000500ll, 1ll << 40, 1ll << 62,
          INT64_MAX,  INT64_MIN,  wrapped(original - 1), wrapped(original + 1), wrapped(original * 2),
          wrapped(original * 65536), wrapped(0 - original)};
}

// One seeded mutation of a valid input whose header is `header_bytes` long, of fields
// `field_bytes` wide: a truncation, flipped bits, a header field set to an interesting value,
// random bytes appended, or two of them.
Bytes mutate(const Bytes& valid, std::mt19937_64& rng, size_t header_bytes, size_t field_bytes, int depth = 0) {
  Bytes bytes = valid;
  auto below = [&rng](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
  // Most of what can go wrong is in the header: three positions of four land there.
  auto position = [&] { return rng() % 4 != 0 ? below(std::min(header_bytes, bytes.size())) : below(bytes.size()); };
  switch (rng() % 5) {
    case 0:
      bytes.resize(rng() % 2 ? below(std::min(header_bytes + 16, bytes.size())) : below(bytes.size()));
      break;
    case 1:
      for (int flips = 1 + int(rng() % 4); flips > 0 && !bytes.empty(); --flips) bytes[position()] ^= uint8_t(1u << (rng() % 8));
      break;
    case 2: {
      const size_t fields = std::min(header_bytes, bytes.size()) / field_bytes;
      if (fields == 0) break;
      const size_t at = below(std::min<size_t>(fields, 16)) * field_bytes;
      int64_t original = 0;
      std::memcpy(&original, bytes.data() + at, field_bytes);
      if (field_bytes == 4) original = int32_t(original);
      const std::vector<int64_t> values = interesting_values(original);
      const int64_t value = values[below(values.size())];
      std::memcpy(bytes.data() + at, &value, field_bytes);
      break;
    }
    case 3:
      for (size_t n = 1 + below(64); n > 0; --n) bytes.push_back(uint8_t(rng()));
      break;
    default:
      if (depth < 2) return mutate(mutate(valid, rng, header_bytes, field_bytes, depth + 1), rng, header_bytes, field_bytes, depth + 1);
      break;
  }
  return bytes;
}

struct Outcomes {
  int valid = 0;
  int errors = 0;
};

// Feeds kMutationsPerParser mutations; each must give a valid result or one std::runtime_error
// line. Returns how many of each, so that a test can check that both happen.
Outcomes feed_mutations(const std::function<void(const Bytes&)>& feed,
                        const std::function<Bytes(std::mt19937_64&)>& next_input, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Outcomes outcomes;
  for (int i = 0; i < kMutationsPerParser; ++i) {
    const Bytes input = next_input(rng);
    const std::string which = "mutation " + std::to_string(i) + " of seed " + std::to_string(seed) + " (" +
                              std::to_string(input.size()) + " bytes)";
    try {
      feed(input);
      ++outcomes.valid;
    } catch (const std::runtime_error& error) {
      const std::string message = error.what();
      EXPECT_FALSE(message.empty()) << which;
      EXPECT_EQ(message.find('\n'), std::string::npos) << which << ": not one line: " << message;
      ++outcomes.errors;
    } catch (const std::exception& error) {
      ADD_FAILURE() << which << " threw " << typeid(error).name() << ": " << error.what();
    }
    if (::testing::Test::HasFailure()) break;  // the first is the one to read
  }
  return outcomes;
}

Outcomes feed_file_mutations(const std::function<void(const Bytes&)>& feed, const Bytes& valid, size_t header_bytes,
                             size_t field_bytes, uint64_t seed) {
  return feed_mutations(
      feed, [&](std::mt19937_64& rng) { return mutate(valid, rng, header_bytes, field_bytes); }, seed);
}

// The valid input itself gives a valid result, and the mutations give both results and errors:
// they reach past the first check.
void expect_valid_and_both_outcomes(const std::function<void(const Bytes&)>& feed, const Bytes& valid,
                                    const Outcomes& outcomes) {
  EXPECT_NO_THROW(feed(valid));
  EXPECT_GT(outcomes.valid, 0);
  EXPECT_GT(outcomes.errors, 0);
}

Bytes with_selector(uint8_t selector, const Bytes& bytes) {
  Bytes out = bytes;
  out.insert(out.begin(), selector);
  return out;
}

}  // namespace

TEST(CorruptedInput, ModelFileFp32GivesAValidModelOrOneLine) {
  const Bytes valid = valid_model_file(CheckpointDtype::fp32);
  const Outcomes outcomes = feed_file_mutations(feed_model_file, valid, kModelFileHeaderInts * 4, 4, 1);
  expect_valid_and_both_outcomes(feed_model_file, valid, outcomes);
}

TEST(CorruptedInput, ModelFileBf16GivesAValidModelOrOneLine) {
  const Bytes valid = valid_model_file(CheckpointDtype::bf16);
  const Outcomes outcomes = feed_file_mutations(feed_model_file, valid, kModelFileHeaderInts * 4, 4, 2);
  expect_valid_and_both_outcomes(feed_model_file, valid, outcomes);
}

TEST(CorruptedInput, TrainingStateGivesAValidStateOrOneLine) {
  const Bytes valid = valid_training_state();
  const Outcomes outcomes = feed_file_mutations(feed_training_state, valid, kTrainingStateHeaderWords * 8, 8, 3);
  expect_valid_and_both_outcomes(feed_training_state, valid, outcomes);
}

// --resume reads both files and checks them against each other and the options.
TEST(CorruptedInput, ResumeFromACorruptedStateFileStartsOrGivesOneLine) {
  TempDir dir;
  const std::string model_path = dir.file("run.bin");
  write_model_file(model_path, small_config(), counting_values(num_parameters(small_config())), CheckpointDtype::fp32);
  const Bytes valid = valid_training_state();
  TrainOptions options;
  options.resume = model_path;
  options.steps = 10;
  auto resume = [&](const Bytes& state) {
    write_bytes(training_state_path(model_path), std::vector<char>(state.begin(), state.end()));
    const StartingPoint start = load_starting_point(options);
    if (!start.resumed || start.m.size() != num_parameters(start.config) || start.position.step > options.steps)
      throw std::logic_error("load_starting_point gave an inconsistent start");
  };
  std::mt19937_64 rng(4);
  Outcomes outcomes;
  for (int i = 0; i < kMutationsPerParser / 4; ++i) {
    try {
      resume(mutate(valid, rng, kTrainingStateHeaderWords * 8, 8));
      ++outcomes.valid;
    } catch (const std::runtime_error& error) {
      ++outcomes.errors;
      ASSERT_EQ(std::string(error.what()).find('\n'), std::string::npos) << "mutation " << i << ": " << error.what();
    }
  }
  EXPECT_NO_THROW(resume(valid));
  EXPECT_GT(outcomes.valid, 0);
  EXPECT_GT(outcomes.errors, 0);
}

TEST(CorruptedInput, TokenShardGivesTokensBelowTheVocabularyOrOneLine) {
  const Bytes valid = with_selector(1, valid_token_shard());  // read with a vocabulary of 200
  const Outcomes outcomes = feed_file_mutations(feed_token_shard, valid, 1 + kShardHeaderBytes, 4, 5);
  expect_valid_and_both_outcomes(feed_token_shard, valid, outcomes);
}

TEST(CorruptedInput, TextDataGivesTokensBelowTheVocabularyOrOneLine) {
  const Bytes valid = with_selector(0, valid_text());
  const Outcomes outcomes = feed_file_mutations(feed_text_data, valid, 16, 1, 6);
  expect_valid_and_both_outcomes(feed_text_data, valid, outcomes);
}

TEST(CorruptedInput, TokenizerFileGivesAConsistentTokenizerOrOneLine) {
  const Bytes valid = valid_tokenizer();
  const Outcomes outcomes = feed_file_mutations(feed_tokenizer, valid, 1024, 4, 7);
  expect_valid_and_both_outcomes(feed_tokenizer, valid, outcomes);
}

// A header may promise far more tokens than the file holds; the promise is checked against the
// file's size before anything is allocated for it (16M tokens were 512 MB of empty strings).
TEST(CorruptedInput, TokenizerPromisingMoreTokensThanItsFileHoldsIsRejectedBeforeReading) {
  Bytes bytes = valid_tokenizer();
  const uint32_t promised = 1u << 24, eot = 0;
  std::memcpy(bytes.data() + 8, &promised, 4);
  std::memcpy(bytes.data() + 12, &eot, 4);
  const MemoryFile file(bytes);
  EXPECT_EQ(error_of([&] { load_tokenizer(file.path()); }),
            file.path() + ": header vocabulary size 16777216 needs at least 33555456 bytes (1024 + 2 per token), "
                          "the file has " + std::to_string(bytes.size()));
}

// Command lines: the valid one with its arguments mutated as bytes (separators included).
TEST(CorruptedInput, CommandLineGivesValidOptionsOrOneLine) {
  const Bytes valid = valid_command_line();
  const Outcomes outcomes = feed_file_mutations(feed_command_line, valid, valid.size(), 1, 8);
  expect_valid_and_both_outcomes(feed_command_line, valid, outcomes);
}

// Schedule files: the valid ZB-H1 grid mutated as bytes; each gives a lowered schedule or an
// error whose first line names the problem (tests/fuzz/parser_inputs.h's feed).
TEST(CorruptedInput, ScheduleFileGivesAScheduleOrAnError) {
  const Bytes valid = valid_schedule_file();
  const Outcomes outcomes = feed_file_mutations(feed_schedule_file, valid, valid.size(), 1, 9);
  expect_valid_and_both_outcomes(feed_schedule_file, valid, outcomes);
}

// PyTorch's schedule CSV: ZB-V's on 2 ranks mutated as bytes; each gives a schedule that our
// writer gives back as the same computes, or an error whose first line names the problem.
TEST(CorruptedInput, PytorchCsvGivesAScheduleOrAnError) {
  const Bytes valid = valid_pytorch_csv();
  const Outcomes outcomes = feed_file_mutations(feed_pytorch_csv, valid, valid.size(), 1, 10);
  expect_valid_and_both_outcomes(feed_pytorch_csv, valid, outcomes);
}

namespace {

// Values for a numeric option: nasty strings, then interesting numbers as text, then random digits.
std::string numeric_text(std::mt19937_64& rng) {
  static const char* const nasty[] = {"",     "-",     "+1",   " 1",    "1 ",    "0x10", "1e",    "1e400", "-1e400",
                                      "nan",  "inf",   "-inf", "1e-46", "-0",    "0.",   ".5",    "1,2",   "1..2",
                                      "１",   "1e39",  "3.4028236e38", "99999999999999999999999", "-2147483649",
                                      "2147483648", "18446744073709551616", "-9223372036854775809"};
  switch (rng() % 3) {
    case 0:
      return nasty[rng() % (sizeof(nasty) / sizeof(nasty[0]))];
    case 1: {
      const std::vector<int64_t> values = interesting_values(int64_t(rng() % 100));
      return std::to_string(values[rng() % values.size()]);
    }
    default: {
      std::string digits = rng() % 4 == 0 ? "-" : "";
      for (int n = 1 + int(rng() % 12); n > 0; --n) digits += char('0' + rng() % 10);
      if (rng() % 3 == 0) digits += (rng() % 2 ? "." : "e") + std::to_string(rng() % 50);
      return digits;
    }
  }
}

Bytes arguments_as_bytes(const std::vector<std::string>& arguments) {
  Bytes bytes;
  for (const std::string& argument : arguments) {
    if (!bytes.empty()) bytes.push_back(0);
    bytes.insert(bytes.end(), argument.begin(), argument.end());
  }
  return bytes;
}

}  // namespace

// Every numeric option, alone or three at a time, with each kind of value.
TEST(CorruptedInput, EveryNumericOptionGivesItsValueOrOneLine) {
  const std::vector<std::string> numeric = {
      "layers",     "heads",       "dim",          "seq-len",      "vocab",      "batch",      "microbatches",
      "steps",      "lr",          "min-lr",       "warmup",       "weight-decay", "beta1",    "beta2",
      "eps",        "grad-clip",   "val-every",    "val-batches",  "sample-every", "sample-len",
      "sample-temperature",        "save-every",   "seed",         "pp",           "dp",       "virtual-stages",
      "trace-step"};
  const Outcomes outcomes = feed_mutations(
      feed_command_line,
      [&](std::mt19937_64& rng) {
        std::vector<std::string> arguments;
        for (int n = 1 + int(rng() % 3); n > 0; --n) {
          const std::string& name = numeric[rng() % numeric.size()];
          if (rng() % 2) {
            arguments.push_back("--" + name + "=" + numeric_text(rng));
          } else {
            arguments.push_back("--" + name);
            arguments.push_back(numeric_text(rng));
          }
        }
        if (rng() % 2) arguments.push_back("--schedule=interleaved");
        return arguments_as_bytes(arguments);
      },
      9);
  EXPECT_GT(outcomes.valid, 0);
  EXPECT_GT(outcomes.errors, kMutationsPerParser / 10);
}

// --layers-per-stage lists of every length and size against --layers, --pp and --virtual-stages,
// including counts whose sum or product overflows an int.
TEST(CorruptedInput, LayersPerStageGivesASplitOrOneLine) {
  const Outcomes outcomes = feed_mutations(
      feed_command_line,
      [&](std::mt19937_64& rng) {
        std::string list;
        for (int n = 1 + int(rng() % 6); n > 0; --n) {
          list += list.empty() ? "" : ",";
          list += rng() % 3 ? std::to_string(1 + rng() % 4) : numeric_text(rng);
        }
        if (rng() % 8 == 0) list += ",";
        std::vector<std::string> arguments = {"--layers-per-stage", list, "--schedule", "interleaved"};
        const char* counted[] = {"--layers", "--pp", "--virtual-stages"};
        for (const char* option : counted) {
          if (rng() % 3 == 0) continue;
          arguments.push_back(option);
          arguments.push_back(rng() % 3 ? std::to_string(1 + rng() % 8) : numeric_text(rng));
        }
        return arguments_as_bytes(arguments);
      },
      10);
  EXPECT_GT(outcomes.valid, 0);
  EXPECT_GT(outcomes.errors, kMutationsPerParser / 10);
}

// Layer counts whose sum overflows an int, and stages x chunks beyond an int, are each one line.
TEST(CorruptedInput, LayerCountsBeyondAnIntAreRejectedInOneLine) {
  EXPECT_EQ(error_of([] { split_layers(4, 2, 1, {INT_MAX, INT_MAX}); }),
            "--layers-per-stage 2147483647,2147483647 adds up to 4294967294 layers, but the model has --layers 4");
  EXPECT_EQ(error_of([] { split_layers(1000, 65536, 65536); }),
            "--layers 1000 is fewer than --pp 65536 x --virtual-stages 65536 = 4294967296 pipeline chunks (each "
            "needs at least one layer)");
}

// A shape from the flags or a header whose parameter count wraps a size_t (12 C^2 L with
// C = 2^30, L = 16 is 12 x 2^64) would size the allocation by the wrapped count.
TEST(CorruptedInput, ModelShapeWhoseParameterCountWrapsIsRejectedInOneLine) {
  EXPECT_EQ(error_of([] { make_gpt_config(16, 1, 1 << 30, 64, 256); }),
            "model config: parameter count 2.21e+20 is 2^59 or more (16 bytes each with gradients and moments)");
}
