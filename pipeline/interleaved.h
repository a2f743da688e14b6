// Megatron's interleaved 1F1B over v chunks per stage, with its flexible grouping (Megatron-Core's
// microbatch_group_size_per_vp_stage, Llama 3 section 3.3.2): each chunk runs N consecutive
// microbatches before the stage moves on to its next chunk, for any m >= p. N = p (the default)
// and m a multiple of p is the classic depth-first order; a larger N holds more microbatches in
// flight and lets m be any count whose last group is not shorter than p (below). Each chunk's
// forwards and backwards still run in microbatch order, so every N gives bitwise the same step.
// N = p is lowered with Megatron's early receives (pipeline/schedule.h); a larger N in time order,
// as the zero-bubble schedules are, since early receives would deadlock there (schedule.cpp says why).
#pragma once

#include <vector>

#include "pipeline/action.h"

// The group size N the schedule runs: group, or p when group is 0 (not given).
int interleaved_group(int p, int group);

// Throws std::runtime_error with one line saying what to change unless m >= p, p <= N <= m and
// m mod N is 0 or at least p (a last group of fewer than p microbatches would leave chunk 0 of the
// next round waiting on the ring: Megatron's "dependency bubbles"). group 0 means p.
void check_interleaved(int p, int m, int v, int stage, int group = 0);

// The forwards stage s runs before its first backward: 2 (p - s - 1) + (v - 1) N, at most m v
// (Megatron-Core's get_pp_rank_microbatches).
int interleaved_warmup(int p, int m, int v, int stage, int group = 0);

// The stage's compute order. Its k-th forward runs the k-th (microbatch, chunk) of the table
// "for each group of N microbatches (the last taking what is left), for each chunk, for each of
// the group's microbatches" (Megatron-Core's get_schedule_table), its k-th backward the same
// entry on chunk v - 1 - c: interleaved_warmup forwards, then forward-backward pairs, then the
// remaining backwards.
std::vector<Action> interleaved_order(int p, int m, int v, int stage, int group = 0);
