// The memory plan in the train program (trainer/program/memory_report.h).
#include "trainer/program/memory_report.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "comm/host_exchange.h"
#include "kernels/cuda_check.cuh"
#include "kernels/fused_attention.cuh"
#include "trainer/checkpoints/save_and_resume.h"

namespace {

bool is_bf16(const TrainOptions& options) { return options.dtype == "bf16"; }

std::string pad(std::string text, size_t width) {
  if (text.size() < width) text.insert(0, width - text.size(), ' ');
  return text;
}

std::string ranks_of_stage(const Mesh& mesh, int stage) {
  std::string ranks;
  for (int replica = 0; replica < mesh.dp; ++replica)
    for (int tp_rank = 0; tp_rank < mesh.tp; ++tp_rank)
      ranks += (ranks.empty() ? "" : ",") + std::to_string(world_rank_of(mesh, replica, stage, tp_rank));
  return ranks;
}

std::string options_text(const PlannedRun& run) {
  const TrainOptions& o = run.options;
  const Placement placement = layout_schedule(run.layout, run.mesh.pp).placement;
  return "L=" + std::to_string(run.config.num_layers) + " C=" + std::to_string(run.config.channels) +
         " Vp=" + std::to_string(run.config.padded_vocab_size) + ", B=" + std::to_string(run.B) +
         " T=" + std::to_string(run.T) + " m=" + std::to_string(o.microbatches) + ", dp=" + std::to_string(run.mesh.dp) +
         (run.mesh.tp == 1 ? "" : " x tp=" + std::to_string(run.mesh.tp)) + " x pp=" + std::to_string(run.mesh.pp) + ", " +
         (o.schedule_file.empty() ? o.schedule : "--schedule-file " + o.schedule_file) +
         " v=" + std::to_string(placement.v) + (o.recompute ? ", recompute" : "") +
         (run.layout.attention == AttentionKind::fused ? ", fused attention" : "") + ", " + o.dtype +
         (is_bf16(o) && o.master_weights ? " with fp32 master weights" : "") +
         (o.zero == 1 && run.mesh.dp > 1 ? ", zero 1" : "");
}

// A change to the run's options, named as the user would type it. Of the changes of one family
// (smaller microbatches) only the first that fits is listed.
struct Change {
  std::string flags;
  std::function<void(TrainOptions&)> apply;
  std::string family = "";
};

// The changes the refusal tries, one at a time and then the two cheapest together: the fused
// attention (when the run asked for the materialised one), recompute, bf16, smaller microbatches
// with as many more of them (the same tokens per step), 1F1B instead of all-forward-all-backward,
// twice the stages (on twice the ranks); with pipedream recompute only with weight stashing.
std::vector<Change> changes_to_try(const PlannedRun& run) {
  const TrainOptions& o = run.options;
  std::vector<Change> changes;
  if (run.layout.attention == AttentionKind::materialized &&
      fused_attention_takes_heads(run.config.channels, run.config.num_heads))
    changes.push_back({"--attention fused", [](TrainOptions& t) { t.attention = "fused"; }});
  // Not --recompute where --schedule pipedream refuses it: without weight stashing (trainer/command_line/options.cpp).
  const bool recompute_refused = run.layout.pipedream.has_value() && !run.layout.pipedream->rule.weight_stashing;
  if (!o.recompute && !recompute_refused) changes.push_back({"--recompute", [](TrainOptions& t) { t.recompute = true; }});
  if (!is_bf16(o)) changes.push_back({"--dtype bf16", [](TrainOptions& t) { t.dtype = "bf16"; }});
  if (!o.recompute && !is_bf16(o) && !recompute_refused)
    changes.push_back({"--recompute --dtype bf16", [](TrainOptions& t) { t.recompute = true, t.dtype = "bf16"; }});
  for (int divisor = 2; divisor <= o.batch; divisor *= 2)
    if (o.batch % divisor == 0) {
      const int batch = o.batch / divisor, microbatches = o.microbatches * divisor;
      changes.push_back({"--batch " + std::to_string(batch) + " --microbatches " + std::to_string(microbatches),
                         [=](TrainOptions& t) { t.batch = batch, t.microbatches = microbatches; }, "batch"});
    }
  if (o.schedule == "afab" && o.schedule_file.empty())
    changes.push_back({"--schedule 1f1b", [](TrainOptions& t) { t.schedule = "1f1b"; }});
  const int pp = 2 * run.mesh.pp;
  changes.push_back({"--pp " + std::to_string(pp) + " (" + std::to_string(pp * run.mesh.dp) + " ranks)",
                     [pp](TrainOptions& t) { t.pp = pp; }});
  return changes;
}

// Each change's heaviest stage's peak, where its layout is one the trainer runs.
std::string changes_that_fit(const PlannedRun& run, uint64_t limit) {
  std::string fit, other, families_fit;
  for (const Change& change : changes_to_try(run)) {
    if (!change.family.empty() && families_fit.find(change.family) != std::string::npos) continue;
    TrainOptions options = run.options;
    change.apply(options);
    uint64_t peak = 0;
    try {
      const PlannedRun changed = planned_run(
          options, std::max(options.pp * options.dp, run.mesh.world_size), run.config);
      const std::vector<StageMemoryPlan> plans = plan_run_memory(changed);
      peak = plans[heaviest_stage(plans)].peak_bytes;
    } catch (const std::runtime_error&) {
      continue;  // a layout the trainer would refuse for another reason
    }
    if (peak <= limit) families_fit += change.family + " ";
    std::string& list = peak <= limit ? fit : other;
    list += (list.empty() ? "" : "; ") + change.flags + ": " + format_bytes(peak);
  }
  if (!fit.empty()) return "would fit (the heaviest stage's plan): " + fit;
  return "no single change fits; the heaviest stage's plan with " + other;
}

}  // namespace

