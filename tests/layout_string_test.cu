// --pipeline-layout's parser (pipeline/layout_string.h): valid strings and the layer counts per
// virtual stage they give, written out by hand; every invalid string's one line and the column
// it points at. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/layout_string.h"

namespace {

std::string parse_error_of(const std::string& text) {
  try {
    parse_pipeline_layout(text);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

std::string run_error_of(const std::string& text, int p, int v, int layers) {
  try {
    pipeline_layout_counts(text, p, v, layers);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST(LayoutString, CountsTheLayersOfEachVirtualStage) {
  EXPECT_EQ(parse_pipeline_layout("Et*3|t*3|t*3|t*3L"), (std::vector<int>{3, 3, 3, 3}));
  EXPECT_EQ(parse_pipeline_layout("EttL"), (std::vector<int>{2}));
  EXPECT_EQ(parse_pipeline_layout("Ett|tt|tt|ttL"), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(parse_pipeline_layout("Et|t*3|t*3|tL"), (std::vector<int>{1, 3, 3, 1}));
  EXPECT_EQ(parse_pipeline_layout("Et*10|t*12L"), (std::vector<int>{10, 12}));
}

TEST(LayoutString, RepeatsSymbolsAndGroups) {
  EXPECT_EQ(parse_pipeline_layout("E(t*2|)*3t*2L"), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(parse_pipeline_layout("Et|(tt|)*2tL"), (std::vector<int>{1, 2, 2, 1}));
  EXPECT_EQ(parse_pipeline_layout("E((t|)*2)*2tL"), (std::vector<int>{1, 1, 1, 1, 1}));
  EXPECT_EQ(parse_pipeline_layout("E(t)*1|t*1L"), (std::vector<int>{1, 1}));
}

TEST(LayoutString, IgnoresBlanks) {
  EXPECT_EQ(parse_pipeline_layout(" E t t | t t L "), (std::vector<int>{2, 2}));
  EXPECT_EQ(parse_pipeline_layout("E t * 3 | ( t | ) * 2 t L"), (std::vector<int>{3, 1, 1, 1}));
}

// Llama 3's style, the first stage the embedding alone, and the head alone on the last.
TEST(LayoutString, FirstAndLastStagesMayHoldNoLayer) {
  EXPECT_EQ(parse_pipeline_layout("E|t*4|t*4|t*3L"), (std::vector<int>{0, 4, 4, 3}));
  EXPECT_EQ(parse_pipeline_layout("Et*4|t*4|L"), (std::vector<int>{4, 4, 0}));
  EXPECT_EQ(parse_pipeline_layout("E|tt|L"), (std::vector<int>{0, 2, 0}));
}

TEST(LayoutString, MatchesTheRun) {
  EXPECT_EQ(pipeline_layout_counts("E|t*4|t*4|t*3L", 4, 1, 11), (std::vector<int>{0, 4, 4, 3}));
  EXPECT_EQ(pipeline_layout_counts("E(t|)*3tL", 2, 2, 4), (std::vector<int>{1, 1, 1, 1}));
}

TEST(LayoutString, SyntaxErrorsPointAtTheCharacter) {
  EXPECT_EQ(parse_error_of("Et*2|tx|tL"), "--pipeline-layout: column 7: unknown symbol 'x' (E, t, L, |, (, ), * and digits)");
  EXPECT_EQ(parse_error_of("Et*2|T|tL"), "--pipeline-layout: column 6: unknown symbol 'T' (E, t, L, |, (, ), * and digits)");
  EXPECT_EQ(parse_error_of("E(t|t|tL"), "--pipeline-layout: column 2: '(' is never closed");
  EXPECT_EQ(parse_error_of("Et|t)L"), "--pipeline-layout: column 5: ')' without its '('");
  EXPECT_EQ(parse_error_of("E()t|tL"), "--pipeline-layout: column 2: an empty group '()'");
  EXPECT_EQ(parse_error_of("Et*|tL"), "--pipeline-layout: column 3: '*' without a count");
  EXPECT_EQ(parse_error_of("Et*"), "--pipeline-layout: column 3: '*' without a count");
  EXPECT_EQ(parse_error_of("E*2t|tL"), "--pipeline-layout: column 1: a second E (the model has one embedding)");
  EXPECT_EQ(parse_error_of("Et|(*2t)L"), "--pipeline-layout: column 5: '*' repeats nothing (write X*N after a symbol or a group)");
  EXPECT_EQ(parse_error_of("Et* 0|tL"), "--pipeline-layout: column 5: the count is 0 (a repetition needs at least 1)");
  EXPECT_EQ(parse_error_of("Et*1000000|tL"),
            "--pipeline-layout: column 4: the count is above 100000 (no model has that many layers)");
  EXPECT_EQ(parse_error_of("E(t*1000)*1000L"), "--pipeline-layout: column 10: the repetition makes more than 100000 symbols");
}

TEST(LayoutString, EmbeddingAndHeadErrorsSayWhereTheyRun) {
  EXPECT_EQ(parse_error_of("t|EtL"), "--pipeline-layout: column 3: E must open the first virtual stage (the embedding runs there)");
  EXPECT_EQ(parse_error_of("Et|Et|tL"), "--pipeline-layout: column 4: a second E (the model has one embedding)");
  EXPECT_EQ(parse_error_of("EtL|tt"),
            "--pipeline-layout: column 3: L must close the last virtual stage (the head and the loss run there)");
  EXPECT_EQ(parse_error_of("EtLL"), "--pipeline-layout: column 3: L must close the last virtual stage (the head and the loss run there)");
  EXPECT_EQ(parse_error_of("tt|tL"), "--pipeline-layout: column 1: no E: the layout must open with the embedding");
  EXPECT_EQ(parse_error_of("Ett|tt  "), "--pipeline-layout: column 7: no L: the layout must close with the head");
  EXPECT_EQ(parse_error_of(""), "--pipeline-layout: column 1: the layout is empty");
  EXPECT_EQ(parse_error_of("   "), "--pipeline-layout: column 1: the layout is empty");
}

TEST(LayoutString, AMiddleStageWithoutALayerIsRefused) {
  EXPECT_EQ(parse_error_of("Et*2||t*2L"),
            "--pipeline-layout: column 6: virtual stage 1 holds no transformer layer (only the first and the last may: "
            "they hold E and L)");
  EXPECT_EQ(parse_error_of("E|(|t)*2L"),
            "--pipeline-layout: column 4: virtual stage 1 holds no transformer layer (only the first and the last may: "
            "they hold E and L)");
}

TEST(LayoutString, RunErrorsSayBothNumbers) {
  EXPECT_EQ(run_error_of("Et|t|t|t|tL", 4, 1, 5),
            "--pipeline-layout: column 9: 5 virtual stages, but the schedule runs --pp 4 x 1 chunks = 4");
  EXPECT_EQ(run_error_of("Et|tL", 2, 2, 2),
            "--pipeline-layout: column 6: 2 virtual stages, but the schedule runs --pp 2 x 2 chunks = 4");
  EXPECT_EQ(run_error_of("Et*3|t*3L", 2, 1, 5), "--pipeline-layout: column 6: 6 transformer layers, but the model has --layers 5");
  EXPECT_EQ(run_error_of("Et*3|t*3L", 2, 1, 8), "--pipeline-layout: column 10: 6 transformer layers, but the model has --layers 8");
}
