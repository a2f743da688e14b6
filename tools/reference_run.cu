// A short training run whose numbers another implementation can check (tests/pytorch_check.py
// compares them with PyTorch): from an llm.c model file and a token file, our trainer's
// step 1 gradient, the losses of `steps` AdamW steps at a constant learning rate, and the
// parameters they leave.
//   [mpirun -np N] reference_run [--tp N] MODEL TOKENS OUTPUT B T MICROBATCHES STEPS LR BETA1 BETA2 EPS WEIGHT_DECAY GRAD_CLIP [DTYPE [ATTENTION]]
// DTYPE is fp32 (the default) or bf16: the trainer's element type, bf16 with fp32 master weights
// and stochastic rounding seeded with 1 (the model file's values are rounded to nearest bf16).
// ATTENTION is materialized (the default) or fused, as ./train's --attention.
// --tp N (under mpirun -np N): the model on N tensor-parallel ranks (one stage, one replica), whose
// slices world rank 0 gathers and writes (issue 33: the PyTorch check at tp = 2).
// fp32 GEMMs run in full fp32, not TF32 (./train's default): the trainer's cuBLAS handle keeps
// the default math mode, as ./train --no-tf32 sets it, because PyTorch's CPU matmul is full fp32
// and the comparison's tolerances are fp32's.
// TOKENS is an llm.c token shard (recognised by its magic) or plain little-endian int32 ids;
// microbatches are read from it sequentially, as ./train reads without --shuffle.
// OUTPUT (little-endian) holds, back to back:
//   float32 [num_parameters]  step 1's gradient in llm.c's layout, wte's two tied shares summed
//                             (bf16 gradients widened)
//   float64 [STEPS]           each step's loss (the mean over its microbatches, before its update)
//   float64 [STEPS]           each step's global gradient norm before clipping
//   float32 [num_parameters]  the parameters after the last step's update, in llm.c's layout (bf16:
//                             the fp32 master weights)
//
//   reference_run --variable-length MODEL MICROBATCHES OUTPUT
// One step of microbatches of different lengths with padding (issue 34), on the model itself (the
// pipeline does not take per-microbatch lengths yet), in fp32, buffers made once for the largest B
// and maxT. MICROBATCHES (little-endian int32) holds, per microbatch, B and T, then its B T input
// tokens and B T targets (-1, kIgnoredTarget: a padded position). OUTPUT holds float32
// [num_parameters] the step's gradient of the mean loss over its real targets (llm.c's layout,
// wte's two shares summed), then float64 that loss.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/host_exchange.h"
#include "comm/mesh.h"
#include "comm/rank_device.h"
#include "kernels/classifier.cuh"
#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "model/atomic_file.h"
#include "model/checkpoint_format.h"
#include "model/gpt.cuh"
#include "model/parameters.h"
#include "trainer/data/data.h"
#include "trainer/checkpoints/gather_model.h"
#include "trainer/step/trainer.h"

namespace {

// An llm.c shard through the trainer's loader, or every int32 of the file as one token id.
TokenDataset load_tokens(const std::string& path, int vocab_size) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error(path + ": cannot open");
  std::vector<int32_t> ids;
  int32_t id = 0;
  while (std::fread(&id, sizeof(id), 1, file) == 1) ids.push_back(id);
  std::fclose(file);
  if (!ids.empty() && ids[0] == kShardMagic) return load_token_shards(path, vocab_size);
  TokenDataset data;
  data.vocab_size = vocab_size;
  data.format = TokenFormat::llmc_shards;
  data.source = path;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size || ids[i] > UINT16_MAX) {
      throw std::runtime_error(path + ": token " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                               " is outside [0, " + std::to_string(vocab_size) + ")");
    }
    data.tokens.push_back(uint16_t(ids[i]));
  }
  return data;
}

