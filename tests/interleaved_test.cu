// The interleaved schedule with flexible microbatch groups (pipeline/interleaved.h): its order is
// Megatron-Core's for every valid (p, v, m, N) with p in 2..4, v in 2..3, m up to 12, against a
// transcription of Megatron's own code; N = p with m a multiple of p is the classic depth-first
// order; each chunk runs its microbatches in order (what bitwise equality with one process
// needs); every valid layout runs without deadlock in the simulators; Megatron's constraints are
// refused with one line saying what to change. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/interleaved.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"
#include "tests/error_message.h"

namespace {

std::string compute_text(const StageSchedule& steps) {
  StageSchedule compute;
  for (const Action& a : compute_actions(steps)) compute.push_back({a});
  return to_text(compute);
}

// Megatron's two checks (forward_backward_pipelining_with_interleaving): N in [PP, M], and the
// remainder of M divided by N 0 or at least PP.
bool megatron_accepts(int p, int m, int group) { return group >= p && group <= m && !(m % group > 0 && m % group < p); }

// A transcription of Megatron-LM's megatron/core/pipeline_parallel/schedules.py (NVIDIA/Megatron-LM,
// commit 00611e6): get_schedule_table, get_pp_rank_microbatches' warm-up count, and the order of
// forward_backward_pipelining_with_interleaving's three loops (warm-up forwards; per remaining
// step one forward, virtual microbatch k + warm-up, and one backward, k; the cool-down backwards),
// each forward on get_model_chunk_id(k, forward=True) and microbatch_id_table[k], each backward on
// get_model_chunk_id(k, forward=False) = v - 1 - the table's chunk, and on the oldest input of
// that chunk not yet backpropagated (input_tensors[chunk].pop(0)): Megatron's backward keeps no
// microbatch id, its per-chunk FIFO decides.
std::vector<Action> megatron_order(int p, int rank, int m, int v, int group) {
  std::vector<std::pair<int, int>> schedule_table;  // (microbatch_id, model_chunk_id)
  for (int min_microbatch_id_in_group = 0; min_microbatch_id_in_group < m; min_microbatch_id_in_group += group) {
    const int end = min_microbatch_id_in_group + group >= m ? m : min_microbatch_id_in_group + group;
    for (int model_chunk_id = 0; model_chunk_id < v; model_chunk_id++)
      for (int microbatch_id = min_microbatch_id_in_group; microbatch_id < end; microbatch_id++)
        schedule_table.push_back({microbatch_id, model_chunk_id});
  }
  const int total = m * v;
  int warmup = (p - rank - 1) * 2 + (v - 1) * group;
  if (warmup >= total) warmup = total;
  std::vector<std::deque<int>> input_tensors(v);
  std::vector<Action> order;
  auto forward = [&](int k) {
    const auto [microbatch, chunk] = schedule_table[k];
    input_tensors[chunk].push_back(microbatch);
    order.push_back({ActionKind::forward, microbatch, chunk});
  };
  auto backward = [&](int k) {
    const int chunk = v - schedule_table[k].second - 1;
    order.push_back({ActionKind::backward, input_tensors[chunk].front(), chunk});
    input_tensors[chunk].pop_front();
  };
  for (int k = 0; k < warmup; k++) forward(k);
  for (int k = 0; k < total - warmup; k++) {
    forward(k + warmup);
    backward(k);
  }
  for (int k = total - warmup; k < total; k++) backward(k);
  return order;
}

struct Layout {
  int p, v, m, group;
};

// Every (p, v, m, N) Megatron accepts with p in 2..4, v in 2..3, m up to 12.
std::vector<Layout> megatron_layouts() {
  std::vector<Layout> layouts;
  for (int p = 2; p <= 4; p++)
    for (int v = 2; v <= 3; v++)
      for (int m = 1; m <= 12; m++)
        for (int group = 1; group <= m; group++)
          if (megatron_accepts(p, m, group)) layouts.push_back({p, v, m, group});
  return layouts;
}

std::string describe(const Layout& l) {
  return "p " + std::to_string(l.p) + " v " + std::to_string(l.v) + " m " + std::to_string(l.m) + " N " +
         std::to_string(l.group);
}

}  // namespace

