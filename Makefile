# One source, two builds (README.md, "How the two builds relate"):
#   GPU build: nvcc, the CUDA runtime, cuBLAS, NCCL, MPI.
#   CPU build: g++ on the same .cu files; cpu/ supplies the CUDA runtime, kernel
#              launch, cuBLAS (OpenBLAS) and NCCL (MPI). Never links libcudart.
# `make` picks the GPU build when nvidia-smi sees a GPU; GPU=1 / GPU=0 force either.
#   make            build ./train and data/kjv.txt, the default corpus: what the quick start needs,
#                   on every core (the tests are built by make test)
#   make test       build and run every test; ends with "N passed, M failed"
#                   (FILTER='LayerNorm.*' runs one family)
#   make cuda       compile and link the GPU build, even without a GPU
#   make bench      build the CPU build's micro-benchmarks into build/cpu/tools/
#   make ptxas-report  registers and spills per kernel for sm_90
#   make sanitize   the CPU build under AddressSanitizer and UndefinedBehaviorSanitizer
#                   (build/sanitize/): unit_tests' families and mpi_tests -np 4
#   make racecheck  the CPU build under ThreadSanitizer, each CUDA thread a fiber ordered only
#                   by the barriers it meets (build/racecheck/): kernels, model, mpi_tests -np 4;
#                   RACECHECK_UNIT_FILTER='LayerNorm.*' runs one family (docs/testing.md)
#   make fuzz       libFuzzer targets for every parser (build/fuzz/), each run briefly;
#                   FUZZ_SECONDS=3600 for a long campaign (docs/testing.md)
#   make mutation-check  every fault of tools/mutation_check.sh (a clean tree; about an hour),
#                   its verdicts written into docs/testing.md's table

GPU ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1 || echo 0)
CUDA ?= /usr/local/cuda
NVCC ?= $(CUDA)/bin/nvcc

# A fresh Debian machine: before anything is built, tools/setup_deps.sh checks (one dpkg-query)
# that the packages the goals need are installed and installs the missing ones, or stops
# printing the apt-get command that would. Once per make command (not in sub-makes); not for
# `make clean`; SETUP_DEPS=0 skips it where it cannot check (not Debian or Ubuntu).
ifeq ($(MAKELEVEL)$(filter 0,$(SETUP_DEPS)),0)
  ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),all)),)
    DEPS_GROUPS := build $(if $(filter test,$(MAKECMDGOALS)),test) $(filter sanitize racecheck fuzz,$(MAKECMDGOALS)) \
                   $(if $(or $(filter 1,$(GPU)),$(filter cuda ptxas-report,$(MAKECMDGOALS))),cuda)
    ifneq ($(shell CUDA='$(CUDA)' tools/setup_deps.sh $(DEPS_GROUPS) >&2; echo $$?),0)
      $(error the packages are not set up: tools/setup_deps.sh $(strip $(DEPS_GROUPS)) said why above)
    endif
  endif
