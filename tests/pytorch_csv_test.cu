// PyTorch's schedule CSV (pipeline/pytorch_csv.h): every built-in schedule written as the CSV and
// read back is the same compute grid on the same placement; the text is PyTorch's (virtual stage,
// type, microbatch; rows of ranks; "\r\n"); a file as PyTorch writes it, with idle cells and an
// overlapped pair, reads as the grid our own text gives; the format is told by the content; and
// each malformed file is one line naming its row and column. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/pytorch_csv.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_file.h"
#include "tests/error_message.h"

namespace {

std::string csv_error(const std::string& text) {
  return error_of([&] { parse_pytorch_csv(text); });
}

// Every schedule kind there is: ScheduleKind's values from 0 on, up to the first schedule_name
// refuses, so that a kind added later is covered without a change here.
std::vector<ScheduleKind> all_kinds() {
  std::vector<ScheduleKind> kinds;
  for (int k = 0;; k++) {
    try {
      schedule_name(ScheduleKind(k));
    } catch (const std::logic_error&) {
      return kinds;
    }
    kinds.push_back(ScheduleKind(k));
  }
}

}  // namespace

TEST(PytorchCsv, EveryBuiltInScheduleRoundTrips) {
  const std::vector<ScheduleKind> kinds = all_kinds();
  ASSERT_GE(kinds.size(), 6u);
  for (ScheduleKind kind : kinds) {
    int layouts = 0;
    for (int p : {1, 2, 3, 4})
      for (int m : {1, p, 2 * p, 3 * p + 1})
        for (int v : {1, 2, 3}) {
          PipelineSchedule schedule;
          try {
            schedule = make_pipeline_schedule(kind, p, m, v);
          } catch (const std::runtime_error&) {
            continue;  // a layout this schedule does not take
          }
          layouts++;
          const std::string name = schedule_name(kind) + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                                   " v=" + std::to_string(v);
          const ScheduleGrid grid = parse_pytorch_csv(pytorch_csv_text(schedule));
          ASSERT_EQ(grid.stages.size(), size_t(p)) << name;
          for (int s = 0; s < p; s++) EXPECT_EQ(grid.stages[s], compute_actions(schedule.stages[s])) << name;
          // The same virtual stage for every (stage, chunk): for p = 1 the ring and the v coincide.
          const PipelineSchedule again = schedule_from_grid(grid, p, m);
          ASSERT_EQ(again.placement.v, schedule.placement.v) << name;
          for (int s = 0; s < p; s++)
            for (int c = 0; c < schedule.placement.v; c++)
              EXPECT_EQ(again.placement.virtual_stage(s, c), schedule.placement.virtual_stage(s, c)) << name;
        }
    EXPECT_GT(layouts, 0) << schedule_name(kind);
  }
}

// PyTorch's text: the virtual stage first, then F, B, I or W and the microbatch; a row per rank,
// each ended as Python's csv.writer ends it.
TEST(PytorchCsv, WritesPyTorchsText) {
  EXPECT_EQ(pytorch_csv_text(make_pipeline_schedule(ScheduleKind::one_f_one_b, 2, 3, 1)),
            "0F0,0F1,0B0,0F2,0B1,0B2\r\n"
            "1F0,1B0,1F1,1B1,1F2,1B2\r\n");
  // zb-v on 2 stages: stage 0 holds virtual stages 0 and 3, stage 1 holds 1 and 2.
  const std::string zb_v = pytorch_csv_text(make_pipeline_schedule(ScheduleKind::zb_v, 2, 1, 2));
  EXPECT_EQ(zb_v, "0F0,3F0,3I0,3W0,0I0,0W0\r\n1F0,2F0,2I0,2W0,1I0,1W0\r\n");
  EXPECT_EQ(parse_pytorch_csv(zb_v).placement, PlacementKind::v_shape);
}

// As PyTorch writes an interleaved (ring, v = 2) schedule: an empty cell for an idle slot, rows of
// different lengths, "\r\n"; and a V with an overlapped pair, read as our pair (F1&B0.1).
TEST(PytorchCsv, ReadsIdleCellsAndOverlappedPairsAsOurGrid) {
  const ScheduleGrid ring = parse_pytorch_csv("0F0,0F1,2F0,2F1,2B0,2B1,0B0,0B1\r\n,1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1\r\n");
  const ScheduleGrid ours = parse_schedule_grid("stage 0 | F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1\n"
                                                "stage 1 | F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1\n");
  EXPECT_EQ(ring.placement, PlacementKind::ring);
  EXPECT_EQ(ring.stages, ours.stages);
  EXPECT_EQ(schedule_from_grid(ring, 2, 2).placement.v, 2);

  const ScheduleGrid pair = parse_pytorch_csv("0F0,3F0,(0F1;3B0)OVERLAP_F_B,3F1,3B1,0B0,0B1\n"
                                              "1F0,2F0,1F1,2B0,2F1,2B1,1B0,1B1\n");
  const ScheduleGrid pair_ours = parse_schedule_grid("placement v\n"
                                                     "stage 0 | F0 F0.1 F1&B0.1 F1.1 B1.1 B0 B1\n"
                                                     "stage 1 | F0 F0.1 F1 B0.1 F1.1 B1.1 B0 B1\n");
  EXPECT_EQ(pair.placement, PlacementKind::v_shape);
  EXPECT_EQ(pair.stages, pair_ours.stages);
  EXPECT_EQ(schedule_from_grid(pair, 2, 2).placement.kind, PlacementKind::v_shape);
  EXPECT_TRUE(pair.stages[0][3].overlapped);
}

