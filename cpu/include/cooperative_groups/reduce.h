// CPU build: cooperative_groups::reduce over a warp-sized tile, and its operators. All 32
// lanes meet once (cpu::warp_reduce, one fiber switch per lane instead of one per
// shuffle of a butterfly); the lowest lane's operator then combines the 32 values as
// lane 0 of an xor butterfly would (offsets 16, 8, 4, 2, 1), and every lane gets that
// result. CUDA leaves the order unspecified; results may differ from a GPU's in the
// last bits for floating point, as they may between GPU generations.
#pragma once
#include <cooperative_groups.h>

#include <type_traits>
#include <utility>

namespace cooperative_groups {

template <typename T>
struct plus {
  T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct less {
  T operator()(T a, T b) const { return (b < a) ? b : a; }
};
template <typename T>
struct greater {
  T operator()(T a, T b) const { return (a < b) ? b : a; }
};
template <typename T>
struct bit_and {
  T operator()(T a, T b) const { return a & b; }
};
template <typename T>
struct bit_or {
  T operator()(T a, T b) const { return a | b; }
};
template <typename T>
struct bit_xor {
  T operator()(T a, T b) const { return a ^ b; }
};

namespace cpu_detail {
template <typename R, typename Op>
void butterfly_tree(const void* op, const void* const* values, void* result) {
  const Op& combine = *static_cast<const Op*>(op);
  R v[32] = {};
  for (int l = 0; l < 32; ++l) v[l] = *static_cast<const R*>(values[l]);
  for (int offset = 16; offset > 0; offset /= 2)
    for (int l = 0; l < offset; ++l) v[l] = combine(v[l], v[l + offset]);
  *static_cast<R*>(result) = v[0];
}
}  // namespace cpu_detail

template <unsigned Size, typename Parent, typename TyVal, typename TyFn>
auto reduce(const thread_block_tile<Size, Parent>&, TyVal&& val, TyFn&& op, CPU_CALL_SITE) -> decltype(op(val, val)) {
  using R = std::decay_t<decltype(op(val, val))>;
  using Op = std::decay_t<TyFn>;
  static_assert(std::is_trivially_copyable_v<R>, "cooperative_groups::reduce of a trivially copyable type");
  const R value = val;
  R result{};
  const Op combine = op;
  cpu::warp_reduce({&value, &result, sizeof(R), &combine, &cpu_detail::butterfly_tree<R, Op>}, {file, line});
  return result;
}

}  // namespace cooperative_groups
