// Writes one valid input per fuzz target into DIR/<target>/seed, the corpus a campaign starts
// from (`make fuzz`): the mutations then begin past the magic numbers and size checks.
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/fuzz/parser_inputs.h"

using namespace parser_inputs;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_seeds DIR\n");
    return 1;
  }
  Bytes shard = valid_token_shard(), text = valid_text();
  shard.insert(shard.begin(), 1);  // the feeds' first byte picks the vocabulary: 200 for the shard
  text.insert(text.begin(), 0);    // and 256 for text
  const std::pair<const char*, Bytes> seeds[] = {
      {"model_file", valid_model_file(CheckpointDtype::fp32)}, {"model_file_bf16", valid_model_file(CheckpointDtype::bf16)},
      {"training_state", valid_training_state()},             {"token_shard", shard},
      {"text_data", text},                                     {"tokenizer", valid_tokenizer()},
      {"command_line", valid_command_line()},                 {"schedule_file", valid_schedule_file()},
      {"pytorch_csv", valid_pytorch_csv()}};
  for (const auto& [name, bytes] : seeds) {
    // The bf16 model file seeds the model_file target too.
    const std::string target = std::string(name) == "model_file_bf16" ? "model_file" : name;
    const std::filesystem::path dir = std::filesystem::path(argv[1]) / target;
    std::filesystem::create_directories(dir);
    FILE* file = std::fopen((dir / (std::string(name) + "_seed")).c_str(), "wb");
    if (file == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size() || std::fclose(file) != 0) {
      std::fprintf(stderr, "write_seeds: cannot write %s\n", (dir / name).c_str());
      return 1;
    }
  }
  return 0;
}
