// Decoding tokens for the trainer's samples, and reading llm.c's tokenizer file. See tokenizer.h.
#include "trainer/data/tokenizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace {

std::string kind_name(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::bytes:
      return "byte";
    case TokenizerKind::ids:
      return "token-id";
    case TokenizerKind::pieces:
      return "file";
  }
  return "";
}

}  // namespace

Tokenizer byte_tokenizer() {
  Tokenizer tokenizer;
  tokenizer.kind = TokenizerKind::bytes;
  tokenizer.vocab_size = kByteVocabSize;
  return tokenizer;
}

Tokenizer id_tokenizer(int vocab_size) {
  Tokenizer tokenizer;
  tokenizer.kind = TokenizerKind::ids;
  tokenizer.vocab_size = vocab_size;
  return tokenizer;
}

Tokenizer load_tokenizer(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat info;
  if (fstat(fileno(file.get()), &info) != 0) throw std::runtime_error(path + ": cannot stat (" + std::strerror(errno) + ")");
  if (!S_ISREG(info.st_mode)) throw std::runtime_error(path + ": not a regular file");
  const uint64_t file_bytes = uint64_t(info.st_size);
  uint32_t header[256];
  if (std::fread(header, sizeof(uint32_t), 256, file.get()) != 256) {
    throw std::runtime_error(path + ": too short for the 1024-byte header of an llm.c tokenizer file");
  }
  if (header[0] != kTokenizerMagic) {
    throw std::runtime_error(path + ": header magic " + std::to_string(header[0]) + " is not " +
                             std::to_string(kTokenizerMagic) + " (llm.c tokenizer)");
  }
  const uint32_t version = header[1];
  if (version != 1 && version != 2) {
    throw std::runtime_error(path + ": header version " + std::to_string(version) + " is not 1 or 2");
  }
  const uint32_t vocab_size = header[2];
  // Version 1 is GPT-2's tokenizer only, whose end-of-text token is the last one.
  if (version == 1 && vocab_size != kGpt2VocabSize) {
    throw std::runtime_error(path + ": header vocabulary size " + std::to_string(vocab_size) +
                             " is not GPT-2's 50257, which version 1 requires");
  }
  if (vocab_size == 0 || vocab_size > (1u << 24)) {
    throw std::runtime_error(path + ": header vocabulary size " + std::to_string(vocab_size) +
                             " is not in [1, 16777216]");
  }
  // Each token takes at least 2 bytes (its length and one byte), so the header's count is checked
  // against the file before anything is allocated for it.
  const uint64_t least_bytes = sizeof(header) + 2 * uint64_t(vocab_size);
  if (file_bytes < least_bytes) {
    throw std::runtime_error(path + ": header vocabulary size " + std::to_string(vocab_size) + " needs at least " +
                             std::to_string(least_bytes) + " bytes (1024 + 2 per token), the file has " +
                             std::to_string(file_bytes));
  }
  const uint32_t eot_token = version == 1 ? kGpt2VocabSize - 1 : header[3];
  if (eot_token >= vocab_size) {
    throw std::runtime_error(path + ": header eot token " + std::to_string(eot_token) +
                             " is not below the vocabulary size " + std::to_string(vocab_size));
  }
  Tokenizer tokenizer;
  tokenizer.kind = TokenizerKind::pieces;
  tokenizer.vocab_size = static_cast<int>(vocab_size);
  tokenizer.eot_token = static_cast<int>(eot_token);
  tokenizer.pieces.resize(vocab_size);
  for (uint32_t token = 0; token < vocab_size; token++) {
    unsigned char length = 0;
    if (std::fread(&length, 1, 1, file.get()) != 1) {
      throw std::runtime_error(path + ": ends before token " + std::to_string(token) + " of " +
                               std::to_string(vocab_size));
    }
    if (length == 0) throw std::runtime_error(path + ": token " + std::to_string(token) + " has length 0");
    std::string& piece = tokenizer.pieces[token];
    piece.resize(length);
    if (std::fread(piece.data(), 1, length, file.get()) != length) {
      throw std::runtime_error(path + ": ends inside token " + std::to_string(token) + " of " +
                               std::to_string(vocab_size));
    }
  }
  if (std::fgetc(file.get()) != EOF) {
    throw std::runtime_error(path + ": bytes after the last of " + std::to_string(vocab_size) + " tokens");
  }
  return tokenizer;
}

