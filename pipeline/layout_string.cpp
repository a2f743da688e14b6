// --pipeline-layout's parser (pipeline/layout_string.h).
#include "pipeline/layout_string.h"

#include <cctype>
#include <stdexcept>

namespace {

// Repetition multiplies, so a short string may ask for any number of symbols; far more than
// any model has layers is a typo, refused before it fills memory.
constexpr long kMaxSymbols = 100000;

struct Symbol {
  char kind;   // 'E', 't', 'L' or '|'
  int column;  // 1-based, in the text as given
};

[[noreturn]] void fail(int column, const std::string& message) {
  throw std::runtime_error("--pipeline-layout: column " + std::to_string(column) + ": " + message);
}

// Recursive descent over  sequence := (atom ['*' count])*,  atom := E | t | L | '|' | '(' sequence ')'.
class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  std::vector<Symbol> parse_all() {
    std::vector<Symbol> symbols = parse_sequence();
    if (at_end()) return symbols;
    fail(column(), "')' without its '('");
  }

 private:
  std::vector<Symbol> parse_sequence() {
    std::vector<Symbol> symbols;
    while (!at_end() && peek() != ')') {
      std::vector<Symbol> atom = parse_atom();
      skip_blanks();
      if (!at_end() && peek() == '*') {
        const int star = column();
        ++position_;
        const long count = parse_count(star);
        if (long(symbols.size()) + long(atom.size()) * count > kMaxSymbols)
          fail(star, "the repetition makes more than " + std::to_string(kMaxSymbols) + " symbols");
        for (long i = 0; i < count; ++i) symbols.insert(symbols.end(), atom.begin(), atom.end());
      } else {
        symbols.insert(symbols.end(), atom.begin(), atom.end());
      }
      if (long(symbols.size()) > kMaxSymbols) fail(column(), "more than " + std::to_string(kMaxSymbols) + " symbols");
    }
    return symbols;
  }

  std::vector<Symbol> parse_atom() {
    const int at = column();
    const char c = text_[position_++];
    if (c == 'E' || c == 't' || c == 'L' || c == '|') return {{c, at}};
    if (c == '(') {
      std::vector<Symbol> group = parse_sequence();
      if (at_end()) fail(at, "'(' is never closed");
      ++position_;  // ')'
      if (group.empty()) fail(at, "an empty group '()'");
      return group;
    }
    if (c == '*') fail(at, "'*' repeats nothing (write X*N after a symbol or a group)");
    fail(at, "unknown symbol '" + std::string(1, c) + "' (E, t, L, |, (, ), * and digits)");
  }

  long parse_count(int star) {
    skip_blanks();
    if (at_end() || !std::isdigit(static_cast<unsigned char>(peek()))) fail(star, "'*' without a count");
    const int first_digit = column();
    long count = 0;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(peek()))) {
      count = count * 10 + (text_[position_++] - '0');
      if (count > kMaxSymbols)
        fail(first_digit, "the count is above " + std::to_string(kMaxSymbols) + " (no model has that many layers)");
    }
    if (count == 0) fail(first_digit, "the count is 0 (a repetition needs at least 1)");
    return count;
  }

  void skip_blanks() {
    while (position_ < text_.size() && std::isspace(static_cast<unsigned char>(peek()))) ++position_;
  }
  bool at_end() {
    skip_blanks();
    return position_ >= text_.size();
  }
  char peek() const { return text_[position_]; }
  int column() const { return int(position_) + 1; }

  const std::string& text_;
  size_t position_ = 0;
};

// The column just after the last character that is not a blank: where a missing piece would go.
int end_column(const std::string& text) {
  size_t end = text.size();
  while (end > 0 && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return int(end) + 1;
}

// E first, L last, each once; no middle stage without a layer. Returns the layers per stage.
std::vector<int> check_symbols(const std::vector<Symbol>& symbols, const std::string& text) {
  if (symbols.empty()) fail(1, "the layout is empty");
  bool seen_embedding = false, seen_head = false;
  for (size_t i = 0; i < symbols.size(); ++i) {
    const Symbol& s = symbols[i];
    if (s.kind == 'E' && seen_embedding) fail(s.column, "a second E (the model has one embedding)");
    if (s.kind == 'E' && i != 0) fail(s.column, "E must open the first virtual stage (the embedding runs there)");
    if (s.kind == 'L' && seen_head) fail(s.column, "a second L (the model has one head)");
    if (s.kind == 'L' && i + 1 != symbols.size())
      fail(s.column, "L must close the last virtual stage (the head and the loss run there)");
    seen_embedding |= s.kind == 'E';
    seen_head |= s.kind == 'L';
  }
  if (!seen_embedding) fail(symbols[0].column, "no E: the layout must open with the embedding");
  if (!seen_head) fail(end_column(text), "no L: the layout must close with the head");
  std::vector<int> counts(1, 0);
  for (const Symbol& s : symbols) {
    if (s.kind == 't') counts.back()++;
    if (s.kind != '|') continue;
    // The first stage holds E and the last L; a stage between with no layer would compute nothing.
    if (counts.back() == 0 && counts.size() > 1)
      fail(s.column, "virtual stage " + std::to_string(counts.size() - 1) +
                         " holds no transformer layer (only the first and the last may: they hold E and L)");
    counts.push_back(0);
  }
  return counts;
}

// The column of the n-th (1-based) symbol of this kind, or the end of the text if there are fewer.
int column_of_nth(const std::vector<Symbol>& symbols, char kind, long n, const std::string& text) {
  for (const Symbol& s : symbols)
    if (s.kind == kind && --n == 0) return s.column;
  return end_column(text);
}

}  // namespace

std::vector<int> parse_pipeline_layout(const std::string& text) {
  return check_symbols(Parser(text).parse_all(), text);
}

std::vector<int> pipeline_layout_counts(const std::string& text, int p, int v, int num_layers) {
  const std::vector<Symbol> symbols = Parser(text).parse_all();
  const std::vector<int> counts = check_symbols(symbols, text);
  const long stages = long(p) * v;
  if (long(counts.size()) != stages)
    fail(column_of_nth(symbols, '|', stages, text),
         std::to_string(counts.size()) + " virtual stages, but the schedule runs --pp " + std::to_string(p) + " x " +
             std::to_string(v) + " chunks = " + std::to_string(stages));
  long layers = 0;
  for (int count : counts) layers += count;
  if (layers != num_layers)
    fail(column_of_nth(symbols, 't', long(num_layers) + 1, text),
         std::to_string(layers) + " transformer layers, but the model has --layers " + std::to_string(num_layers));
  return counts;
}
