// Every parser of the project fed with arbitrary bytes, and a valid input of each to start
// mutating from: shared by the CorruptedInput tests (tests/corrupted_input_test.cu, seeded
// mutations) and the libFuzzer targets (tests/fuzz/*_fuzz.cpp, `make fuzz`). A feed_ function
// returns when the parser gave a valid result (then checked for consistency and used as the
// trainer would use it) and lets out std::runtime_error, the parsers' one-line error; any other
// exception, a crash, a sanitizer report or a hang is a bug in the parser.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/checkpoint_format.h"
#include "model/config.h"
#include "model/parameters.h"
#include "pipeline/layer_split.h"
#include "pipeline/layout_string.h"
#include "pipeline/pytorch_csv.h"
#include "pipeline/schedule_file.h"
#include "trainer/data/data.h"
#include "trainer/command_line/options.h"
#include "trainer/data/tokenizer.h"

namespace parser_inputs {

using Bytes = std::vector<uint8_t>;

// The bytes as a file the parsers open by path: an anonymous in-memory file (memfd), named
// /proc/self/fd/N, closed when this goes out of scope. No disk, nothing left behind.
class MemoryFile {
 public:
  explicit MemoryFile(const Bytes& bytes) : fd_(memfd_create("parser_input", 0)) {
    if (fd_ < 0) throw std::logic_error("memfd_create failed");
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) throw std::logic_error("write to a memfd failed");
      done += size_t(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

template <typename Word>
void append(Bytes& bytes, const Word* words, size_t count) {
  const uint8_t* first = reinterpret_cast<const uint8_t*>(words);
  bytes.insert(bytes.end(), first, first + count * sizeof(Word));
}

// A small model (1944 parameters), so that a mutation is cheap to write and read.
inline GPTConfig small_config() { return make_gpt_config(1, 2, 8, 4, 10); }

inline std::vector<float> counting_values(size_t n) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = 0.001f * float(i % 1000) - 0.5f;
  return values;
}

// ---- valid inputs ----

// llm.c's model file: version 3 (fp32) or 5 (bf16).
inline Bytes valid_model_file(CheckpointDtype dtype) {
  const GPTConfig c = small_config();
  int32_t header[kModelFileHeaderInts] = {};
  header[0] = kModelFileMagic;
  header[1] = dtype == CheckpointDtype::fp32 ? kModelFileVersionFp32 : kModelFileVersionBf16;
  const int fields[] = {c.max_seq_len, c.vocab_size, c.num_layers, c.num_heads, c.channels, c.padded_vocab_size};
  std::memcpy(header + 2, fields, sizeof(fields));
  Bytes bytes;
  append(bytes, header, kModelFileHeaderInts);
  const std::vector<float> values = counting_values(num_parameters(c));
  if (dtype == CheckpointDtype::fp32) {
    append(bytes, values.data(), values.size());
  } else {
    std::vector<uint16_t> stored(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof(bits));
      stored[i] = uint16_t(bits >> 16);
    }
    append(bytes, stored.data(), stored.size());
  }
  return bytes;
}

// Our training-state file of small_config(), one RNG word.
inline Bytes valid_training_state() {
  const GPTConfig c = small_config();
  const size_t n = num_parameters(c);
  int64_t header[kTrainingStateHeaderWords] = {kTrainingStateMagic, kTrainingStateVersion, c.max_seq_len,
                                               c.vocab_size, c.num_layers, c.num_heads, c.channels,
                                               c.padded_vocab_size, 7, 123, 1, int64_t(n)};
  Bytes bytes;
  append(bytes, header, kTrainingStateHeaderWords);
  const uint64_t rng = 0x1234;
  append(bytes, &rng, 1);
  const std::vector<float> moments = counting_values(n);
  append(bytes, moments.data(), n);
  append(bytes, moments.data(), n);
  return bytes;
}

// An llm.c token shard of 64 tokens below 200.
inline Bytes valid_token_shard() {
  int32_t header[256] = {kShardMagic, kShardVersion, 64};
  Bytes bytes;
  append(bytes, header, 256);
  for (uint16_t t = 0; t < 64; ++t) {
    const uint16_t token = uint16_t(t * 37 % 200);
    append(bytes, &token, 1);
  }
  return bytes;
}

inline Bytes valid_text() {
  const std::string text = "In the beginning God created the heaven and the earth.\n";
  return Bytes(text.begin(), text.end());
}

// llm.c's tokenizer file, version 2, 12 tokens, end of text the last.
inline Bytes valid_tokenizer() {
  uint32_t header[256] = {kTokenizerMagic, 2, 12, 11};
  Bytes bytes;
  append(bytes, header, 256);
  const char* pieces[] = {"In", " the", " beginning", " God", " created", " heaven", " and", " earth",
                          ".", "\n", "a", "<|endoftext|>"};
  for (const char* piece : pieces) {
    bytes.push_back(uint8_t(std::strlen(piece)));
    bytes.insert(bytes.end(), piece, piece + std::strlen(piece));
  }
  return bytes;
}

// A command line as the fuzzers see it: arguments separated by NUL bytes.
inline Bytes valid_command_line() {
  const char* arguments[] = {"--layers", "4",    "--heads", "2",    "--dim=16",           "--seq-len", "8",
                             "--batch",  "2",    "--lr",    "1e-3", "--beta2",            "0.99",      "--pp",
                             "2",        "--seed", "42",    "--warmup", "0", "--layers-per-stage", "1,3"};
  Bytes bytes;
  for (const char* argument : arguments) {
    if (!bytes.empty()) bytes.push_back(0);
    bytes.insert(bytes.end(), argument, argument + std::strlen(argument));
  }
  return bytes;
}

// A schedule file (pipeline/schedule_file.h): ZB-H1's grid on 2 stages, 3 microbatches.
inline Bytes valid_schedule_file() {
  const std::string text = schedule_grid_text(make_pipeline_schedule(ScheduleKind::zb_h1, 2, 3, 1));
  return Bytes(text.begin(), text.end());
}

// PyTorch's schedule CSV (pipeline/pytorch_csv.h): ZB-V's on 2 ranks (4 virtual stages, the v
// placement), 3 microbatches, as our writer writes it.
inline Bytes valid_pytorch_csv() {
  const std::string text = pytorch_csv_text(make_pipeline_schedule(ScheduleKind::zb_v, 2, 3, 2));
  return Bytes(text.begin(), text.end());
}

// ---- feeding the parsers ----

// Reads a few microbatches as the trainer does; token values must be below the vocabulary.
inline void read_like_the_trainer(const TokenDataset& data, uint64_t position) {
  for (const bool shuffle : {false, true}) {
    BatchReader reader = make_batch_reader(data, 2, 3, shuffle, 1337);
    reader.next_microbatch = position;
    int inputs[6], targets[6];
    for (int k = 0; k < 3; ++k) {
      read_microbatch(reader, inputs, targets);
      for (int i = 0; i < 6; ++i)
        if (inputs[i] >= data.vocab_size || targets[i] >= data.vocab_size)
          throw std::logic_error("the reader gave a token outside the vocabulary");
    }
  }
}

inline void feed_model_file(const Bytes& bytes) {
  const MemoryFile file(bytes);
  const ModelFile model = read_model_file(file.path());
  if (model.parameters.size() != num_parameters(model.config))
    throw std::logic_error("read_model_file gave a parameter count other than its config's");
  check_model_config_against_flags(file.path(), model.config, small_config());
}

inline void feed_training_state(const Bytes& bytes) {
  const MemoryFile file(bytes);
  const TrainingState state = read_training_state(file.path());
  const size_t n = num_parameters(state.config);
  if (state.m.size() != n || state.v.size() != n || (!state.master.empty() && state.master.size() != n) ||
      state.step < 0)
    throw std::logic_error("read_training_state gave moments or master weights other than its config's, or a "
                           "negative step");
  check_state_config_against_model(file.path(), state.config, small_config());
}

// The first byte chooses the vocabulary the shard is read with; the rest is the shard.
inline void feed_token_shard(const Bytes& bytes) {
  if (bytes.empty()) return;
  const int vocab_sizes[] = {kGpt2VocabSize, 200, 65536, 1, 0, 65537};
  const MemoryFile file(Bytes(bytes.begin() + 1, bytes.end()));
  const TokenDataset data = load_token_shards(file.path(), vocab_sizes[bytes[0] % 6]);
  read_like_the_trainer(data, bytes[0]);
}

inline void feed_text_data(const Bytes& bytes) {
  if (bytes.empty()) return;
  const int vocab_sizes[] = {kByteVocabSize, 128, 65536, 0};
  const MemoryFile file(Bytes(bytes.begin() + 1, bytes.end()));
  const TokenDataset all = load_text_bytes(file.path(), vocab_sizes[bytes[0] % 4]);
  const TrainValSplit split = split_train_val(all);
  read_like_the_trainer(split.train, bytes[0]);
}

// A schedule file for its own number of stages and 3 microbatches, checked and lowered as the
// trainer does; the lowering must keep every stage's computes in the file's order. A schedule
// error's first line names the problem and the grid with the step marked follows it: the feed
// lets out that first line.
inline void feed_schedule_file(const Bytes& bytes) {
  try {
    const ScheduleGrid grid = parse_schedule_grid(std::string(bytes.begin(), bytes.end()));
    const PipelineSchedule schedule = schedule_from_grid(grid, int(grid.stages.size()), 3);
    for (size_t s = 0; s < grid.stages.size(); ++s)
      if (compute_actions(schedule.stages[s]) != grid.stages[s])
        throw std::logic_error("the lowering changed stage " + std::to_string(s) + "'s computes");
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    throw std::runtime_error(message.substr(0, message.find('\n')));
  }
}

// PyTorch's CSV for 3 microbatches, checked and lowered as the trainer does; a schedule that
// lowers must come back from our writer as the same computes (the CSV both ways). As for the
// schedule file, only an error's first line is let out.
inline void feed_pytorch_csv(const Bytes& bytes) {
  try {
    const ScheduleGrid grid = parse_pytorch_csv(std::string(bytes.begin(), bytes.end()));
    const PipelineSchedule schedule = schedule_from_grid(grid, int(grid.stages.size()), 3);
    const ScheduleGrid again = parse_pytorch_csv(pytorch_csv_text(schedule));
    if (again.placement != grid.placement || again.stages != grid.stages) throw std::logic_error("the CSV written back reads as other computes");
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    throw std::runtime_error(message.substr(0, message.find('\n')));
  }
}

inline void feed_tokenizer(const Bytes& bytes) {
  const MemoryFile file(bytes);
  const Tokenizer tokenizer = load_tokenizer(file.path());
  if (tokenizer.vocab_size <= 0 || tokenizer.pieces.size() != size_t(tokenizer.vocab_size) ||
      tokenizer.eot_token < 0 || tokenizer.eot_token >= tokenizer.vocab_size)
    throw std::logic_error("load_tokenizer gave an inconsistent tokenizer");
  const int tokens[] = {0, tokenizer.vocab_size - 1, tokenizer.eot_token};
  printable(decode(tokenizer, tokens, 3));
}

// Arguments separated by NUL bytes, parsed as ./train parses its command line; a valid result
// then goes through the checks the run makes of the numbers: the model config and the layer
// split (--layers-per-stage's or --pipeline-layout's). split_layers returns one range per chunk, at most --layers of them: it is tried up to
// 2^16 layers (a larger model's parameters alone would not fit a machine's memory).
inline void feed_command_line(const Bytes& bytes) {
  std::vector<std::string> arguments{"train"};
  std::string current;
  for (const uint8_t byte : bytes) {
    if (byte == 0) {
      arguments.push_back(current);
      current.clear();
    } else {
      current += char(byte);
    }
  }
  arguments.push_back(current);
  std::vector<const char*> argv;
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  const TrainOptions options = parse_train_options(int(argv.size()), argv.data());
  if (options.help) return;
  const GPTConfig config = make_gpt_config(options.layers, options.heads, options.dim, options.seq_len,
                                           options.vocab > 0 ? options.vocab : kByteVocabSize);
  if (config.num_layers > (1 << 16)) return;
  const int p = options.pp > 0 ? options.pp : 1, v = options.virtual_stages;
  const std::vector<LayerRange> ranges = split_layers(
      config.num_layers, p, v,
      options.pipeline_layout.empty() ? options.layers_per_stage
                                      : pipeline_layout_counts(options.pipeline_layout, p, v, config.num_layers));
  // A range without blocks must still hold the embedding or the head (--pipeline-layout's "E|").
  for (const LayerRange& range : ranges)
    if (range.first_layer < 0 || range.end_layer > config.num_layers || range.first_layer > range.end_layer ||
        (range.first_layer == range.end_layer && !range.has_embedding && !range.has_head))
      throw std::logic_error("split_layers gave a range outside the model or one that computes nothing");
}

}  // namespace parser_inputs
