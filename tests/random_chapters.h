// A text of chapters for the variable-length tests (trainer/data/documents.h's separator: a line
// opening "A<n>:1 "), each the 5 bytes of its reference, random lowercase letters and a newline:
// three in four with 0 or 1 letter (documents of 6 or 7 inputs), the others 10 to 15 (16 to 21
// inputs), so that pairs of sequences at maxT 8 differ in length. The same seed for every count:
// a longer text begins with a shorter one's chapters.
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include "trainer/data/data.h"

inline TokenDataset random_chapters(int count, const std::string& source) {
  TokenDataset d;
  std::mt19937_64 generator(11);
  for (int chapter = 0; chapter < count; ++chapter) {
    for (char c : "A" + std::to_string(chapter % 9 + 1) + ":1 ") d.tokens.push_back(uint16_t(c));
    const int letters = generator() % 4 == 0 ? int(10 + generator() % 6) : int(generator() % 2);
    for (int n = 0; n < letters; ++n) d.tokens.push_back(uint16_t('a' + generator() % 26));
    d.tokens.push_back(uint16_t('\n'));
  }
  d.vocab_size = 128;
  d.source = source;
  return d;
}
