// PyTorch's schedule CSV (torch.distributed.pipelining's compute-only form, what its
// PipelineScheduleMulti._dump_csv writes and _load_csv reads), read into our compute grid and
// written from a schedule, so that a schedule moves between PyTorch and ./train both ways.
//
// The format: one row per rank, ranks in order; each cell one action in PyTorch's text
// [stage][type][microbatch], where the stage is the VIRTUAL stage (PyTorch's stage_index) and the
// type F (forward), B (full backward), I (input gradient) or W (parameter gradients): "0F3",
// "1I2", "2W1", "3B0". An empty cell is PyTorch's None (an idle slot) and is skipped; rows may
// differ in length, as PyTorch's do. Rows end with "\r\n" (Python's csv.writer); "\n" reads too.
// The communication types (SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD) belong
// to PyTorch's compute_comms form and are refused: our lowering adds the transfers.
//
// Overlapped pairs: "(0F7;7B3)OVERLAP_F_B" runs a forward and a backward together (DualPipeV):
// read as our pair "F7&B3.1" (pipeline/action.h; the second action overlapped), and each of our
// pairs written so. A pair that is not one forward and one B or I on two chunks of a v placement
// is refused with its row and column.
//
// The placement is found from where the virtual stages sit: rank r holding stages r, r + p,
// r + 2p, ... is the ring (chunk c is stage c p + r), rank r holding stages r and 2p - 1 - r is
// the v (pipeline/schedule.h); when both fit (one chunk, or p = 1, where they coincide) the ring.
#pragma once
#include <string>

#include "pipeline/schedule_file.h"

// Whether a --schedule-file's text is PyTorch's CSV: its first line that is not blank or a '#'
// comment begins with neither "placement" nor "stage" (our grid's two kinds of line).
bool is_pytorch_csv(const std::string& text);

// The compute grid of PyTorch's compute-only CSV, for schedule_from_grid to check and lower.
// Throws std::runtime_error with one line "row R column C: ..." (1-based) naming what is wrong:
// an action text PyTorch does not write, a communication action, a stage index outside the
// stages the file runs, a stage on a rank where neither placement puts it, an empty row.
ScheduleGrid parse_pytorch_csv(const std::string& text);

// The schedule's compute actions as PyTorch's compute-only CSV: one row per stage, actions in
// order, no idle cells (our grid has no time slots), each row ended by "\r\n".
std::string pytorch_csv_text(const PipelineSchedule& schedule);