PlannedRun planned_run(const TrainOptions& options, int world_size) {
  return planned_run(options, world_size, starting_config(options));
}

PlannedRun planned_run(const TrainOptions& options, int world_size, const GPTConfig& config) {
  PlannedRun run{options, config, options.batch, 0, {}, layout_from_options(options, config)};
  run.T = sequence_length(options, run.config);
  run.mesh = make_mesh(options.dp, options.tp, options.pp, world_size, 0);
  check_tensor_parallel_sizes(options.tp, config.num_heads, config.channels, config.padded_vocab_size);
  try {
    check_layout(run.config, run.mesh, run.layout);
  } catch (const std::runtime_error& error) {
    if (options.schedule_file.empty()) throw;
    throw std::runtime_error("--schedule-file " + options.schedule_file + ": " + error.what());
  }
  return run;
}

MemoryPlanInput run_memory_input(const PlannedRun& run) {
  const TrainOptions& o = run.options;
  return memory_plan_input(run.config, run.B, run.T, run.layout, run.mesh, is_bf16(o), {o.master_weights == 1, o.seed});
}

std::vector<StageMemoryPlan> plan_run_memory(const PlannedRun& run) { return plan_memory(run_memory_input(run)); }

std::string memory_table(const PlannedRun& run, const std::vector<StageMemoryPlan>& plans) {
  constexpr size_t kName = 30, kColumn = 13;
  std::string text = "memory plan: " + options_text(run) + "\n(device bytes each rank allocates, pipeline/memory_plan.h)\n\n";
  std::string row = std::string(kName, ' ');
  for (const StageMemoryPlan& plan : plans) row += pad("stage " + std::to_string(plan.stage), kColumn);
  text += row + "\n";
  row = "ranks";
  row.resize(kName, ' ');
  for (const StageMemoryPlan& plan : plans) row += pad(ranks_of_stage(run.mesh, plan.stage), kColumn);
  text += row + "\n";
  // Items in allocation order: one a stage lacks (the head's gradient) sits after the item before it.
  std::vector<std::string> names;
  for (const StageMemoryPlan& plan : plans) {
    auto after = names.begin();
    for (const MemoryItem& item : plan.device) {
      auto found = std::find(names.begin(), names.end(), item.name);
      if (found == names.end()) found = names.insert(after, item.name);
      after = found + 1;
    }
  }
  const auto add_row = [&](const std::string& name, const std::function<std::string(const StageMemoryPlan&)>& cell) {
    std::string line = name.substr(0, kName);
    line.resize(kName, ' ');
    for (const StageMemoryPlan& plan : plans) line += pad(cell(plan), kColumn);
    text += line + "\n";
  };
  for (const std::string& name : names)
    add_row(name, [&](const StageMemoryPlan& plan) {
      for (const MemoryItem& item : plan.device)
        if (item.name == name)
          return item.count > 1 ? std::to_string(item.count) + "x " + format_bytes(item.bytes_each)
                                : format_bytes(item.bytes);
      return std::string("-");
    });
  add_row("resident", [](const StageMemoryPlan& plan) { return format_bytes(plan.resident_bytes); });
  add_row("set-up's transient", [](const StageMemoryPlan& plan) { return format_bytes(plan.transient_bytes); });
  add_row("peak", [](const StageMemoryPlan& plan) { return format_bytes(plan.peak_bytes); });
  add_row("peak, bytes", [](const StageMemoryPlan& plan) { return std::to_string(plan.peak_bytes); });
  add_row("pinned host memory", [](const StageMemoryPlan& plan) { return format_bytes(plan.pinned_host_bytes); });
  text += "\n\"Nx S\": N buffers of S each. On a GPU add the CUDA context, cuBLAS's workspace and NCCL's\n"
          "buffers (docs/pipeline.md, \"The memory plan\"); each rank refuses to start when its plan is above\n"
          "its device's free memory less 1/32 of the device, or --memory-limit.\n";
  return text;
}

