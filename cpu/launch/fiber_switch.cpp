// cpu_switch_fiber (cpu/launch/fiber_switch.h says why it is not Boost's jump_fcontext). The
// context it saves and resumes is Boost 1.74's for x86-64 System V (jump_x86_64_sysv_elf_gas.S):
// at the saved stack pointer, MXCSR (0x0) and the x87 control word (0x4), which it neither
// saves nor loads, r12-r15, rbx, rbp (0x8-0x30) and the address to resume at (0x38). Returns
// {the context of the fiber that left, data} to the resumed fiber, in rax and rdx; a new
// fiber's function gets them in rdi and rsi.
#if defined(__x86_64__)
asm(R"(
  .pushsection .text
  .globl cpu_switch_fiber
  .type cpu_switch_fiber, @function
  .p2align 4
cpu_switch_fiber:
  leaq -0x38(%rsp), %rsp
  movq %r12, 0x8(%rsp)
  movq %r13, 0x10(%rsp)
  movq %r14, 0x18(%rsp)
  movq %r15, 0x20(%rsp)
  movq %rbx, 0x28(%rsp)
  movq %rbp, 0x30(%rsp)
  movq %rsp, %rax
  movq %rdi, %rsp
  movq 0x8(%rsp), %r12
  movq 0x10(%rsp), %r13
  movq 0x18(%rsp), %r14
  movq 0x20(%rsp), %r15
  movq 0x28(%rsp), %rbx
  movq 0x30(%rsp), %rbp
  leaq 0x38(%rsp), %rsp
  movq %rsi, %rdx
  movq %rax, %rdi
  ret
  .size cpu_switch_fiber, .-cpu_switch_fiber
  .popsection
)");
#endif