// Our pairs are written as PyTorch's, the forward first, and read back (the round trip on every
// built-in schedule above includes dualpipev's pairs).
TEST(PytorchCsv, WritesOverlappedPairs) {
  const std::string csv = pytorch_csv_text(make_pipeline_schedule(ScheduleKind::dual_pipe_v, 2, 4, 2));
  EXPECT_EQ(csv.substr(0, csv.find('\r')), "0F0,0F1,0F2,3F0,3I0,3W0,3F1,(0F3;3B1)OVERLAP_F_B,(3F2;0B0)OVERLAP_F_B,3B2,"
                                           "(3F3;0B1)OVERLAP_F_B,3B3,0I2,0W2,0I3,0W3");
}

// Our grid's first line (after blanks and comments) is "placement" or "stage"; anything else is
// read as PyTorch's CSV, whose errors then say what a PyTorch action looks like.
TEST(PytorchCsv, TellsTheFormatByTheContent) {
  EXPECT_FALSE(is_pytorch_csv("# edited\n\nplacement v\nstage 0 | F0 F0.1 B0.1 B0\n"));
  EXPECT_FALSE(is_pytorch_csv("stage 0 | F0 B0\n"));
  EXPECT_FALSE(is_pytorch_csv("# nothing\n"));
  EXPECT_TRUE(is_pytorch_csv("0F0,0B0\r\n"));
  EXPECT_TRUE(is_pytorch_csv(",1F0,1B0\n"));
}

TEST(PytorchCsv, MalformedFilesNameTheRowAndColumn) {
  EXPECT_EQ(csv_error("0F0,0X1\n"),
            "row 1 column 2: '0X1' is not a PyTorch compute action [stage][F|B|I|W][microbatch], e.g. 2F0");
  EXPECT_EQ(csv_error("0F0,0B0\n1F0,1B0x\n"),
            "row 2 column 2: '1B0x' is not a PyTorch compute action [stage][F|B|I|W][microbatch], e.g. 2F0");
  EXPECT_EQ(csv_error("0F0,0SEND_F0,0B0\n"),
            "row 1 column 2: '0SEND_F0' is PyTorch's SEND_F: the compute-only CSV lists F, B, I and W (the transfers "
            "are added here)");
  EXPECT_EQ(csv_error("0F0,,0B\n"), "row 1 column 3: '0B' has no microbatch index (e.g. 0B0)");
  EXPECT_EQ(csv_error("0F0,0B0\n0F1\n"),
            "row 2 column 1: '0F1' runs stage 0 on rank 1, which fits neither placement with the actions before it: "
            "the ring puts stages 1, 3, 5, ... on rank 1, the v stages 1 and 2");
  EXPECT_EQ(csv_error("0F0,2F0,3F0\n1F0\n"),
            "row 1 column 3: '3F0' runs stage 3 on rank 0, which fits neither placement with the actions before it: "
            "the ring puts stages 0, 2, 4, ... on rank 0, the v stages 0 and 3");
  EXPECT_EQ(csv_error("0F0,4F0\n1F0\n"),
            "row 1 column 2: '4F0': stage 4 is out of range: no action runs stage 2, so the stages are 0 to 1");
  EXPECT_EQ(csv_error("0F0,0F1234567\n"), "row 1 column 2: '0F1234567': the microbatch index is out of range");
  EXPECT_EQ(csv_error("0F0\n\n1F0\n"),
            "row 2 column 1: no action: each row lists one rank's compute actions, one row per rank in rank order");
  EXPECT_EQ(csv_error(",,\n"),
            "row 1 column 1: no action: each row lists one rank's compute actions, one row per rank in rank order");
  EXPECT_EQ(csv_error("0F0,(0F1;0B0)OVERLAP\n"),
            "row 1 column 2: '(0F1;0B0)OVERLAP' is not an overlapped pair (aFx;bBy)OVERLAP_F_B");
  // Malformed pairs: two forwards, the same chunk twice, three actions, a pair on the ring.
  EXPECT_EQ(csv_error("0F0,3F0,(0F1;3F1)OVERLAP_F_B\n1F0,2F0\n"),
            "row 1 column 3: 'F1&F1.1' is not a forward then a B or I (F3&B1.1)");
  EXPECT_EQ(csv_error("0F0,3F0,(3F1;3B0)OVERLAP_F_B\n1F0,2F0\n"),
            "row 1 column 3: 'F1.1&B0.1' runs chunk 1 twice: a pair is one chunk's forward with the other's backward");
  EXPECT_EQ(csv_error("0F0,(0F1;1B0;0B0)OVERLAP_F_B\n"),
            "row 1 column 2: '(0F1;1B0;0B0)OVERLAP_F_B' is not a pair of two actions (aFx;bBy)OVERLAP_F_B");
  EXPECT_EQ(csv_error("0F0,0F1,(2F0;0B0)OVERLAP_F_B\n1F0,3F0\n"),
            "row 1 column 3: 'F0.1&B0' pairs two computes, but only a v placement overlaps them (placement v, DualPipeV)");
}