// The run in Element, written to output by world rank 0.
// The model as one stage on the tp ranks of groups' mesh, 1F1B without recompute.
template <typename Element>
void run_and_write(const ModelFile& model, const TokenDataset& data, const std::string& output, int B, int T,
                   int microbatches, AttentionKind attention, int steps, double learning_rate,
                   const AdamWSettings& settings, const CommGroups& groups) {
  PipelineLayout layout{ScheduleKind::one_f_one_b, microbatches, 1, false, {}};
  layout.attention = attention;
  Trainer<Element> trainer = create_trainer<Element>(model.config, B, T, layout, groups, {true, 1});
  upload_parameters(trainer, model.parameters);
  BatchReader reader = make_batch_reader(data, B, T, false, 0);
  std::vector<float> step1_gradient;
  std::vector<double> losses, norms;
  for (int t = 1; t <= steps; ++t) {
    const StepResult result = train_step(trainer, reader, settings, learning_rate, t);
    losses.push_back(result.loss);
    norms.push_back(result.grad_norm);
    // The optimizer reads the gradient without changing it: after step 1 it is still step 1's.
    if (t == 1) step1_gradient = gather_gradients(trainer);
  }
  const std::vector<float> master = gather_master_weights(trainer);
  const std::vector<float> final_parameters = master.empty() ? gather_parameters(trainer) : master;
  destroy_trainer(trainer);
  if (groups.mesh.world_rank != 0) return;
  write_file_atomically(output, {{step1_gradient.data(), step1_gradient.size() * sizeof(float)},
                                 {losses.data(), losses.size() * sizeof(double)},
                                 {norms.data(), norms.size() * sizeof(double)},
                                 {final_parameters.data(), final_parameters.size() * sizeof(float)}});
}

// One microbatch of the --variable-length file: (B, T) inputs and targets.
struct PaddedMicrobatch {
  int B, T;
  std::vector<int32_t> tokens, targets;
};

std::vector<PaddedMicrobatch> read_microbatches(const std::string& path, const GPTConfig& config) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error(path + ": cannot open");
  std::vector<PaddedMicrobatch> all;
  int32_t shape[2];
  while (std::fread(shape, sizeof(int32_t), 2, file) == 2) {
    PaddedMicrobatch m{shape[0], shape[1], {}, {}};
    if (m.B < 1 || m.T < 1 || m.T > config.max_seq_len) {
      std::fclose(file);
      throw std::runtime_error(path + ": microbatch " + std::to_string(all.size()) + " has B " + std::to_string(m.B) +
                               ", T " + std::to_string(m.T) + " (maxT " + std::to_string(config.max_seq_len) + ")");
    }
    m.tokens.resize(size_t(m.B) * m.T);
    m.targets.resize(m.tokens.size());
    const bool read = std::fread(m.tokens.data(), sizeof(int32_t), m.tokens.size(), file) == m.tokens.size() &&
                      std::fread(m.targets.data(), sizeof(int32_t), m.targets.size(), file) == m.targets.size();
    if (!read) {
      std::fclose(file);
      throw std::runtime_error(path + ": microbatch " + std::to_string(all.size()) + " is cut short");
    }
    all.push_back(std::move(m));
  }
  std::fclose(file);
  if (all.empty()) throw std::runtime_error(path + ": no microbatch");
  return all;
}

template <typename X>
X* device_copy(const std::vector<X>& host) {
  X* device = static_cast<X*>(device_alloc_bytes(host.size() * sizeof(X)));
  CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(X), cudaMemcpyHostToDevice));
  return device;
}

// The step's forwards and backwards, each at its microbatch's (B, T), every loss scaled by
// 1 / the step's real targets.
void variable_length_step(const ModelFile& model, const std::vector<PaddedMicrobatch>& microbatches,
                          const std::string& output) {
  const GPTConfig& config = model.config;
  const LayerRange range = whole_model(config);
  int max_B = 0;
  size_t real = 0;
  for (const PaddedMicrobatch& m : microbatches) {
    max_B = std::max(max_B, m.B);
    for (const int32_t target : m.targets) real += target != kIgnoredTarget;
  }
  if (real == 0) throw std::runtime_error("no real target in the step: every position is padding");
  const double scale = 1.0 / double(real);
  cublasHandle_t cublas;
  CUBLAS_CHECK(cublasCreate(&cublas));
  float* params = device_copy(model.parameters);
  float* grads = device_copy(std::vector<float>(model.parameters.size(), 0.0f));
  float* grad_wte_head = device_copy(std::vector<float>(size_t(config.padded_vocab_size) * config.channels, 0.0f));
  Activations<float> acts = create_activations<float>(config, max_B, config.max_seq_len, range);
  BackwardScratch<float> scratch = create_backward_scratch<float>(config, max_B, config.max_seq_len, range);
  double loss = 0.0;
  for (const PaddedMicrobatch& m : microbatches) {
    int* tokens = device_copy(m.tokens);
    int* targets = device_copy(m.targets);
    gpt_forward(config, range, point_views(params, config), acts, tokens, nullptr, targets, scale, m.B, m.T, cublas,
                nullptr);
    const int bad_row = read_bad_target_row(acts.bad_target_row, nullptr);
    if (bad_row >= 0) throw std::runtime_error("a target outside the vocabulary in row " + std::to_string(bad_row));
    loss += loss_sum(acts, m.B, m.T, nullptr);
    gpt_backward(config, range, point_views(params, config), point_views(grads, config), grad_wte_head, acts,
                 scratch, tokens, nullptr, nullptr, nullptr, m.B, m.T, cublas, nullptr);
    device_free(tokens);
    device_free(targets);
  }
  loss *= scale;
  sum_tied_embedding_gradient(config, point_views(grads, config).wte, grad_wte_head, nullptr);
  std::vector<float> gradient(model.parameters.size());
  CUDA_CHECK(cudaMemcpy(gradient.data(), grads, gradient.size() * sizeof(float), cudaMemcpyDeviceToHost));
  destroy_backward_scratch(scratch);
  destroy_activations(acts);
  for (void* buffer : {static_cast<void*>(params), static_cast<void*>(grads), static_cast<void*>(grad_wte_head)})
    device_free(buffer);
  CUBLAS_CHECK(cublasDestroy(cublas));
  write_file_atomically(output, {{gradient.data(), gradient.size() * sizeof(float)}, {&loss, sizeof(loss)}});
}

