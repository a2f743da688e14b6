// Turning sampled tokens back into text: bytes for the byte corpus; for GPT-2 token shards the
// pieces of llm.c's tokenizer file when one is given, otherwise the token ids themselves.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/data/data.h"

// llm.c tokenizer file: a header of 256 uint32 {magic, version, vocab size, eot token (version 2)},
// then per token one uint8 length (> 0) and that many bytes.
constexpr uint32_t kTokenizerMagic = 20240328;

enum class TokenizerKind { bytes, ids, pieces };

struct Tokenizer {
  TokenizerKind kind = TokenizerKind::bytes;
  int vocab_size = 0;               // tokens below it decode; others are an error
  int eot_token = -1;               // end-of-text token, -1 if the tokenizer has none
  std::vector<std::string> pieces;  // (vocab_size,) bytes of each token, for TokenizerKind::pieces
};

Tokenizer byte_tokenizer();
Tokenizer id_tokenizer(int vocab_size);
// Throws a one-line error naming the file and the field: magic, version, vocabulary size,
// eot token, a zero-length token, truncation, or bytes after the last token.
Tokenizer load_tokenizer(const std::string& path);
// The tokenizer for samples of a model trained on data of this format and vocabulary: the file's
// when a path is given (it must have exactly vocab_size tokens), else bytes for text (vocab_size
// must be 256) or ids for shards.
Tokenizer sample_tokenizer(TokenFormat format, int vocab_size, const std::string& tokenizer_path);

// Bytes or pieces concatenated; ids written in decimal, separated by single spaces.
std::string decode(const Tokenizer& tokenizer, const int* tokens, size_t count);
// The text as valid UTF-8, safe for a terminal: well-formed UTF-8 sequences as they are, newlines
// and tabs kept, and every other byte (one of a broken or cut sequence, a control character) as
// \xNN (lowercase hex). A byte model's sample may end or start inside a character, or be no UTF-8.
std::string printable(std::string_view text);