Tokenizer sample_tokenizer(TokenFormat format, int vocab_size, const std::string& tokenizer_path) {
  if (tokenizer_path.empty() && format == TokenFormat::llmc_shards) return id_tokenizer(vocab_size);
  if (tokenizer_path.empty()) {
    // A sample could otherwise hold a token no byte stands for.
    if (vocab_size != kByteVocabSize) {
      throw std::runtime_error("byte text decodes 256 tokens, but the model's vocabulary has " +
                               std::to_string(vocab_size) + " (use a vocabulary of 256 or a tokenizer file)");
    }
    return byte_tokenizer();
  }
  Tokenizer tokenizer = load_tokenizer(tokenizer_path);
  if (tokenizer.vocab_size != vocab_size) {
    throw std::runtime_error(tokenizer_path + ": " + std::to_string(tokenizer.vocab_size) +
                             " tokens, but the model's vocabulary has " + std::to_string(vocab_size));
  }
  return tokenizer;
}

std::string decode(const Tokenizer& tokenizer, const int* tokens, size_t count) {
  std::string text;
  for (size_t i = 0; i < count; i++) {
    const int token = tokens[i];
    if (token < 0 || token >= tokenizer.vocab_size) {
      throw std::runtime_error("token " + std::to_string(token) + " is outside the " + kind_name(tokenizer.kind) +
                               " tokenizer's " + std::to_string(tokenizer.vocab_size) + " tokens");
    }
    switch (tokenizer.kind) {
      case TokenizerKind::bytes:
        text += static_cast<char>(token);
        break;
      case TokenizerKind::ids:
        text += (i == 0 ? "" : " ") + std::to_string(token);
        break;
      case TokenizerKind::pieces:
        text += tokenizer.pieces[token];
        break;
    }
  }
  return text;
}

namespace {

// The length of the well-formed UTF-8 sequence at text[at] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when none starts there.
size_t utf8_sequence_length(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return at + i < text.size() ? static_cast<unsigned char>(text[at + i]) : 0u; };
  const auto continuation = [&](size_t i, unsigned low = 0x80, unsigned high = 0xBF) {
    return byte(i) >= low && byte(i) <= high;
  };
  const unsigned lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    const unsigned low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
    return continuation(1, low, high) && continuation(2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const unsigned low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
    return continuation(1, low, high) && continuation(2) && continuation(3) ? 4 : 0;
  }
  return 0;
}

// Control characters a terminal could act on: C0 but newline and tab, DEL, and C1 (U+0080 to
// U+009F, bytes C2 80 to C2 9F), which some terminals read as escape sequences.
bool is_control(std::string_view sequence) {
  const unsigned char lead = static_cast<unsigned char>(sequence[0]);
  if (sequence.size() == 1) return (lead < 0x20 && lead != '\n' && lead != '\t') || lead == 0x7F;
  return lead == 0xC2 && static_cast<unsigned char>(sequence[1]) < 0xA0;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string safe;
  safe.reserve(text.size());
  size_t at = 0;
  while (at < text.size()) {
    const size_t length = utf8_sequence_length(text, at);
    const std::string_view sequence = text.substr(at, std::max<size_t>(length, 1));
    if (length > 0 && !is_control(sequence)) {
      safe += sequence;
    } else {
      for (const char c : sequence) {
        char escape[5];
        std::snprintf(escape, sizeof(escape), "\\x%02x", static_cast<unsigned char>(c));
        safe += escape;
      }
    }
    at += sequence.size();
  }
  return safe;
}
