// The layout advisor (./train --plan-layouts): every layout of a world's ranks for the model and
// global batch of the options (schedule, pp x dp x tp, chunks per stage, microbatches, recompute,
// dtype), kept when its heaviest stage's memory plan (pipeline/memory_plan.h) fits a limit, ranked
// by the simulator's predicted step time (pipeline/simulate.h), with the command line of the best.
//
// The costs of the simulator's actions come from a FLOP count of each chunk on a tp rank
// (chunk_flops) times a time per FLOP: one unit per GFLOP by default, or measured in a --trace run
// (measured_cost_rates); with tp > 1 plus the tp all-reduces the action waits for
// (chunk_all_reduces), each a latency and its ring's bytes times a time per byte. Without that
// cost the advisor would always pick the largest tp, whose FLOPs per rank are the fewest. Each
// layout of tp > 1 comes with --sequence-parallel and without (where the trainer takes it): its
// plan holds a tp-th of the residual stream's activations, its collectives send more in the
// backward (chunk_sequence_parallel_collectives), so it ranks ahead only where tp alone does not fit.
// What the prediction leaves out: the data-parallel all-reduce and the optimizer step (each rank's
// share of them shrinks with pp; docs/pipeline.md, "Choosing a layout").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gpt.cuh"
#include "pipeline/simulate.h"
#include "trainer/command_line/options.h"

// Time per FLOP of each kind of action, and a message's latency, in `unit`.
struct CostRates {
  double forward, backward_input, backward_weight;  // per FLOP; a fused B takes I's and W's
  double latency;
  std::string unit;  // "Gflop" (the FLOP model's time: 1 per 10^9 FLOP) or "ms" (measured)
  // Per byte a tp rank sends in a tp all-reduce (a ring sends 2 (tp - 1) / tp of its buffer): the
  // time of kFlopsPerAllReduceByte forward FLOPs (see there); each all-reduce also costs `latency`.
  double tp_byte;
};

// What a byte of a tp all-reduce costs, in FLOPs' time: about an A100's ratio of its bf16 matmul
// throughput (312 TFLOP/s dense) to its NVLink bandwidth each way (300 GB/s), the machine
// Megatron's tp runs on. A stated model, not a measurement (the CPU build's all-reduces are MPI
// copies and say nothing of NVLink); a machine with slower links pays more per byte.
inline constexpr double kFlopsPerAllReduceByte = 1000;

// One unit per 10^9 FLOP of every kind, no latency; a tp all-reduce's byte as 1000 FLOPs.
CostRates flop_cost_rates();

// The rates of a `--trace FILE` run's measured step (trainer/program/measured_timeline.h) of the
// model config with B x T microbatches: each kind's summed durations over its FLOPs in the trace
// (every replica runs every microbatch through the whole model once per kind, so the split does
// not matter), and the shortest measured transfer as the latency. Throws std::runtime_error with
// one line for a text that is not such a trace.
CostRates measured_cost_rates(const std::string& trace_json, const GPTConfig& config, int B, int T);

// The FLOPs of one microbatch (B sequences of T tokens) through the chunk's blocks and, where it
// has them, the head: the matmuls (24 B T C^2 per block forward, 2 B T C Vp for the logits) and
// attention's two batched products (4 B T^2 C per block, llm.c's full T x T); the embedding's
// look-up, the LayerNorms and GELU count nothing. The backward's two halves: I takes each matmul's
// input gradient and attention's backward (twice its forward), W the weight gradients; together
// about twice the forward. With recompute, I also runs the chunk's forward again. On a rank of tp
// tensor-parallel ranks every one of these is a tp-th (its heads, hidden columns and vocabulary
// columns).
struct ChunkFlops {
  double forward, backward_input, backward_weight;
};
ChunkFlops chunk_flops(const GPTConfig& config, int B, int T, const LayerRange& chunk, bool recompute, int tp = 1);

// The tp all-reduces one microbatch through the chunk makes on a rank (none at tp 1), as
// tools/step_counts counts them (docs/pipeline.md, "The tensor-parallel column"): the forward 2
// per block of B T C elements, 1 more for the embedding, and for the head the loss's 2 of B T and
// 2 B T fp32 values; I 2 per block and 1 for the head, of B T C (with recompute also the
// forward's); W none. Bytes: the buffers handed to NCCL, element_bytes per element.
struct ChunkAllReduces {
  double forward_calls, forward_bytes, input_calls, input_bytes;
};
ChunkAllReduces chunk_all_reduces(const GPTConfig& config, int B, int T, const LayerRange& chunk, bool recompute,
                                  int tp, int element_bytes);
// The same with --sequence-parallel (tp > 1; model/gpt_sequence_parallel.cu), as step_counts
// counts them (docs/pipeline.md, "With sequence parallelism"): the forward per block 2 all-gathers
// and 2 reduce-scatters, the embedding 1 reduce-scatter, the head 1 all-gather and the loss's 2;
// I per block 4 all-gathers, 2 reduce-scatters and the LayerNorms' all-reduce of 4 C, the head 1
// all-gather, 1 reduce-scatter and lnf's 2 C, the embedding 1 all-gather (with recompute also the
// forward's); W none. A ring all-gather or reduce-scatter of a B T C buffer sends (tp - 1) / tp of
// it, what an all-reduce of half of it sends: each counts as an all-reduce of B T C / 2 bytes.
ChunkAllReduces chunk_sequence_parallel_collectives(const GPTConfig& config, int B, int T, const LayerRange& chunk,
                                                    bool recompute, int tp, int element_bytes);

// One layout the trainer runs, with its prediction and plan.
struct RankedLayout {
  TrainOptions options;  // the user's, with the layout's --pp, --dp, --tp, --schedule, --virtual-stages,
                         // --microbatches, --recompute, --dtype and --sequence-parallel
  int pp, dp, tp, v;
  double step;    // the simulator's makespan, in the rates' unit
  double bubble;  // the stages' mean idle share
  uint64_t peak;  // the heaviest stage's planned peak (bytes)
  bool bf16_instead_of_fp32;  // the user's dtype is fp32: this layout changes the arithmetic
};

// Every layout of world ranks the trainer accepts, whatever its memory, best first: by step, then
// bubble, then the user's dtype before bf16, then peak. The global batch (options' microbatches x dp x batch sequences) is kept:
// microbatches = that / (batch x dp) for each dp that divides it.
std::vector<RankedLayout> all_layouts(const TrainOptions& options, int world, const CostRates& rates);

// Those of all_layouts whose peak is at most limit. Throws std::runtime_error with one line when
// none is, naming the smallest plan.
std::vector<RankedLayout> layouts_that_fit(const std::vector<RankedLayout>& layouts, int world, uint64_t limit);

// The table of at most rows layouts and the command line that runs the first. arguments: the
// program's own (argv[1..]), from which the flags of the model and the batch are kept.
std::string layouts_report(const std::vector<RankedLayout>& layouts, const std::vector<std::string>& arguments,
                           int world, uint64_t limit, const CostRates& rates, size_t rows = 20);

// ./train --plan-layouts: the report for --world (else world_size) ranks within --memory-limit
// (else this device's usable bytes: usable_device_bytes), with the costs of --costs FILE or FLOPs.
// Throws std::runtime_error with one line for an unreadable or malformed --costs file and when no
// layout fits.
std::string plan_layouts(const TrainOptions& options, const std::vector<std::string>& arguments, int world_size);

// The command line that runs layout on world ranks.
std::string layout_command(const RankedLayout& layout, const std::vector<std::string>& arguments, int world);