endif
# On every core unless the command line or the environment says how many jobs (make -j1: one).
ifeq ($(filter -j% j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(shell nproc)
endif
CXX := g++
MPI_INCLUDE := $(shell pkg-config --cflags-only-I mpich 2>/dev/null || echo -I/usr/include/x86_64-linux-gnu/mpich)
MPI_LIBS := -lmpich
MPIRUN ?= mpirun
FILTER ?= *

WARNINGS := -Wall -Wextra -Wno-unused-parameter
# The CPU build's debug information: whole (-g) for a debugger; CI builds with line tables only
# (-g1: enough for backtraces and sanitizer reports), which took 3.9 s instead of 5.4 s for
# tests/schedule_test.cu (.ci/run).
CPU_DEBUG ?= -g
# The CPU build's instruction set: AVX2 and FMA (x86-64-v3: Intel since 2013, AMD since 2015), for
# vectorised elementwise kernels and the fused multiply-adds of their expf
# (cpu/include/kernels/exponential.cuh); the program checks for them as it starts. `make CPU_ARCH=`
# builds for any x86-64, with the same bits, slower. fp-contract=off: a*b+c stays two roundings
# (only explicit fmas fuse), so these flags change no bits. no-trapping-math: the kernels' ?:
# on floats may then become selects, which a vectorised loop needs (no value changes).
CPU_ARCH ?= -mavx2 -mfma
CPU_FLAGS := -std=c++20 -O2 $(CPU_DEBUG) $(CPU_ARCH) -ffp-contract=off -fno-trapping-math -fno-strict-aliasing \
             $(WARNINGS) -MMD -MP \
             -Icpu/include -I. -isystem $(CUDA)/include $(MPI_INCLUDE)
CPU_LIBS := -rdynamic -lboost_context $(MPI_LIBS) -lpthread -ldl
GPU_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# The host code's optimisation and debug information; CI compiles with GPU_HOST_OPT=-O0 (.ci/run).
GPU_HOST_OPT ?= -O2 -g
GPU_COMMON_FLAGS := -std=c++20 $(GPU_HOST_OPT) -Xcompiler -Wall,-Wno-unused-parameter -I. $(MPI_INCLUDE)
GPU_FLAGS := $(GPU_COMMON_FLAGS) $(GPU_ARCH) -MMD -MP
# The GPU build's host compiler flags: .cpp files and the .cu files without device code.
GPU_HOST_FLAGS := -std=c++20 $(GPU_HOST_OPT) $(WARNINGS) -MMD -MP -I. -isystem $(CUDA)/include $(MPI_INCLUDE)
GPU_LIBS := -lcublas -lnccl $(MPI_LIBS)
GTEST_LIBS := -lgtest -lpthread

# Project sources (the same for both builds) and the CPU build's runtime. Host-only
# code may be .cpp (g++ in both builds, with the build's CUDA headers).
# The program ./train is built from trainer/ (a folder train/ could not sit beside it).
LIB_SRCS := $(wildcard kernels/*.cu model/*.cu model/*.cpp pipeline/*.cu pipeline/*.cpp comm/*.cu comm/*.cpp \
              trainer/*/*.cpp)
TRAIN_SRCS := $(wildcard trainer/*.cu)
CPU_RUNTIME_SRCS := $(wildcard cpu/*/*.cpp)
# Tests: tests/*_test.cu run in one process in either build, tests/mpi/*_test.cu under
# mpirun -np 4 in either build (their PipelineLayouts suite also under -np 2 and -np 8:
# tools/run_tests.sh), tests/cpu/*_test.cu test cpu/ itself (CPU build only), and
# tests/cpu/mpi/*_test.cu do so under mpirun -np 4.
TEST_SRCS := $(wildcard tests/*_test.cu)
MPI_TEST_SRCS := $(wildcard tests/mpi/*_test.cu)
CPU_TEST_SRCS := $(wildcard tests/cpu/*_test.cu)
CPU_MPI_TEST_SRCS := $(wildcard tests/cpu/mpi/*_test.cu)
TEST_SUPPORT_SRCS := $(filter-out %_test.cu tests/gtest_main.cu tests/mpi_gtest_main.cu,$(wildcard tests/*.cu))

ifeq ($(GPU),1)
  BUILD := build/gpu
  RUNTIME_OBJS :=
else
  BUILD := build/cpu
  RUNTIME_OBJS := $(CPU_RUNTIME_SRCS:%.cpp=build/cpu/%.o)
endif

objs = $(patsubst %,$(2)/%.o,$(basename $(1)))
LIB_OBJS = $(call objs,$(LIB_SRCS),$(BUILD))
TEST_BINS := $(BUILD)/tests/unit_tests $(if $(MPI_TEST_SRCS),$(BUILD)/tests/mpi_tests) \
             $(if $(and $(CPU_TEST_SRCS),$(filter 0,$(GPU))),build/cpu/tests/cpu_tests) \
             $(if $(and $(CPU_MPI_TEST_SRCS),$(filter 0,$(GPU))),build/cpu/tests/cpu_mpi_tests)

.PHONY: all train test cuda bench ptxas-report sanitize sanitize-unit-run sanitize-mpi-run racecheck fuzz mutation-check clean
all: $(if $(TRAIN_SRCS),train) data/kjv.txt

# The default corpus: the King James Bible from Debian's bible-kjv package (written
# to a temporary file first, so a failed run leaves no half corpus behind).
data/kjv.txt:
	@mkdir -p data
	bible -f "Genesis 1:1-Revelation 22:21" > $@.tmp && mv $@.tmp $@

# ./train is a copy of this build's program, refreshed on every make, so that a
# `make cuda` (build/gpu/train) never leaves a GPU binary where the CPU build's belongs.
train: $(BUILD)/train
	cp $< $@
$(BUILD)/train: $(call objs,$(TRAIN_SRCS),$(BUILD)) $(LIB_OBJS) $(RUNTIME_OBJS)
	$(if $(filter 1,$(GPU)),$(NVCC) $(GPU_ARCH) -o $@ $^ $(GPU_LIBS),$(CXX) -o $@ $^ $(CPU_LIBS))

# ---- compile rules ----
# The CPU build parses the standard headers most files include, and cpu/'s CUDA runtime header,
# once: a precompiled header that g++ reads first in every object of build/cpu and build/sanitize
# (about a third of make's time). It only saves parsing: the race build (every file of the CPU
# build, with clang) and the GPU build compile without it, so a file that forgets an include
# still fails there. The header is written only
# when this list changes, so that another edit of this Makefile rebuilds nothing.
PRECOMPILED := algorithm array cmath cstdint cstdio cstdlib cstring functional map memory mutex \
               optional ostream stdexcept string unordered_map vector cuda_runtime.h
PCH := build/cpu/precompiled.h
$(PCH): Makefile
	@mkdir -p $(dir $@)
	@printf '#include <%s>\n' $(PRECOMPILED) > $@.tmp
	@if cmp -s $@.tmp $@; then rm $@.tmp; else mv $@.tmp $@; fi
$(PCH).gch: $(PCH)
	$(CXX) $(CPU_FLAGS) -x c++-header $< -o $@
build/cpu/%.o: %.cu $(PCH).gch
	@mkdir -p $(dir $@)
	$(CXX) $(CPU_FLAGS) -include $(PCH) -Winvalid-pch -x c++ -c $< -o $@
build/cpu/%.o: %.cpp $(PCH).gch
	@mkdir -p $(dir $@)
	$(CXX) $(CPU_FLAGS) -include $(PCH) -Winvalid-pch -c $< -o $@
build/gpu/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(GPU_FLAGS) -x cu -c $< -o $@
build/gpu/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(GPU_HOST_FLAGS) -c $< -o $@
# A .cu file whose own text holds no device code (no kernel, launch, __device__ or __shared__:
# tests, the executor, the trainer) is host code that calls the CUDA runtime, cuBLAS and NCCL.
# The GPU build compiles it as nvcc would compile its host part, with the host compiler against
# CUDA's headers, and skips nvcc's front end and device pass: 5 s instead of 14 for
# tests/schedule_test.cu, 2026-11-27. A header with device code that such a file includes fails
# to compile here, or warns (g++ has no <<< and no threadIdx, and ignores __device__ with a
# warning): then the file needs nvcc, and saying __device__ in it is how it gets it.
GPU_HOST_CU_SRCS := $(shell grep -LE '__global__|<<<|__device__|__shared__' \
                      $(filter %.cu,$(LIB_SRCS) $(TRAIN_SRCS) $(TEST_SRCS) $(MPI_TEST_SRCS) $(TEST_SUPPORT_SRCS)) \
                      tests/gtest_main.cu tests/mpi_gtest_main.cu $(wildcard tools/*.cu))
$(GPU_HOST_CU_SRCS:%.cu=build/gpu/%.o): build/gpu/%.o: %.cu
	@mkdir -p $(dir $@)
	$(CXX) $(GPU_HOST_FLAGS) -x c++ -c $< -o $@

# ---- tests ----
$(BUILD)/tests/unit_tests: $(call objs,$(TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/gtest_main.cu,$(BUILD)) $(LIB_OBJS) $(RUNTIME_OBJS)
	$(if $(filter 1,$(GPU)),$(NVCC) $(GPU_ARCH) -o $@ $^ $(GPU_LIBS) $(GTEST_LIBS),$(CXX) -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS))
$(BUILD)/tests/mpi_tests: $(call objs,$(MPI_TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/mpi_gtest_main.cu,$(BUILD)) $(LIB_OBJS) $(RUNTIME_OBJS)
	$(if $(filter 1,$(GPU)),$(NVCC) $(GPU_ARCH) -o $@ $^ $(GPU_LIBS) $(GTEST_LIBS),$(CXX) -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS))
build/cpu/tests/cpu_tests: $(call objs,$(CPU_TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/gtest_main.cu,build/cpu) $(call objs,$(LIB_SRCS),build/cpu) $(CPU_RUNTIME_SRCS:%.cpp=build/cpu/%.o)
	$(CXX) -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS)
build/cpu/tests/cpu_mpi_tests: $(call objs,$(CPU_MPI_TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/mpi_gtest_main.cu,build/cpu) $(call objs,$(LIB_SRCS),build/cpu) $(CPU_RUNTIME_SRCS:%.cpp=build/cpu/%.o)
	$(CXX) -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS)

# tools/reference_run: our trainer's numbers for the PyTorch cross-check (tests/pytorch_check.py).
REFERENCE_RUN := $(BUILD)/tools/reference_run
$(REFERENCE_RUN): $(call objs,tools/reference_run.cu,$(BUILD)) $(LIB_OBJS) $(RUNTIME_OBJS)
	$(if $(filter 1,$(GPU)),$(NVCC) $(GPU_ARCH) -o $@ $^ $(GPU_LIBS),$(CXX) -o $@ $^ $(CPU_LIBS))

# tests/step_counts_test.py reads the CPU build's counts tool (cpu/runtime/call_counts.h).
test: $(TEST_BINS) $(if $(TRAIN_SRCS),train) $(REFERENCE_RUN) data/kjv.txt build/cpu/tools/step_counts
	@MPIRUN="$(MPIRUN)" FILTER='$(FILTER)' REFERENCE_RUN=$(REFERENCE_RUN) tools/run_tests.sh $(TEST_BINS) tests/pytorch_check.py tests/compare_losses_test.py tests/train_failure_test.py \
	  tests/train_watchdog_test.py tests/train_stop_test.py tests/setup_deps_test.py tests/plot_log_test.py \
	  tests/trace_test.py tests/train_visible_devices_test.py tests/house_test.py tests/runner_test.py tests/mutation_table_test.py tests/mutation_faults_test.py \
	  tests/train_memory_test.py tests/memory_formulas_test.py tests/train_plan_layouts_test.py \
	  tests/train_pytorch_csv_test.py tests/train_auto_split_test.py tests/step_counts_test.py

# ---- the GPU build without a GPU: compile and link everything ----
cuda:
	$(MAKE) GPU=1 $(if $(TRAIN_SRCS),build/gpu/train) build/gpu/tests/unit_tests build/gpu/tools/reference_run \
	  $(if $(MPI_TEST_SRCS),build/gpu/tests/mpi_tests)

ptxas-report:
	@for f in $(filter %.cu,$(LIB_SRCS)); do $(NVCC) $(GPU_COMMON_FLAGS) -gencode arch=compute_90,code=sm_90 -Xptxas -v -x cu -c $$f -o /dev/null 2>&1; done \
	  | tools/ptxas_summary.sh

# ---- benchmarks (CPU build) ----
BENCH_SRCS := $(wildcard tools/*_bench.cu) tools/step_counts.cu
bench: $(BENCH_SRCS:tools/%.cu=build/cpu/tools/%)
build/cpu/tools/%: build/cpu/tools/%.o $(call objs,$(LIB_SRCS),build/cpu) $(CPU_RUNTIME_SRCS:%.cpp=build/cpu/%.o)
	$(CXX) -o $@ $^ $(CPU_LIBS)

# ---- sanitizers (CPU build, docs/testing.md) ----
# Its own objects in build/sanitize, so that build/cpu stays as it is; -O1 and line tables only
# (-g1), as ASan advises, to build quicker. Every UBSan finding is fatal. LeakSanitizer is on,
# with tools/sanitize/lsan.supp: the one deliberate leak, device memory a failed run leaves
# (each entry says why it is not a bug). Strict memory (pkeys and a
# SIGSEGV handler) is not combined with ASan: its families run without it. Use after return is
# not looked for: it gives every fiber frame a fake stack, and LayerNorm.* and Atomics.* took
# 123 s instead of 4 s.
# unit_tests is built from the families where memory is indexed by what we compute or read:
# the parsers (CorruptedInput and each parser's own), the model, the kernels, the schedules and
# the trainer in process. Left out: cuBLAS and CUDA semantics (cpu/'s, not ours to index),
# the error measures, the rank/device rules, and TrainLayout, which runs the uninstrumented ./train.
SANITIZE := build/sanitize
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SANITIZE_ENV := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=0 \
  UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tools/sanitize/lsan.supp
SANITIZE_TEST_SRCS := $(filter-out tests/cublas_test.cu tests/measures_test.cu tests/rank_device_test.cu \
                        tests/train_layout_test.cu,$(TEST_SRCS))
# Trainer.ProgramReports... runs the uninstrumented ./train too. Simulator.EveryScheduleRunsWithoutDeadlock
# simulates every schedule for p = 1..8 under five sets of costs (41 of the run's 167 s, 2026-11-27):
# the other Simulator tests run the same three simulators' code, and the schedule-file and CSV
# fuzz targets simulate every schedule they read under ASan.
SANITIZE_FILTER ?= *:-Trainer.ProgramReportsAnErrorInOneLineAndExitsWithStatus1:Simulator.EveryScheduleRunsWithoutDeadlock
# mpi_tests but ten of PipelineLayouts' tests: its AFAB, 1F1B, interleaved and bf16 runs index the
# same executor, trainer and kernel memory as its ZB-V, uneven-split and layout-string runs (every
# layout, recompute, replicas, two chunks per rank, the split backward, stages without layers) and
# Pipeline.* (every schedule on 4 stages with and without recompute, executed; bf16 messages and
# stage inputs), and took 290 of the run's 370 s (2026-11-26); ZB-H1, ZB-H2 and issue 31's v-half,
# v-min, microbatch groups, looped BFS and zb-interleaved are other orders of the same actions
# through the same code, and took 103 of its 245 s (2026-11-27): left out (docs/testing.md).
# DualPipeV stays: its overlapped pairs have code of their own. Of PipeDream's layouts, the
# replicas' clipped, drained, vertical-sync, recompute, non-finite and bf16 twins, and vertical
# sync with recompute or clipping in bf16, index the same host and kernel memory as their
# one-replica or fp32 runs, which stay (40 of the run's 311 s, 2026-11-28): left out.
SANITIZE_MPI_FILTER ?= *:-PipelineLayouts.PipeDreamClippedReplicas*:PipelineLayouts.PipeDreamDrainedReplicas*:PipelineLayouts.PipeDreamReplicasWithVerticalSync*:PipelineLayouts.PipeDreamReplicasWithoutStashing*:PipelineLayouts.PipeDreamRecomputingReplicas*:PipelineLayouts.PipeDreamNonFiniteUpdateInReplicas*:PipelineLayouts.PipeDreamReplicasInBf16*:PipelineLayouts.PipeDreamDrainedInBf16*:PipelineLayouts.PipeDreamRecomputingWithVerticalSync*:PipelineLayouts.PipeDreamClippedInBf16*:PipelineLayouts.AfabGivesTheSingleStageRun:PipelineLayouts.OneFOneBGivesTheSingleStageRun:PipelineLayouts.InterleavedGivesTheSingleStageRun:PipelineLayouts.Bf16GivesTheSingleStageBf16Run:PipelineLayouts.ZeroBubbleH1GivesTheSingleStageRun:PipelineLayouts.ZeroBubbleH2GivesTheSingleStageRun:PipelineLayouts.ControllableMemoryVGivesTheSingleStageRun:PipelineLayouts.InterleavedMicrobatchGroupsGiveTheSingleStageRun:PipelineLayouts.LoopedBfsGivesTheSingleStageRun:PipelineLayouts.InterleavedZeroBubbleGivesTheSingleStageRun
# The two runs go at once, each one's output printed whole when it ends (--output-sync): the
# ranks of mpi_tests wait for one another more than they compute, and unit_tests takes the idle
# core (docs/testing.md, "What CI costs").
sanitize:
	$(MAKE) $(SANITIZE)/tests/unit_tests $(SANITIZE)/tests/mpi_tests
	$(MAKE) -j2 --output-sync=target sanitize-unit-run sanitize-mpi-run
sanitize-unit-run:
	$(SANITIZE_ENV) $(SANITIZE)/tests/unit_tests --gtest_filter='$(SANITIZE_FILTER)'
sanitize-mpi-run:
	$(SANITIZE_ENV) $(MPIRUN) -np 4 $(SANITIZE)/tests/mpi_tests --gtest_filter='$(SANITIZE_MPI_FILTER)'
# The CPU build's precompiled header, compiled with these flags (a precompiled header serves only
# the flags it was made with).
$(SANITIZE)/precompiled.h: $(PCH)
	@mkdir -p $(dir $@)
	cp $< $@
$(SANITIZE)/precompiled.h.gch: $(SANITIZE)/precompiled.h
	$(CXX) $(CPU_FLAGS) -O1 -g1 $(SANITIZE_FLAGS) -x c++-header $< -o $@
$(SANITIZE)/%.o: %.cu $(SANITIZE)/precompiled.h.gch
	@mkdir -p $(dir $@)
	$(CXX) $(CPU_FLAGS) -O1 -g1 $(SANITIZE_FLAGS) -include $(SANITIZE)/precompiled.h -Winvalid-pch -x c++ -c $< -o $@
$(SANITIZE)/%.o: %.cpp $(SANITIZE)/precompiled.h.gch
	@mkdir -p $(dir $@)
	$(CXX) $(CPU_FLAGS) -O1 -g1 $(SANITIZE_FLAGS) -include $(SANITIZE)/precompiled.h -Winvalid-pch -c $< -o $@
$(SANITIZE)/tests/unit_tests: $(call objs,$(SANITIZE_TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/gtest_main.cu $(LIB_SRCS) $(CPU_RUNTIME_SRCS),$(SANITIZE))
	$(CXX) $(SANITIZE_FLAGS) -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS)
$(SANITIZE)/tests/mpi_tests: $(call objs,$(MPI_TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/mpi_gtest_main.cu $(LIB_SRCS) $(CPU_RUNTIME_SRCS),$(SANITIZE))
	$(CXX) $(SANITIZE_FLAGS) -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS)

# ---- race detector (CPU build, docs/testing.md) ----
# The CPU build under ThreadSanitizer, with clang++-14 (its TSan runtime keeps vector clocks of
# fixed size: gcc 12's grows them with every fiber, and a block of 256 threads took 5 times as
# long), in build/racecheck. CPU_RACECHECK makes every CUDA thread a TSan fiber ordered only by
# the barriers and collectives it meets (cpu/check/race_annotations.h). The scheduler's own files are
# not instrumented (their bookkeeping is shared by a block's fibers on purpose) and come first
# on the link line, so that their copies of inline library code, uninstrumented, are the ones
# linked. Any report fails the run (TSan's exit status 66). Line tables only: a report needs each
# frame's file and line, not variables.
# unit_tests: every kernel family and the model, where kernels run; mpi_tests at -np 4 but seven
# of PipelineLayouts' eight tests; cpu_tests the demonstrations (Racecheck.*), the scheduler and blocks
# on several OS threads (docs/testing.md says why these suffice and what the step costs).
RACECHECK := build/racecheck
RACECHECK_CXX := clang++-14
RACECHECK_FLAGS := -std=c++20 -O1 -gline-tables-only -fno-strict-aliasing $(WARNINGS) -MMD -MP -Icpu/include -I. -isystem $(CUDA)/include \
                   $(MPI_INCLUDE) -DCPU_RACECHECK
RACECHECK_PLAIN_SRCS := cpu/launch/block_scheduler.cpp cpu/launch/warp_collectives.cpp cpu/launch/race_fibers.cpp
# UCX_MEM_EVENTS=no: UCX (under MPICH) patches mmap and munmap past ThreadSanitizer (cpu/launch/launch_kernel.cpp).
RACECHECK_ENV := TSAN_OPTIONS=second_deadlock_stack=1 UCX_MEM_EVENTS=no
RACECHECK_KERNEL_FAMILIES := LayerNorm.*:Attention.*:FusedAttention.*:Embedding.*:Gelu.*:Residual.*:Matmul.*:Classifier.*:AdamW.*:GlobalNorm.*
# Atomics' exactly-once tests repeat their launch until blocks overlap in time, which a block per
# new OS thread seldom gives: left out (they test cpu/'s atomics on several OS threads).
RACECHECK_NEED_OVERLAP := Atomics.IntegerAddHandsOutEachTicketOnce:Atomics.CasGivesEachSlotToExactlyOneThread:Atomics.ExchangeReturnsEachStoredValueOnce
# The finite-difference tests launch each kernel hundreds of times on the shapes its family's
# float-against-double test launches it on (in double and float, forward and backward): a race
# shows in one launch. They took 121 of the run's 217 s (2026-11-27, load 7), the fused
# attention's 46 of its family's 58 s: left out. GPTFusedAttention.* (the whole model with the
# fused attention, ./train's default) takes 5 s.
# The embedding's 65,536-position backward (58 s under it, 0.3 s without) runs the sort and the
# segmented sums its smaller tests run, at a size that checks the order and the bound: left out.
RACECHECK_UNIT_FILTER ?= $(RACECHECK_KERNEL_FAMILIES):Atomics.*:BlockSync.*:Warp.*:GPT.*:GPTFusedAttention.*:-$(RACECHECK_NEED_OVERLAP):*FiniteDifference*:Embedding.BackwardOf65536PositionsWithOneTokenOnAFifth
# PipelineLayouts' runs of every layout with AFAB, 1F1B, the interleaved schedule, ZB-H1, ZB-H2,
# ZB-V, the schedules of issue 31 (v-half, v-min, microbatch groups, looped BFS, zb-interleaved:
# other orders of the same actions) and in bf16 run the same kernels, executor and threads (the compute, transfer and
# reduction streams' workers, the emulated NCCL) as its uneven-split runs (1F1B and interleaved,
# with replicas) and Pipeline.* (every schedule on 4 stages, executed with and
# without recompute: the split backward, the weight pool, two chunks per rank); with them
# mpi_tests would take several times as long under racecheck (1F1B's alone took 234 s of its 499,
# and ZB-V 124 of 260, 2026-11-26): left out (docs/testing.md). DualPipeV's overlapped pairs (a
# forward and a backward on two compute streams at once, ordered only by events) run under it in
# Pipeline.ExecutedTraceFollowsTheSchedule (m = 8, with and without recompute); its layouts took 147 s
# more (2026-11-27): left out too.
# ResumeLayouts.* (checkpoints moved between layouts) runs the trainer's steps and saves that
# Pipeline.FourStageCheckpointResumesBitwise runs under it: left out too. Of ZeRO-1's cases, dp 2 x
# pp 2 with 1F1B runs (the reduces to the owners on the reduction stream, the broadcasts back); its
# interleaved, zb-v and dp 4 cases queue the same calls from the same code (55 of the run's 266 s,
# 2026-11-27). The layouts at variable length run the same schedules through the same executor,
# streams and calls as those at fixed length, only the messages' counts differ (checked by the
# natural mode's NCCL check at np 2, 4 and 8): 99 s of the run's 653 s in CI (2026-11-27), left out.
# At tp 2 x pp 2, 1F1B (the tp all-reduces beside the executor's streams), zb-h1 (I's all-reduces,
# W's none) and DualPipeV (the all-reduces of two compute streams through the one NCCL order) run;
# zb-v, recompute, bf16 and the fused attention at tp are the same calls from the same threads
# (142 s of the run's 947 s, 2026-11-27). PipeDream with stashing runs; without it, with vertical
# sync and every two are the same executor walk with other versions (49 s): left out; so, with
# replicas, are those two (the one with stashing runs the per-update sum over replicas). Sequence
# parallelism runs at tp 2 x pp 2 (its all-gathers and reduce-scatters beside the streams, the
# messages' shards); at tp 4 on one stage it is the same calls on more ranks: left out. With the
# split backward, SP runs under zb-h1 (I's gathers and LayerNorm sums, W's none); zb-v, DualPipeV
# and bf16 with SP are the same calls again: left out (2026-11-28). Of PipeDream's clipping, the
# one-replica clip runs (each update's norm summed over the stages on the compute stream); with
# replicas, the non-finite skip, bf16 (with or without the clip) and the resumes (the same walk,
# drained at the run's end) are the same calls: left out. Since 2026-11-28 vertical sync runs without
# the clip instead (the clipped run took 82 s of the run's 578, its one more all-reduce is the kind
# the tp runs make); recompute (38 s with stashing, 73 s with vertical sync before its
# reference took the norm layer by layer: docs/testing.md), --documents (22 s: host-side loss scales over the same walk),
# the uneven split (38 s: 1F1B and interleaved layouts Pipeline.* runs on 4 stages) and the fused
# attention's layouts (21-34 s: its kernels run under it in FusedAttention.* and
# GPTFusedAttention.*, the pipeline around them is every other layout's) are left out.
RACECHECK_MPI_FILTER ?= *:-TensorParallelLayouts.SequenceParallelOnFourTpRanksGivesTheSingleProcess:TensorParallelLayouts.SequenceParallelWithZeroBubbleVOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess:TensorParallelLayouts.SequenceParallelWithDualPipeVOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess:TensorParallelLayouts.SequenceParallelInBf16OnTwoTpRanksTimesTwoStagesGivesTheSingleBf16Process:PipelineLayouts.PipeDreamClippedReplicasWithVerticalSyncGiveTheReference:PipelineLayouts.PipeDreamNonFiniteUpdateIsSkippedOnEveryStage:PipelineLayouts.PipeDream*Bf16*:PipelineLayouts.PipeDreamResumedAfterASaveIsTheReferenceDrainingThere:PipelineLayouts.PipeDreamAndSynchronousCheckpointsResumeEachOther:PipelineLayouts.PipeDreamReplicasWithoutStashingGiveTheReference:PipelineLayouts.PipeDreamReplicasWithVerticalSyncGiveTheReference:ResumeLayouts.*:ZeroOne.BitwiseZeroZeroInterleavedAndZeroBubbleVWithRecompute:ZeroOne.BitwiseZeroZeroOnFourReplicas:PipelineLayouts.AfabGivesTheSingleStageRun:PipelineLayouts.OneFOneBGivesTheSingleStageRun:PipelineLayouts.InterleavedGivesTheSingleStageRun:PipelineLayouts.ZeroBubbleH1GivesTheSingleStageRun:PipelineLayouts.ZeroBubbleH2GivesTheSingleStageRun:PipelineLayouts.ZeroBubbleVGivesTheSingleStageRun:PipelineLayouts.Bf16GivesTheSingleStageBf16Run:PipelineLayouts.ControllableMemoryVGivesTheSingleStageRun:PipelineLayouts.InterleavedMicrobatchGroupsGiveTheSingleStageRun:PipelineLayouts.LoopedBfsGivesTheSingleStageRun:PipelineLayouts.InterleavedZeroBubbleGivesTheSingleStageRun:PipelineLayouts.DualPipeVGivesTheSingleStageRun:PipelineLayouts.VariableLengthGivesTheSingleStageRun:PipelineLayouts.VariableLengthRunsEveryOtherSchedule:TensorParallelLayouts.ZeroBubbleVOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess:TensorParallelLayouts.RecomputeOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess:TensorParallelLayouts.TwoTpRanksTimesTwoStagesInBf16GiveTheSingleBf16Process:TensorParallelLayouts.FusedAttentionOnTwoTpRanksTimesTwoStagesGivesTheSingleProcess:PipelineLayouts.PipeDreamWithoutStashingGivesTheReference:PipelineLayouts.PipeDreamUpdatingEveryTwoGivesTheReference:PipelineLayouts.PipeDreamNonFiniteUpdateInReplicasWithoutVerticalSyncIsSkippedOnItsStageAndStopsTheRun:PipelineLayouts.PipeDreamRecomputingReplicasGiveTheReference:PipelineLayouts.PipeDreamReplicasWithDocumentsGiveTheReference:PipelineLayouts.PipeDreamWithSeqLenWarmupGivesTheReference:PipelineLayouts.PipeDreamDrainedReplicasGiveTheReferenceDrainingThere:PipelineLayouts.PipeDreamSaveEveryIsTheReferenceDrainingAtEachSave:TensorParallelVariableLength.SequenceParallelOnFourTpRanksGivesTheSingleProcess:PipelineLayouts.PipeDreamClippedWithVerticalSyncGivesTheReference:PipelineLayouts.PipeDreamRecomputingWithStashingGivesTheReference:PipelineLayouts.PipeDreamWithDocumentsGivesTheReference:PipelineLayouts.UnevenLayerSplitGivesTheSingleStageRun:PipelineLayouts.PipeDreamRecomputingWithVerticalSyncGivesTheReference:PipelineLayouts.FusedAttentionGivesTheSingleStageRun
# These two race on purpose (a missing __syncthreads, for the thread orders to expose).
RACECHECK_RACY_ON_PURPOSE := Scheduler.NaturalOrderHidesAMissingSyncthreads:Scheduler.ReversedAndShuffledOrdersExposeAMissingSyncthreads
RACECHECK_CPU_FILTER ?= Racecheck.*:Scheduler.*:BlockThreads.*:-$(RACECHECK_RACY_ON_PURPOSE)
# The test sources of the families it runs, and only those: the other 29 of tests/*_test.cu and 5
# of tests/cpu/*_test.cu took about 3 minutes of clang's TSan compile in CI for tests it never ran.
# To run another family under it, add its file: make racecheck RACECHECK_UNIT_TEST_SRCS='...'.
RACECHECK_UNIT_TEST_SRCS ?= $(addprefix tests/,$(addsuffix _test.cu,layernorm attention fused_attention embedding gelu residual \
                              matmul classifier adamw global_norm atomics block_sync warp gpt gpt_fused_attention))
RACECHECK_CPU_TEST_SRCS ?= tests/cpu/racecheck_test.cu tests/cpu/scheduler_test.cu tests/cpu/block_threads_test.cu
racecheck_objs = $(call objs,$(filter-out $(RACECHECK_PLAIN_SRCS),$(1)),$(RACECHECK)) \
                 $(call objs,$(RACECHECK_PLAIN_SRCS),$(RACECHECK)/plain)
RACECHECK_RUNTIME := $(call objs,$(RACECHECK_PLAIN_SRCS),$(RACECHECK)/plain) \
                     $(call objs,$(filter-out $(RACECHECK_PLAIN_SRCS),$(CPU_RUNTIME_SRCS)),$(RACECHECK))
racecheck:
	$(MAKE) $(RACECHECK)/tests/cpu_tests $(RACECHECK)/tests/unit_tests $(RACECHECK)/tests/mpi_tests
	$(RACECHECK_ENV) $(RACECHECK)/tests/cpu_tests --gtest_filter='$(RACECHECK_CPU_FILTER)'
	$(RACECHECK_ENV) $(RACECHECK)/tests/unit_tests --gtest_filter='$(RACECHECK_UNIT_FILTER)'
	$(RACECHECK_ENV) $(MPIRUN) -np 4 $(RACECHECK)/tests/mpi_tests --gtest_filter='$(RACECHECK_MPI_FILTER)'
$(RACECHECK)/plain/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(RACECHECK_CXX) $(RACECHECK_FLAGS) -c $< -o $@
$(RACECHECK)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(RACECHECK_CXX) $(RACECHECK_FLAGS) -fsanitize=thread -x c++ -c $< -o $@
$(RACECHECK)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(RACECHECK_CXX) $(RACECHECK_FLAGS) -fsanitize=thread -c $< -o $@
$(RACECHECK)/tests/unit_tests: $(RACECHECK_RUNTIME) $(call racecheck_objs,$(RACECHECK_UNIT_TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/gtest_main.cu $(LIB_SRCS))
	$(RACECHECK_CXX) -fsanitize=thread -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS)
$(RACECHECK)/tests/mpi_tests: $(RACECHECK_RUNTIME) $(call racecheck_objs,$(MPI_TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/mpi_gtest_main.cu $(LIB_SRCS))
	$(RACECHECK_CXX) -fsanitize=thread -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS)
$(RACECHECK)/tests/cpu_tests: $(RACECHECK_RUNTIME) $(call racecheck_objs,$(RACECHECK_CPU_TEST_SRCS) $(TEST_SUPPORT_SRCS) tests/gtest_main.cu $(LIB_SRCS))
	$(RACECHECK_CXX) -fsanitize=thread -o $@ $^ $(CPU_LIBS) $(GTEST_LIBS)

# ---- libFuzzer targets (docs/testing.md) ----
# One target per parser (tests/fuzz/parser_fuzz.cpp with the parser's feed), clang++-14 with
# libFuzzer, ASan and UBSan, linking only the parsers' sources. Each run starts from a valid
# input (tests/fuzz/write_seeds.cpp) and keeps what it finds in build/fuzz/corpus/TARGET; a
# finding is written to build/fuzz/crash-TARGET-*. An allocation above 64 MB is a finding too:
# the inputs are a few KB, so only a size taken from an unchecked header asks for that much.
# A long campaign: make fuzz FUZZ_SECONDS=3600 (each target an hour), or one target with
# several jobs: build/fuzz/tokenizer -jobs=2 -malloc_limit_mb=64 build/fuzz/corpus/tokenizer
FUZZ := build/fuzz
FUZZ_CXX := clang++-14
FUZZ_FLAGS := -std=c++20 -O1 -g -fno-strict-aliasing $(WARNINGS) -MMD -MP -Icpu/include -I. -isystem $(CUDA)/include \
              -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_PARSER_SRCS := model/checkpoint_format.cpp model/config.cpp model/atomic_file.cpp model/parameters.cpp \
                    trainer/data/data.cpp trainer/data/tokenizer.cpp trainer/command_line/options.cpp \
                    trainer/command_line/pipedream_options.cpp trainer/command_line/layer_split_options.cpp \
                    trainer/command_line/sequence_parallel_options.cpp \
                    trainer/command_line/document_options.cpp trainer/command_line/option_values.cpp \
                    pipeline/layer_split.cpp pipeline/layout_string.cpp pipeline/action.cpp pipeline/schedule.cpp pipeline/interleaved.cpp pipeline/looped_bfs.cpp \
                    pipeline/zero_bubble.cpp pipeline/controllable_memory.cpp pipeline/interleaved_zero_bubble.cpp pipeline/dual_pipe_v.cpp \
                    pipeline/lower_in_time_order.cpp \
                    pipeline/simulate.cpp pipeline/simulate_dataflow.cpp pipeline/schedule_file.cpp pipeline/pytorch_csv.cpp
FUZZ_TARGETS := model_file training_state token_shard text_data tokenizer command_line schedule_file pytorch_csv
FUZZ_SECONDS ?= 20
# The targets run FUZZ_LANES at a time, each a process on one core, each its output printed
# whole when it ends: on 2 cores the 7 targets' 20 s take 80 s instead of 140.
FUZZ_LANES ?= 2
FUZZ_RUN_FLAGS = -max_total_time=$(FUZZ_SECONDS) -malloc_limit_mb=64 -timeout=10 -print_final_stats=1
fuzz:
	$(MAKE) $(FUZZ_TARGETS:%=$(FUZZ)/%) $(FUZZ)/write_seeds
	$(FUZZ)/write_seeds $(FUZZ)/corpus
	@printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(FUZZ_LANES) -I{} sh -c '\
	  log=$(FUZZ)/$$1.log; \
	  if ! $(FUZZ)/$$1 $(FUZZ_RUN_FLAGS) -artifact_prefix=$(FUZZ)/crash-$$1- $(FUZZ)/corpus/$$1 >$$log 2>&1; then \
	    printf "%s\n" "$$(tail -n 60 $$log; echo "fuzz: $$1 FAILED (log: $$log)")"; exit 1; fi; \
	  echo "fuzz: $$1 ran $(FUZZ_SECONDS) s, $$(grep -o "number_of_executed_units: [0-9]*" $$log | cut -d" " -f2) inputs, no finding"' sh {}
$(FUZZ)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_TARGETS:%=$(FUZZ)/%): $(FUZZ)/%: tests/fuzz/parser_fuzz.cpp $(FUZZ_PARSER_SRCS:%.cpp=$(FUZZ)/obj/%.o)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer -DPARSER_FEED=feed_$* -o $@ $< $(filter %.o,$^)
$(FUZZ)/write_seeds: tests/fuzz/write_seeds.cpp $(FUZZ_PARSER_SRCS:%.cpp=$(FUZZ)/obj/%.o)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -o $@ $< $(filter %.o,$^)

# The whole mutation check (docs/testing.md, "The mutation check"); CI runs a subset of it.
mutation-check:
	tools/mutation_check.sh --docs

clean:
	rm -rf build train

-include $(shell find build -name '*.d' 2>/dev/null)
