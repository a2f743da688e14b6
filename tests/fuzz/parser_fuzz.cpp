// One libFuzzer target per parser (`make fuzz`, docs/testing.md): compiled once per parser with
// -DPARSER_FEED=feed_model_file (or another feed_ of tests/fuzz/parser_inputs.h). The parser's
// one-line error is a fine outcome; anything else that leaves the feed (another exception, a
// sanitizer report, an allocation above -malloc_limit_mb, a timeout) is a finding.
#include <stdexcept>

#include "tests/fuzz/parser_inputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    parser_inputs::PARSER_FEED(parser_inputs::Bytes(data, data + size));
  } catch (const std::runtime_error&) {
  }
  return 0;
}