std::string planned_peaks_line(const std::vector<StageMemoryPlan>& plans) {
  std::string line = "memory plan: peak";
  for (const StageMemoryPlan& plan : plans)
    line += (plan.stage ? ", " : " ") + format_bytes(plan.peak_bytes) + " on stage " + std::to_string(plan.stage);
  return line + " (--print-memory for the items)";
}

DeviceBudget device_budget(const TrainOptions& options) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  DeviceBudget budget{free_bytes, total_bytes, total_bytes / 32, 0};
  budget.usable = free_bytes > budget.margin ? free_bytes - budget.margin : 0;
  if (options.memory_limit > 0) budget.usable = std::min<uint64_t>(budget.usable, options.memory_limit);
  return budget;
}

uint64_t usable_device_bytes(const TrainOptions& options) { return device_budget(options).usable; }

std::string device_budget_line(const DeviceBudget& budget, const TrainOptions& options) {
  return "device memory: " + format_bytes(budget.usable) + " usable (" + format_bytes(budget.free_bytes) +
         " free of " + format_bytes(budget.total_bytes) + ", less a margin of " + format_bytes(budget.margin) +
         (options.memory_limit > 0 ? "; --memory-limit " + format_bytes(options.memory_limit) : "") + ")";
}

std::string device_use_line(const StageMemoryPlan& plan) {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const uint64_t used = total_bytes - free_bytes;
  const uint64_t other = used > plan.resident_bytes ? used - plan.resident_bytes : 0;
  return "device memory after set-up on rank 0: " + format_bytes(used) + " in use, " +
         format_bytes(plan.resident_bytes) + " of them the plan's, " + format_bytes(other) +
         " the CUDA context's, NCCL's, the driver's rounding and other processes'";
}

void check_memory_fits(const PlannedRun& run, uint64_t usable_bytes) {
  const World world = this_world();
  // Every rank's usable bytes on every rank (a sum of one non-zero entry each: exact in a double
  // below 2^53 bytes, 8 PiB).
  std::vector<double> limits(world.size, 0.0);
  limits[world.rank] = double(usable_bytes);
  if (world.size > 1) sum_over_world(world, limits.data(), limits.size());
  const std::vector<StageMemoryPlan> plans = plan_run_memory(run);
  for (int rank = 0; rank < world.size; ++rank) {
    const StageMemoryPlan& plan = plans[rank / run.mesh.tp % run.mesh.pp];  // comm/mesh.h's pp_rank
    const uint64_t limit = uint64_t(limits[rank]);
    if (plan.peak_bytes <= limit) continue;
    // The items of at least 1% of the peak; the rest as one.
    std::string items;
    uint64_t small = 0, small_count = 0;
    for (const MemoryItem& item : plan.device) {
      if (item.bytes * 100 < plan.peak_bytes) {
        small += item.bytes, ++small_count;
        continue;
      }
      items += (items.empty() ? "" : ", ") + item.name + " " +
               (item.count > 1 ? std::to_string(item.count) + " x " + format_bytes(item.bytes_each)
                               : format_bytes(item.bytes));
    }
    if (small_count > 0) items += ", " + std::to_string(small_count) + " smaller items " + format_bytes(small);
    throw std::runtime_error(
        "rank " + std::to_string(rank) + " (stage " + std::to_string(plan.stage) + ") plans " +
        format_bytes(plan.peak_bytes) + " of device memory, above the " + format_bytes(limit) + " it may use (" +
        (run.options.memory_limit > 0 && limit == run.options.memory_limit ? "--memory-limit"
                                                                            : "free memory less 1/32 of the device") +
        "): nothing was allocated\n  its items: " + items + "\n  " + changes_that_fit(run, limit));
  }
}
