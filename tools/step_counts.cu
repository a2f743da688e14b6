// Counts for a GPU reader (a program, not a test): what one training step asks of each stage's
// device, counted by the CPU build (cpu/runtime/call_counts.h) on replica 0's ranks. A line per stage:
//   stage S: launches L, host_waits H, nccl_calls N, bytes_sent B, allocations A1 A2 .., frees F1 F2 ..
// launches: kernels and cuBLAS calls; host_waits: calls that block the host until device work
// is done; nccl_calls: sends, receives and collectives; bytes_sent: what those calls hand to NCCL
// (a send's bytes, an all-reduce's input), all four of the last step, and under each stage's line
// its NCCL calls by kind, "  nccl: KIND N (B bytes), ..." (the kinds it made), and with --tp its
// tensor-parallel communicator's share of them, without sequence parallelism and with it, each
// from a run of its own whatever --sequence-parallel says: "  tp: all_reduce N (B bytes), with
// --sequence-parallel N calls (B bytes)" (all-gathers, reduce-scatters and all-reduces; "-" where
// tp does not divide --seq-len) (tp rank 0's; every tp rank of a stage makes the same calls:
// tests/cpu/mpi/tensor_parallel_counts_test.cu derives them by hand); allocations and frees:
// device and pinned ones of each step in turn (each synchronises the device on a GPU; the
// trainer makes them all before step 1). The model and pipeline come from ./train's flags
// (--layers, --heads, --dim, --seq-len, --vocab, --batch, --microbatches, --dp, --tp, --pp, --schedule,
// --virtual-stages, --recompute, --layers-per-stage, --dtype, --zero, --sequence-parallel); the
// tokens are random. It runs
// --steps steps (default 2).
// Usage: mpirun -np 4 build/cpu/tools/step_counts [flags] (make bench).
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "comm/rank_device.h"
#include "cpu/runtime/call_counts.h"
#include "model/config.h"
#include "model/parameters.h"
#include "pipeline/schedule.h"
#include "trainer/data/data.h"
#include "trainer/command_line/options.h"
#include "comm/host_exchange.h"
#include "trainer/step/trainer.h"

