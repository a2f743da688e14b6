// The switch between a block's fibers (cpu/launch/block_scheduler.cpp): Boost.Context's
// jump_fcontext, rewritten for x86-64 so that a warp's lanes switching in turn cost what the
// switch itself costs. Two differences, neither visible to a kernel:
// - it returns into the resumed fiber with `ret` where Boost's jumps (`jmp *%r8`): the CPU's
//   return-stack predictor then pairs the switch with the call that entered it, and the returns
//   that follow in the resumed fiber (out of switch_to_next, suspend, the collective) are
//   predicted whenever it waited where the fiber that left waited, as a warp's lanes do. With
//   Boost's jump every one of them was mispredicted (40% of warp_collective's own samples sat
//   on the first instruction after its call to suspend).
// - it neither saves nor loads the floating-point control words (MXCSR, the x87 control word):
//   a block's fibers all run on one OS thread, whose rounding mode and exception masks no kernel
//   changes (CUDA has no such call), so the words Boost's jump loads are the ones in force.
//   Those loads were half of its samples.
// The context layout is Boost's, so make_fcontext still makes new fibers; no context this switch
// saves may be resumed by Boost's jump (it would load control words never saved), and none is:
// the block scheduler switches only through switch_fiber. Elsewhere than x86-64, Boost's jump.
#pragma once
#include <boost/context/detail/fcontext.hpp>

namespace cpu {

#if defined(__x86_64__)
extern "C" boost::context::detail::transfer_t cpu_switch_fiber(boost::context::detail::fcontext_t to, void* data);
inline boost::context::detail::transfer_t switch_fiber(boost::context::detail::fcontext_t to, void* data) {
  return cpu_switch_fiber(to, data);
}
#else
inline boost::context::detail::transfer_t switch_fiber(boost::context::detail::fcontext_t to, void* data) {
  return boost::context::detail::jump_fcontext(to, data);
}
#endif

}  // namespace cpu
