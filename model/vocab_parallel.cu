// The vocabulary-parallel embedding and cross-entropy (model/vocab_parallel.h): the slice's
// kernels, with the tensor-parallel sums between them.
#include "model/vocab_parallel.h"

#include "comm/nccl_types.h"
#include "comm/tensor_parallel.h"
#include "kernels/embedding.cuh"
#include "kernels/vocab_parallel_embedding.cuh"

VocabularySlice vocabulary_slice(const Mesh& mesh, int padded_vocab) {
  const int columns = padded_vocab / mesh.tp;
  return {mesh.tp_rank * columns, columns};
}

template <typename Element>
void vocab_parallel_embedding_forward(const CommGroups& groups, Element* out, const int* tokens,
                                      const Element* wte_slice, const Element* wpe, int B, int T, int C,
                                      int padded_vocab, cudaStream_t stream) {
  const VocabularySlice slice = vocabulary_slice(groups.mesh, padded_vocab);
  const Element* positions = groups.mesh.tp_rank == 0 ? wpe : nullptr;  // added once over the tp ranks
  embedding_forward_rows(out, tokens, wte_slice, slice.first, slice.columns, positions, B, T, C, stream);
  allreduce_tensor_parallel(groups, out, size_t(B) * T * C, nccl_data_type<Element>(), ncclSum, stream);
}

template <typename Element>
void vocab_parallel_embedding_backward(const CommGroups& groups, Element* dwte_slice, Element* dwpe, int* workspace,
                                       const Element* dout, const int* tokens, int B, int T, int C, int padded_vocab,
                                       cudaStream_t stream) {
  const VocabularySlice slice = vocabulary_slice(groups.mesh, padded_vocab);
  embedding_backward_rows(dwte_slice, slice.first, slice.columns, dwpe, workspace, dout, tokens, B, T, C, stream);
}

template <typename Element>
void vocab_parallel_cross_entropy(const CommGroups& groups, Element* logits_slice, Compute<Element>* losses,
                                  Compute<Element>* row_stats, const int* targets, Compute<Element> dloss,
                                  int* bad_target_row, size_t BT, int V, int padded_vocab, cudaStream_t stream) {
  const VocabularySlice slice = vocabulary_slice(groups.mesh, padded_vocab);
  const ncclDataType_t type = nccl_data_type<Compute<Element>>();
  // The exponentials' sums and the target's logit side by side: their two sums are one call.
  Compute<Element>* row_max = row_stats;                // (BT)
  Compute<Element>* row_exp_sum = row_stats + BT;       // (BT)
  Compute<Element>* target_logit = row_stats + 2 * BT;  // (BT)
  vocab_slice_max_and_target(row_max, target_logit, logits_slice, targets, BT, slice, V, stream);
  allreduce_tensor_parallel(groups, row_max, BT, type, ncclMax, stream);
  vocab_slice_exp_sum(row_exp_sum, logits_slice, row_max, BT, slice, V, stream);
  allreduce_tensor_parallel(groups, row_exp_sum, 2 * BT, type, ncclSum, stream);
  vocab_slice_loss_and_gradient(logits_slice, losses, row_max, row_exp_sum, target_logit, targets, dloss,
                                bad_target_row, BT, slice, V, stream);
}

#define INSTANTIATE_VOCAB_PARALLEL(Element)                                                                        \
  template void vocab_parallel_embedding_forward<Element>(const CommGroups&, Element*, const int*, const Element*, \
                                                          const Element*, int, int, int, int, cudaStream_t);       \
  template void vocab_parallel_embedding_backward<Element>(const CommGroups&, Element*, Element*, int*,            \
                                                           const Element*, const int*, int, int, int, int,         \
                                                           cudaStream_t);                                          \
  template void vocab_parallel_cross_entropy<Element>(const CommGroups&, Element*, Compute<Element>*,              \
                                                      Compute<Element>*, const int*, Compute<Element>, int*,       \
                                                      size_t, int, int, cudaStream_t);
INSTANTIATE_VOCAB_PARALLEL(double)
INSTANTIATE_VOCAB_PARALLEL(float)
INSTANTIATE_VOCAB_PARALLEL(__nv_bfloat16)
