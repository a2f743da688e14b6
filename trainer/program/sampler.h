// Text samples from the model: autoregressive generation from a fixed start token, each next
// token drawn from the softmax of the last position's logits over a temperature by a seeded
// random generator whose whole state is one 64-bit word, so that checkpoints can save it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/tokenizer.h"
#include "trainer/step/trainer.h"

// llm.c's xorshift* generator: the state must not be 0.
uint64_t sampler_seed_state(uint64_t seed);
uint32_t random_u32(uint64_t& state);
// Uniform in [0, 1) on 24 bits.
float random_unit_float(uint64_t& state);

// The token whose cumulative probability first exceeds coin (in [0, 1)) under the softmax of
// logits / temperature (V), in double. The last token if rounding leaves coin above the total.
int sample_from_logits(const std::vector<float>& logits, float coin, double temperature);

// The start token of samples: '\n' for the byte corpus, else the tokenizer's end-of-text token
// when it has one, else the vocabulary's last token (GPT-2's end of text, 50256).
int sample_start_token(TokenFormat format, const Tokenizer& tokenizer, int vocab_size);

// start followed by length generated tokens; the model sees the last trainer.T tokens at most.
template <typename Element>
std::vector<int> generate_tokens(Trainer<Element>& trainer, int start, int length, double temperature,
                                 uint64_t& rng_state);
