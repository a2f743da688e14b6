// The shape of a GPT-2 model (llm.c's GPT2Config), built from the flags or read from
// a checkpoint header, and the checks that make it a model we can build.
#pragma once

struct GPTConfig {
  int max_seq_len;        // maxT: rows of the position embedding
  int vocab_size;         // V: tokens the data uses
  int padded_vocab_size;  // Vp: rows of the token embedding, V rounded up to a multiple of 128
  int num_layers;         // L
  int num_heads;          // NH
  int channels;           // C
};

// Vp = V rounded up to a multiple of 128 (llm.c's padding: whole tiles for the output matmul).
// Throws "model config: <field> <value> <problem>" when validate_gpt_config would.
GPTConfig make_gpt_config(int layers, int heads, int channels, int max_seq_len, int vocab_size);

// Throws std::runtime_error with one line naming the first bad field: a field that is
// not positive, channels not divisible by num_heads, padded_vocab_size below vocab_size.
// The message has no prefix, so that the caller can say where the config came from.
void validate_gpt_config(const GPTConfig& config);