namespace {

// The counts of the last of `steps` steps on this rank: launches, host waits, NCCL calls, bytes;
// then each step's allocations, then each step's frees; then per NCCL kind its calls and bytes;
// then the tensor-parallel communicator's calls and bytes (0 and 0 at tp 1).
template <typename Element>
std::vector<double> count_last_step(const TrainOptions& options, const GPTConfig& config, const CommGroups& groups,
                                    int steps, bool sequence_parallel) {
  PipelineLayout layout{parse_schedule_kind(options.schedule), options.microbatches, options.virtual_stages,
                        options.recompute, options.layers_per_stage};
  layout.zero = options.zero == 1;
  layout.sequence_parallel = sequence_parallel;
  Trainer<Element> trainer = create_trainer<Element>(config, options.batch, options.seq_len, layout, groups, {});
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config, options.seed);
  upload_parameters(trainer, parameters);
  TokenDataset data;
  std::mt19937_64 generator(options.seed);
  const size_t tokens = size_t(options.batch) * options.seq_len * options.microbatches * groups.mesh.dp + 1;
  for (size_t i = 0; i < tokens; ++i) data.tokens.push_back(uint16_t(generator() % config.vocab_size));
  data.vocab_size = config.vocab_size;
  data.source = "random tokens";
  BatchReader reader = make_batch_reader(data, options.batch, options.seq_len, false, options.seed);
  const AdamWSettings settings{options.beta1, options.beta2, options.eps, options.weight_decay, options.grad_clip};
  cpu::CallCounts before, after;
  cpu::NcclCommCounts tp_before, tp_after;
  const bool tp = groups.mesh.tp > 1;
  std::vector<double> allocations, frees;
  for (int t = 1; t <= steps; ++t) {
    before = cpu::call_counts();
    if (tp) tp_before = cpu::nccl_comm_counts(groups.tensor_parallel);
    train_step(trainer, reader, settings, options.lr, t);
    after = cpu::call_counts();
    if (tp) tp_after = cpu::nccl_comm_counts(groups.tensor_parallel);
    allocations.push_back(double(after.allocations - before.allocations));
    frees.push_back(double(after.frees - before.frees));
  }
  destroy_trainer(trainer);
  std::vector<double> counts{double(after.launches - before.launches), double(after.host_waits - before.host_waits),
                             double(after.nccl_calls - before.nccl_calls), double(after.nccl_bytes - before.nccl_bytes)};
  counts.insert(counts.end(), allocations.begin(), allocations.end());
  counts.insert(counts.end(), frees.begin(), frees.end());
  for (int kind = 0; kind < int(cpu::NcclCall::kinds); ++kind) {
    counts.push_back(double(after.nccl_calls_of[kind] - before.nccl_calls_of[kind]));
    counts.push_back(double(after.nccl_bytes_of[kind] - before.nccl_bytes_of[kind]));
  }
  counts.push_back(double(tp_after.calls - tp_before.calls));
  counts.push_back(double(tp_after.bytes - tp_before.bytes));
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  if (!start_rank_on_own_device(&argc, &argv, "step_counts")) return 1;
  const World world = this_world();
  int status = 0;
  try {
    const TrainOptions options = parse_train_options(argc, argv);
    const int steps = options.given.count("steps") ? options.steps : 2;
    const GPTConfig config = make_gpt_config(options.layers, options.heads, options.dim, options.seq_len,
                                             options.vocab > 0 ? options.vocab : 256);
    CommGroups groups = create_world_groups(make_mesh(options.dp, options.tp, options.pp, world.size, world.rank));
    const auto count = [&](bool sequence_parallel) {
      return options.dtype == "bf16" ? count_last_step<__nv_bfloat16>(options, config, groups, steps, sequence_parallel)
                                     : count_last_step<float>(options, config, groups, steps, sequence_parallel);
    };
    std::vector<double> counts = count(options.sequence_parallel);
    const Mesh mesh = groups.mesh;
    // The tp column's two runs: the tp communicator's calls and bytes are counts' last two.
    const bool sequence_parallel_runs = mesh.tp > 1 && options.seq_len % mesh.tp == 0;
    const std::vector<double> other = sequence_parallel_runs ? count(!options.sequence_parallel) : counts;
    const std::vector<double> with(options.sequence_parallel ? counts.end() - 2 : other.end() - 2,
                                   options.sequence_parallel ? counts.end() : other.end());
    const std::vector<double> without(options.sequence_parallel ? other.end() - 2 : counts.end() - 2,
                                      options.sequence_parallel ? other.end() : counts.end());
    counts.insert(counts.end(), without.begin(), without.end());
    counts.insert(counts.end(), with.begin(), with.end());
    const size_t per_rank = counts.size();  // 4 + 2 steps + 2 kinds + 2 + 2 + 2, alike on every rank
    std::vector<double> all(per_rank * size_t(world.size));
    MPI_Gather(counts.data(), int(per_rank), MPI_DOUBLE, all.data(), int(per_rank), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (world.rank == 0)
      for (int stage = 0; stage < mesh.pp; ++stage) {
        const double* c = all.data() + per_rank * size_t(world_rank_of(mesh, 0, stage));
        std::string per_step[2];  // allocations, frees
        for (int kind = 0; kind < 2; ++kind)
          for (int t = 0; t < steps; ++t) per_step[kind] += " " + std::to_string(int64_t(c[4 + kind * steps + t]));
        std::printf("stage %d: launches %.0f, host_waits %.0f, nccl_calls %.0f, bytes_sent %.0f, allocations%s, frees%s\n",
                    stage, c[0], c[1], c[2], c[3], per_step[0].c_str(), per_step[1].c_str());
        std::string kinds;
        const double* by_kind = c + 4 + 2 * steps;
        for (int kind = 0; kind < int(cpu::NcclCall::kinds); ++kind)
          if (by_kind[2 * kind] > 0)
            kinds += std::string(kinds.empty() ? "" : ", ") + cpu::nccl_call_name(cpu::NcclCall(kind)) + " " +
                     std::to_string(int64_t(by_kind[2 * kind])) + " (" + std::to_string(int64_t(by_kind[2 * kind + 1])) +
                     " bytes)";
        std::printf("  nccl: %s\n", kinds.empty() ? "none" : kinds.c_str());
        const double* tp_without = by_kind + 2 * int(cpu::NcclCall::kinds) + 2;
        const double* tp_with = tp_without + 2;
        char with_text[64] = "-";
        if (sequence_parallel_runs)
          std::snprintf(with_text, sizeof(with_text), "%.0f calls (%.0f bytes)", tp_with[0], tp_with[1]);
        if (mesh.tp > 1)
          std::printf("  tp: all_reduce %.0f (%.0f bytes), with --sequence-parallel %s\n", tp_without[0],
                      tp_without[1], with_text);
      }
    destroy_world_groups(groups);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_counts: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
