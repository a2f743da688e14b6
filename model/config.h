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
// not positive, channels not divisible by num_heads, padded_vocab_size below vocab_size;
// or a parameter count of 2^59 or more, whose values, gradients and AdamW moments (16 bytes
// each) would not fit in 64-bit memory and whose sizes would wrap a size_t.
// The message has no prefix, so that the caller can say where the config came from.
void validate_gpt_config(const GPTConfig& config);

// The parameter count in long double (exact below 2^64), so that huge fields cannot wrap it
// around: what num_parameters (model/parameters.h) gives once the config is valid.
long double unwrapped_parameter_count(const GPTConfig& config);