// The trainer's groups for --tp: tp ranks, the world's size (a world of one without --tp).
CommGroups groups_of_tp_ranks(int tp, const GPTConfig& config) {
  if (tp == 1) return create_world_groups(make_mesh(1, 1, 1, 0));
  check_tensor_parallel_sizes(tp, config.num_heads, config.channels, config.padded_vocab_size);
  return create_world_groups(make_world_mesh(1, tp, 1));
}

int run(int argc, char** argv, int tp) {
  if (argc == 5 && std::string(argv[1]) == "--variable-length") {
    const ModelFile model = read_model_file(argv[2]);
    variable_length_step(model, read_microbatches(argv[3], model.config), argv[4]);
    return 0;
  }
  if (argc < 14 || argc > 16) {
    std::fprintf(stderr,
                 "usage: reference_run [--tp N] MODEL TOKENS OUTPUT B T MICROBATCHES STEPS LR BETA1 BETA2 EPS WEIGHT_DECAY "
                 "GRAD_CLIP [DTYPE [ATTENTION]]\n       reference_run --variable-length MODEL MICROBATCHES OUTPUT\n");
    return 2;
  }
  const ModelFile model = read_model_file(argv[1]);
  const TokenDataset data = load_tokens(argv[2], model.config.vocab_size);
  const std::string output = argv[3];
  const int B = std::stoi(argv[4]), T = std::stoi(argv[5]), microbatches = std::stoi(argv[6]);
  const int steps = std::stoi(argv[7]);
  if (steps < 1) throw std::runtime_error("STEPS " + std::to_string(steps) + " is below 1");
  const double learning_rate = std::stod(argv[8]);
  const AdamWSettings settings{std::stod(argv[9]), std::stod(argv[10]), std::stod(argv[11]), std::stod(argv[12]),
                               std::stod(argv[13])};
  const std::string dtype = argc >= 15 ? argv[14] : "fp32", attention_name = argc == 16 ? argv[15] : "materialized";
  if (attention_name != "materialized" && attention_name != "fused")
    throw std::runtime_error("ATTENTION " + attention_name + " is not materialized or fused");
  const AttentionKind attention = attention_name == "fused" ? AttentionKind::fused : AttentionKind::materialized;
  if (dtype != "fp32" && dtype != "bf16") throw std::runtime_error("DTYPE " + dtype + " is not fp32 or bf16");
  CommGroups groups = groups_of_tp_ranks(tp, model.config);
  if (dtype == "fp32")
    run_and_write<float>(model, data, output, B, T, microbatches, attention, steps, learning_rate, settings, groups);
  else
    run_and_write<__nv_bfloat16>(model, data, output, B, T, microbatches, attention, steps, learning_rate, settings,
                                 groups);
  destroy_world_groups(groups);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int tp = 1;
  try {
    if (argc > 2 && std::string(argv[1]) == "--tp") {
      tp = std::stoi(argv[2]);
      if (tp < 1) throw std::runtime_error("--tp " + std::string(argv[2]) + " is below 1");
      argv[2] = argv[0];  // the program's name, where run() and MPI_Init look for it
      argc -= 2;
      argv += 2;
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "reference_run: error: %s\n", error.what());
    return 1;
  }
  // Under mpirun only with --tp: the single process needs no MPI.
  if (tp > 1 && !start_rank_on_own_device(&argc, &argv, "reference_run")) return 1;
  int status = 1;
  try {
    status = run(argc, argv, tp);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "reference_run: error: %s\n", error.what());
  }
  if (tp > 1) MPI_Finalize();
  return status;
}
