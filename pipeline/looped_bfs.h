// Looped breadth-first (PyTorch's ScheduleLoopedBFS; Lamy-Poirier, "Breadth-First Pipeline
// Parallelism", 2022): v chunks per stage in the ring placement, as interleaved, but breadth first:
// each stage runs the forwards of every microbatch on its chunk 0, then on chunk 1, ..., then the
// backwards chunk by chunk in reverse. PyTorch runs each chunk's backwards from the last
// microbatch down; here they run in microbatch order, as in every schedule of ours, so that the
// gradients add in the same order and the step is bitwise the one-process step
// (pipeline/schedule_file.h). Like afab, every stage holds all m microbatches of every chunk at the
// turn; what it buys is the fewest switches between chunks (one per chunk and direction).
#pragma once

#include <vector>

#include "pipeline/action.h"

// Stage s's compute order: F0.0 .. F(m-1).0, F0.1 .. F(m-1).1, ..., then B0.(v-1) .. B(m-1).(v-1),
// ..., B0.0 .. B(m-1).0. Throws std::runtime_error with one line for p, m, stage or v < 1.
std::vector<Action> looped_bfs_order(int p, int m, int v, int stage);