TEST(Interleaved, IsMegatronsOrderForEveryGroupMegatronAccepts) {
  const std::vector<Layout> layouts = megatron_layouts();
  EXPECT_EQ(layouts.size(), 194u);  // so that a change of megatron_accepts cannot empty the sweep unseen
  for (const Layout& l : layouts)
    for (int stage = 0; stage < l.p; stage++)
      EXPECT_EQ(interleaved_order(l.p, l.m, l.v, stage, l.group), megatron_order(l.p, stage, l.m, l.v, l.group))
          << describe(l) << " stage " << stage;
}

TEST(Interleaved, RefusesEveryGroupMegatronRefuses) {
  for (int p = 2; p <= 4; p++)
    for (int m = p; m <= 12; m++)
      for (int group = 1; group <= m + 1; group++)
        if (!megatron_accepts(p, m, group)) {
          EXPECT_NE(error_of([&] { interleaved_order(p, m, 2, 0, group); }), "(no error)")
              << "p " << p << " m " << m << " N " << group;
        }
}

// The default N = p with m a multiple of p: microbatch (k / pv) p + k mod p on chunk (k mod pv) / p,
// the order before microbatch groups existed; m = p included, where Megatron-Core now warms up by
// 2 (p - s - 1) + (v - 1) p like any m (older Megatron ran every forward first there).
TEST(Interleaved, GroupOfPIsTheDepthFirstOrder) {
  EXPECT_EQ(compute_text(make_schedule(ScheduleKind::interleaved, 2, 2, 2, 1)), "F0 F1 F0.1 B0.1 F1.1 B1.1 B0 B1");
  for (int p = 1; p <= 4; p++)
    for (int v = 2; v <= 3; v++)
      for (int m = p; m <= 4 * p; m += p)
        for (int stage = 0; stage < p; stage++) {
          const std::vector<Action> order = interleaved_order(p, m, v, stage);
          EXPECT_EQ(order, interleaved_order(p, m, v, stage, p));
          int forwards = 0, backwards = 0;
          for (const Action& a : order) {
            const int k = a.kind == ActionKind::forward ? forwards++ : backwards++;
            const int chunk = k % (p * v) / p;
            const int expected_chunk = a.kind == ActionKind::forward ? chunk : v - 1 - chunk;
            EXPECT_EQ(a, (Action{a.kind, k / (p * v) * p + k % p, expected_chunk}))
                << "p " << p << " v " << v << " m " << m << " stage " << stage << " k " << k;
          }
        }
}

// p = 4, v = 2, m = 6, N = 6: one group, so every stage runs chunk 0 of all six microbatches, then
// chunk 1; warm-up 2 (3 - s) + 6.
TEST(Interleaved, OneGroupOfAllMicrobatches) {
  EXPECT_EQ(format_grid(make_all_schedules(ScheduleKind::interleaved, 4, 6, 2, 6)),
            "stage 0 | F0   F1   F2   F3   F4   F5   F0.1 F1.1 F2.1 F3.1 F4.1 F5.1 B0.1 B1.1 B2.1 B3.1 B4.1 B5.1 B0   "
            "B1   B2   B3   B4   B5\n"
            "stage 1 | F0   F1   F2   F3   F4   F5   F0.1 F1.1 F2.1 F3.1 F4.1 B0.1 F5.1 B1.1 B2.1 B3.1 B4.1 B5.1 B0   "
            "B1   B2   B3   B4   B5\n"
            "stage 2 | F0   F1   F2   F3   F4   F5   F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 F4.1 B2.1 F5.1 B3.1 B4.1 B5.1 B0   "
            "B1   B2   B3   B4   B5\n"
            "stage 3 | F0   F1   F2   F3   F4   F5   F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.1 B4.1 F5.1 B5.1 B0   "
            "B1   B2   B3   B4   B5\n");
  for (int stage = 0; stage < 4; stage++)
    EXPECT_EQ(interleaved_warmup(4, 6, 2, stage, 6), std::min(12, 2 * (3 - stage) + 6));
}

