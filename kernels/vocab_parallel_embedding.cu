// The vocabulary-parallel token embedding's forward (kernels/vocab_parallel_embedding.cuh):
// embedding_forward's gather (kernels/embedding.cu), with the rows outside the slice and the
// positions' row each replaced by zero where this rank does not hold them.
#include "kernels/vocab_parallel_embedding.cuh"

#include <cstdio>
#include <cstdlib>

#include "kernels/element.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int kMaxGridY = 65535;
// A block writes kRows rows, its threads consecutive channels (coalesced row segments).
constexpr int kThreads = 128;
constexpr int kRows = 8;

// Block (x, b) writes the rows (b, t) of the kRows positions t from x kRows.
template <typename Element>
__global__ void embedding_forward_rows_kernel(Element* out, const int* tokens, const Element* wte_rows,
                                              int first_token, int rows, const Element* wpe, int T, int C) {
  using Real = Compute<Element>;
  const int b = blockIdx.y, first = blockIdx.x * kRows;
  const int end = T - first < kRows ? T : first + kRows;
  for (int t = first; t < end; ++t) {
    const size_t position = size_t(b) * T + t;
    const int row = tokens[position] - first_token;
    const Element* token_row = unsigned(row) < unsigned(rows) ? wte_rows + size_t(row) * C : nullptr;
    const Element* position_row = wpe != nullptr ? wpe + size_t(t) * C : nullptr;
    Element* out_row = out + position * C;
    for (int c = threadIdx.x; c < C; c += kThreads) {
      const Real token_part = token_row != nullptr ? to_compute(token_row[c]) : Real(0);
      const Real position_part = position_row != nullptr ? to_compute(position_row[c]) : Real(0);
      out_row[c] = from_compute<Element>(token_part + position_part);
    }
  }
}

}  // namespace

// ---- launchers ----

template <typename Element>
void embedding_forward_rows(Element* out, const int* tokens, const Element* wte_rows, int first_token, int rows,
                            const Element* wpe, int B, int T, int C, cudaStream_t stream) {
  if (B > kMaxGridY || first_token < 0 || rows < 1) {
    std::fprintf(stderr, "embedding_forward_rows: need B <= %d, first_token >= 0, rows >= 1; got %d, %d, %d\n",
                 kMaxGridY, B, first_token, rows);
    std::exit(EXIT_FAILURE);
  }
  launch(embedding_forward_rows_kernel<Element>, dim3(unsigned((T + kRows - 1) / kRows), B), dim3(kThreads), 0,
         stream, out, tokens, wte_rows, first_token, rows, wpe, T, C);
}

#define INSTANTIATE_EMBEDDING_FORWARD_ROWS(Element)                                                          \
  template void embedding_forward_rows<Element>(Element*, const int*, const Element*, int, int, const Element*, \
                                                int, int, int, cudaStream_t);
INSTANTIATE_EMBEDDING_FORWARD_ROWS(double)
INSTANTIATE_EMBEDDING_FORWARD_ROWS(float)
INSTANTIATE_EMBEDDING_FORWARD_ROWS(__nv_bfloat16)
