// llm.c's model file and our training-state file: read, validate, write (model/checkpoint_format.h).
#include "model/checkpoint_format.h"

#include <sys/stat.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "model/atomic_file.h"
#include "model/parameters.h"

static_assert(std::endian::native == std::endian::little, "llm.c's files are little-endian, read as stored");

namespace {

// ---- reading ----

struct FileCloser {
  void operator()(FILE* file) const { std::fclose(file); }
};
using File = std::unique_ptr<FILE, FileCloser>;

[[noreturn]] void malformed(const std::string& path, const std::string& problem) {
  throw std::runtime_error(path + ": " + problem);
}

File open_for_reading(const std::string& path, size_t* bytes) {
  File file(std::fopen(path.c_str(), "rb"));
  if (!file) malformed(path, std::string("open failed: ") + std::strerror(errno));
  struct stat info;
  if (fstat(fileno(file.get()), &info) != 0) malformed(path, std::string("stat failed: ") + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) malformed(path, "not a regular file");
  *bytes = size_t(info.st_size);
  return file;
}

void read_exactly(FILE* file, const std::string& path, void* out, size_t bytes) {
  if (std::fread(out, 1, bytes, file) != bytes)
    malformed(path,
              std::string("read failed: ") + (std::ferror(file) ? std::strerror(errno) : "unexpected end of file"));
}

void require_header_fits(const std::string& path, size_t file_bytes, size_t header_bytes) {
  if (file_bytes < header_bytes)
    malformed(path, "file is " + std::to_string(file_bytes) + " bytes, shorter than the " +
                        std::to_string(header_bytes) + "-byte header");
}

GPTConfig validated_header_config(const std::string& path, int64_t maxT, int64_t V, int64_t L, int64_t NH, int64_t C,
                                  int64_t Vp) {
  const int64_t fields[] = {maxT, V, L, NH, C, Vp};
  const char* names[] = {"max_seq_len", "vocab_size", "num_layers", "num_heads", "channels", "padded_vocab_size"};
  for (int i = 0; i < 6; ++i)
    if (fields[i] != int32_t(fields[i]))
      malformed(path, std::string("header ") + names[i] + " " + std::to_string(fields[i]) + " does not fit an int");
  const GPTConfig config{int(maxT), int(V), int(Vp), int(L), int(NH), int(C)};
  try {
    validate_gpt_config(config);
  } catch (const std::runtime_error& e) {
    malformed(path, std::string("header ") + e.what());
  }
  return config;
}

std::string integer_string(long double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.0Lf", value);
  return text;
}

// The file must be the header plus exactly the payload the header describes.
void require_size(const std::string& path, size_t file_bytes, size_t header_bytes, long double payload_bytes,
                  const std::string& payload) {
  const long double expected = header_bytes + payload_bytes;
  if (static_cast<long double>(file_bytes) == expected) return;
  const std::string says = "file is " + std::to_string(file_bytes) + " bytes but its header describes " +
                           std::to_string(header_bytes) + " + " + payload;
  if (static_cast<long double>(file_bytes) < expected) malformed(path, says + " (truncated)");
  const size_t extra = file_bytes - size_t(expected);
  malformed(path, says + " (" + std::to_string(extra) + (extra == 1 ? " trailing byte)" : " trailing bytes)"));
}

// ---- bf16 ----

// Round to nearest even; NaN stays a (quiet) NaN rather than rounding into infinity.
uint16_t bf16_bits_from_float(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
float float_from_bf16_bits(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

// ---- config fields, for the checks against other configs ----

struct ConfigField {
  const char* name;
  int GPTConfig::*member;
  const char* flag;
};
const ConfigField kConfigFields[] = {
    {"max_seq_len", &GPTConfig::max_seq_len, "--seq-len"},
    {"vocab_size", &GPTConfig::vocab_size, "--vocab"},
    {"padded_vocab_size", &GPTConfig::padded_vocab_size, nullptr},
    {"num_layers", &GPTConfig::num_layers, "--layers"},
    {"num_heads", &GPTConfig::num_heads, "--heads"},
    {"channels", &GPTConfig::channels, "--dim"},
};

std::string field_value(const ConfigField& field, const GPTConfig& config) {
  return std::string(field.name) + " " + std::to_string(config.*field.member);
}

}  // namespace

// ---- model file ----

ModelFile read_model_file(const std::string& path, bool read_parameters) {
  size_t file_bytes = 0;
  File file = open_for_reading(path, &file_bytes);
  int32_t header[kModelFileHeaderInts];
  require_header_fits(path, file_bytes, sizeof(header));
  read_exactly(file.get(), path, header, sizeof(header));
  if (header[0] != kModelFileMagic)
    malformed(path, "header magic " + std::to_string(header[0]) + " is not " + std::to_string(kModelFileMagic) +
                        " (llm.c model file)");
  if (header[1] != kModelFileVersionFp32 && header[1] != kModelFileVersionBf16)
    malformed(path, "header version " + std::to_string(header[1]) + " is not " + std::to_string(kModelFileVersionFp32) +
                        " (fp32) or " + std::to_string(kModelFileVersionBf16) + " (bf16)");
  ModelFile model;
  model.dtype = header[1] == kModelFileVersionFp32 ? CheckpointDtype::fp32 : CheckpointDtype::bf16;
  model.config = validated_header_config(path, header[2], header[3], header[4], header[5], header[6], header[7]);
  const size_t element_bytes = model.dtype == CheckpointDtype::fp32 ? sizeof(float) : sizeof(uint16_t);
  const long double count = unwrapped_parameter_count(model.config);
  require_size(path, file_bytes, sizeof(header), count * element_bytes,
               std::to_string(element_bytes) + " x " + integer_string(count) + " parameter bytes");
  if (!read_parameters) return model;
  const size_t n = num_parameters(model.config);
  model.parameters.resize(n);
  if (model.dtype == CheckpointDtype::fp32) {
    read_exactly(file.get(), path, model.parameters.data(), n * sizeof(float));
  } else {
    std::vector<uint16_t> stored(n);
    read_exactly(file.get(), path, stored.data(), n * sizeof(uint16_t));
    for (size_t i = 0; i < n; ++i) model.parameters[i] = float_from_bf16_bits(stored[i]);
  }
  return model;
}

void write_model_file(const std::string& path, const GPTConfig& config, const std::vector<float>& parameters,
                      CheckpointDtype dtype) {
  const size_t n = num_parameters(config);
  if (parameters.size() != n)
    throw std::runtime_error(path + ": " + std::to_string(parameters.size()) + " parameters to write, the config has " +
                             std::to_string(n));
  int32_t header[kModelFileHeaderInts] = {};
  header[0] = kModelFileMagic;
  header[1] = dtype == CheckpointDtype::fp32 ? kModelFileVersionFp32 : kModelFileVersionBf16;
  header[2] = config.max_seq_len;
  header[3] = config.vocab_size;
  header[4] = config.num_layers;
  header[5] = config.num_heads;
  header[6] = config.channels;
  header[7] = config.padded_vocab_size;
  if (dtype == CheckpointDtype::fp32) {
    write_file_atomically(path, {{header, sizeof(header)}, {parameters.data(), n * sizeof(float)}});
    return;
  }
  std::vector<uint16_t> stored(n);
  for (size_t i = 0; i < n; ++i) stored[i] = bf16_bits_from_float(parameters[i]);
  write_file_atomically(path, {{header, sizeof(header)}, {stored.data(), n * sizeof(uint16_t)}});
}

void check_model_config_against_flags(const std::string& path, const GPTConfig& header, const GPTConfig& flags) {
  for (const ConfigField& field : kConfigFields) {
    if (field.flag == nullptr) continue;  // Vp follows from V
    const int in_file = header.*field.member, wanted = flags.*field.member;
    const bool is_seq_len = field.member == &GPTConfig::max_seq_len;
    if (is_seq_len ? wanted <= in_file : wanted == in_file) continue;
    malformed(path, "header " + field_value(field, header) + (is_seq_len ? " is smaller than " : " disagrees with ") +
                        field.flag + " " + std::to_string(wanted));
  }
}

// ---- training state ----

std::string training_state_path(const std::string& model_path) { return model_path + ".state"; }

TrainingState read_training_state(const std::string& path) {
  size_t file_bytes = 0;
  File file = open_for_reading(path, &file_bytes);
  int64_t header[kTrainingStateHeaderWords];
  require_header_fits(path, file_bytes, sizeof(header));
  read_exactly(file.get(), path, header, sizeof(header));
  if (header[0] != kTrainingStateMagic)
    malformed(path, "header magic " + std::to_string(header[0]) + " is not " + std::to_string(kTrainingStateMagic) +
                        " (training state)");
  if (header[1] != 1 && header[1] != kTrainingStateVersion)
    malformed(path, "header version " + std::to_string(header[1]) + " is not 1 or " +
                        std::to_string(kTrainingStateVersion));
  TrainingState state;
  state.config = validated_header_config(path, header[2], header[3], header[4], header[5], header[6], header[7]);
  state.step = header[8];
  state.data_position = uint64_t(header[9]);
  const int64_t rng_words = header[10], parameters = header[11], master_weights = header[12];
  state.rounding_seed = uint64_t(header[13]);
  if (state.step < 0) malformed(path, "header step " + std::to_string(state.step) + " is negative");
  if (rng_words < 0) malformed(path, "header rng words " + std::to_string(rng_words) + " is negative");
  if (master_weights != 0 && master_weights != 1)
    malformed(path, "header master weights " + std::to_string(master_weights) + " is not 0 or 1");
  const long double count = unwrapped_parameter_count(state.config);
  if (static_cast<long double>(parameters) != count)
    malformed(path, "header parameters " + std::to_string(parameters) + " disagrees with the config's " +
                        integer_string(count));
  const std::string master_text =
      master_weights ? " + 4 x " + std::to_string(parameters) + " master weight bytes" : std::string();
  require_size(path, file_bytes, sizeof(header),
               static_cast<long double>(rng_words) * sizeof(uint64_t) + (2 + master_weights) * count * sizeof(float),
               "8 x " + std::to_string(rng_words) + " rng bytes + 2 x 4 x " + std::to_string(parameters) +
                   " moment bytes" + master_text);

  state.rng.resize(size_t(rng_words));
  state.m.resize(size_t(parameters));
  state.v.resize(size_t(parameters));
  state.master.resize(master_weights ? size_t(parameters) : 0);
  read_exactly(file.get(), path, state.rng.data(), state.rng.size() * sizeof(uint64_t));
  read_exactly(file.get(), path, state.m.data(), state.m.size() * sizeof(float));
  read_exactly(file.get(), path, state.v.data(), state.v.size() * sizeof(float));
  read_exactly(file.get(), path, state.master.data(), state.master.size() * sizeof(float));
  return state;
}

void write_training_state(const std::string& path, const TrainingState& state) {
  const size_t n = num_parameters(state.config);
  if (state.m.size() != n || state.v.size() != n)
    throw std::runtime_error(path + ": moments of " + std::to_string(state.m.size()) + " and " +
                             std::to_string(state.v.size()) + " values to write, the config has " + std::to_string(n) +
                             " parameters");
  if (!state.master.empty() && state.master.size() != n)
    throw std::runtime_error(path + ": " + std::to_string(state.master.size()) +
                             " master weights to write, the config has " + std::to_string(n) + " parameters");
  const GPTConfig& c = state.config;
  int64_t header[kTrainingStateHeaderWords] = {kTrainingStateMagic,
                                               kTrainingStateVersion,
                                               c.max_seq_len,
                                               c.vocab_size,
                                               c.num_layers,
                                               c.num_heads,
                                               c.channels,
                                               c.padded_vocab_size,
                                               state.step,
                                               int64_t(state.data_position),
                                               int64_t(state.rng.size()),
                                               int64_t(n),
                                               state.master.empty() ? 0 : 1,
                                               int64_t(state.rounding_seed)};
  write_file_atomically(path, {{header, sizeof(header)},
                               {state.rng.data(), state.rng.size() * sizeof(uint64_t)},
                               {state.m.data(), n * sizeof(float)},
                               {state.v.data(), n * sizeof(float)},
                               {state.master.data(), state.master.size() * sizeof(float)}});
}

void check_state_config_against_model(const std::string& path, const GPTConfig& state, const GPTConfig& model) {
  for (const ConfigField& field : kConfigFields)
    if (state.*field.member != model.*field.member)
      malformed(path, "header " + field_value(field, state) + " disagrees with the model file's " +
                          std::to_string(model.*field.member));
}