// Bitwise equality with one process needs each chunk's forwards and backwards in microbatch order
// (pipeline/schedule_file.h): true of every group, each microbatch and chunk once.
TEST(Interleaved, EveryChunkRunsItsMicrobatchesInOrder) {
  for (const Layout& l : megatron_layouts())
    for (int stage = 0; stage < l.p; stage++) {
      std::map<std::pair<ActionKind, int>, int> next;  // (kind, chunk) -> the microbatch expected next
      for (const Action& a : interleaved_order(l.p, l.m, l.v, stage, l.group)) {
        const int expected = next[std::pair(a.kind, a.chunk)]++;
        EXPECT_EQ(a.microbatch, expected) << describe(l) << " stage " << stage << ": " << to_text(a);
      }
      for (const auto& [key, count] : next) EXPECT_EQ(count, l.m) << describe(l);
      EXPECT_EQ(next.size(), size_t(2 * l.v)) << describe(l);
    }
}

// Receives posted after the previous compute of their direction (Megatron's overlap_p2p_comm)
// must not make any group wait for another in a cycle: every valid (p, v, m, N) with p up to 6
// and m up to 3p + 1, at several costs, one step at a time and with the transfer stream.
TEST(Interleaved, EveryGroupRunsWithoutDeadlock) {
  int layouts = 0;
  for (int p = 1; p <= 6; p++)
    for (int v = 2; v <= 3; v++)
      for (int m = p; m <= 3 * p + 1; m++)
        for (int group = p; group <= m; group++) {
          if (m % group > 0 && m % group < p) continue;
          const std::vector<StageSchedule> stages = make_all_schedules(ScheduleKind::interleaved, p, m, v, group);
          layouts++;
          for (const StepCosts& costs : {StepCosts{1, 1, 1, 0}, StepCosts{2, 1, 3, 0.5}}) {
            EXPECT_EQ(simulate(stages, costs).deadlock, "") << "p " << p << " v " << v << " m " << m << " N " << group;
            EXPECT_EQ(simulate_transfer_stream(stages, costs).deadlock, "")
                << "p " << p << " v " << v << " m " << m << " N " << group;
          }
        }
  EXPECT_EQ(layouts, 256);
}

TEST(Interleaved, ErrorsSayWhatToChange) {
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::interleaved, 4, 6, 2, 0); }),
            "--microbatches 6 leaves a last group of 2 after groups of --microbatch-group 4, fewer than --pp 4 (the "
            "pipeline would wait in dependency bubbles): use --microbatch-group 6, or --microbatches 4 or 8");
  EXPECT_EQ(error_of([] { make_all_schedules(ScheduleKind::interleaved, 4, 13, 2); }),
            "--microbatches 13 leaves a last group of 1 after groups of --microbatch-group 4, fewer than --pp 4 (the "
            "pipeline would wait in dependency bubbles): use --microbatch-group 13, or --microbatches 12 or 16");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::interleaved, 4, 2, 2, 0); }),
            "the interleaved schedule needs --microbatches at least --pp 4; got 2: use 4 or more");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::interleaved, 4, 6, 2, 0, 3); }),
            "--microbatch-group 3 must be in [--pp 4, --microbatches 6] (the microbatches each chunk runs in a row): "
            "use 4 to 6");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::interleaved, 4, 6, 2, 0, 7); }),
            "--microbatch-group 7 must be in [--pp 4, --microbatches 6] (the microbatches each chunk runs in a row): "
            "use 4 to 6");
  EXPECT_EQ(error_of([] { make_schedule(ScheduleKind::interleaved, 4, 4, 2, 0, 5); }),
            "--microbatch-group 5 must be in [--pp 4, --microbatches 4] (the microbatches each chunk runs in a row): "
            "use 4");
  EXPECT_EQ(error_of([] { make_all_schedules(ScheduleKind::one_f_one_b, 4, 8, 1, 4); }),
            "--microbatch-group 4 needs --schedule interleaved (1f1b has no microbatch groups)");
}
