// The train program's options refused in one line: an unknown option, a stray argument, a missing
// or malformed value, a value out of range or outside its list, and options that contradict each
// other. Runs in both builds (host code only).
#include <gtest/gtest.h>

#include <string>

#include "tests/options_parsing.h"

TEST(Options, UnknownOptionIsAnError) {
  EXPECT_EQ(error_of({"--layer", "4"}), "unknown option --layer (see --help)");
  EXPECT_EQ(error_of({"--=4"}), "unknown option -- (see --help)");
}

TEST(Options, ArgumentThatIsNotAnOptionIsAnError) {
  EXPECT_EQ(error_of({"data/kjv.txt"}), "unexpected argument 'data/kjv.txt' (options start with --; see --help)");
  EXPECT_EQ(error_of({"-layers", "4"}), "unexpected argument '-layers' (options start with --; see --help)");
}

TEST(Options, MissingValueIsAnError) {
  EXPECT_EQ(error_of({"--layers"}), "--layers needs a value (N)");
  EXPECT_EQ(error_of({"--save", "--shuffle"}), "--save needs a value (FILE)");
  EXPECT_EQ(error_of({"--save="}), "--save needs a non-empty value");
}

TEST(Options, SwitchWithAValueIsAnError) { EXPECT_EQ(error_of({"--shuffle=1"}), "--shuffle takes no value"); }

TEST(Options, MalformedNumberIsAnError) {
  EXPECT_EQ(error_of({"--layers", "4x"}), "--layers: '4x' is not an integer");
  EXPECT_EQ(error_of({"--batch", "1.5"}), "--batch: '1.5' is not an integer");
  EXPECT_EQ(error_of({"--steps="}), "--steps: '' is not an integer");
  EXPECT_EQ(error_of({"--steps", "99999999999"}), "--steps 99999999999 is too large");
  EXPECT_EQ(error_of({"--seed", "-1"}), "--seed: '-1' is not an integer");
  EXPECT_EQ(error_of({"--lr", "fast"}), "--lr: 'fast' is not a finite number");
  EXPECT_EQ(error_of({"--lr", "1e-3 "}), "--lr: '1e-3 ' is not a finite number");
  EXPECT_EQ(error_of({"--lr", "nan"}), "--lr: 'nan' is not a finite number");
  EXPECT_EQ(error_of({"--eps", "1e40"}), "--eps: '1e40' is not a finite number");
  EXPECT_EQ(error_of({"--layers-per-stage", "2,,3"}), "--layers-per-stage: '' is not an integer");
  EXPECT_EQ(error_of({"--layers-per-stage", "2;3"}), "--layers-per-stage: '2;3' is not an integer");
}

TEST(Options, OutOfRangeValueIsAnError) {
  EXPECT_EQ(error_of({"--layers", "0"}), "--layers 0 is out of range (must be at least 1)");
  EXPECT_EQ(error_of({"--heads", "-2"}), "--heads -2 is out of range (must be at least 1)");
  EXPECT_EQ(error_of({"--vocab", "-1"}), "--vocab -1 is out of range (must be at least 0)");
  EXPECT_EQ(error_of({"--steps", "-1"}), "--steps -1 is out of range (must be at least 0)");
  EXPECT_EQ(error_of({"--lr", "0"}), "--lr 0 is out of range (must be above 0)");
  EXPECT_EQ(error_of({"--sample-temperature", "0"}), "--sample-temperature 0 is out of range (must be above 0)");
  EXPECT_EQ(error_of({"--eps", "-1e-8"}), "--eps -1e-8 is out of range (must be above 0)");
  EXPECT_EQ(error_of({"--beta1", "1"}), "--beta1 1 is out of range (must be in [0, 1))");
  EXPECT_EQ(error_of({"--beta2", "-0.5"}), "--beta2 -0.5 is out of range (must be in [0, 1))");
  EXPECT_EQ(error_of({"--grad-clip", "-1"}), "--grad-clip -1 is out of range (must be at least 0)");
  EXPECT_EQ(error_of({"--weight-decay", "-0.1"}), "--weight-decay -0.1 is out of range (must be at least 0)");
  EXPECT_EQ(error_of({"--val-batches", "0"}), "--val-batches 0 is out of range (must be at least 1)");
  EXPECT_EQ(error_of({"--dp", "0"}), "--dp 0 is out of range (must be at least 1)");
  EXPECT_EQ(error_of({"--pp", "-1"}), "--pp -1 is out of range (must be at least 0)");
  EXPECT_EQ(error_of({"--virtual-stages", "0"}), "--virtual-stages 0 is out of range (must be at least 1)");
  EXPECT_EQ(error_of({"--layers-per-stage", "2,0,2"}),
            "--layers-per-stage 2,0,2 is out of range (must be at least 1 but the first and the last, which may be 0: "
            "the embedding or the head alone)");
  EXPECT_EQ(error_of({"--layers-per-stage", "2,-1"}), "--layers-per-stage 2,-1 is out of range (must be at least 0)");
}

TEST(Options, ChoiceOutsideItsListIsAnError) {
  EXPECT_EQ(error_of({"--lr-schedule", "linear"}), "--lr-schedule linear is not one of cosine|constant");
  EXPECT_EQ(error_of({"--schedule", "gpipe"}), "--schedule gpipe is not one of afab|1f1b|interleaved|zb-h1|zb-h2|zb-v|v-half|v-min|looped-bfs|zb-interleaved|dualpipev|pipedream");
  EXPECT_EQ(error_of({"--dtype", "fp16"}), "--dtype fp16 is not one of fp32|bf16");
}

TEST(Options, MasterWeightsAreZeroOrOneAndZeroOnlyWithBf16) {
  EXPECT_EQ(error_of({"--dtype", "bf16"}), "(no error)");
  EXPECT_EQ(error_of({"--dtype", "bf16", "--master-weights", "0"}), "(no error)");
  EXPECT_EQ(error_of({"--dtype", "bf16", "--master-weights", "2"}),
            "--master-weights 2 is out of range (must be 0 or 1)");
  EXPECT_EQ(error_of({"--master-weights", "0"}),
            "--master-weights 0 needs --dtype bf16 (fp32 parameters are their own master weights)");
  EXPECT_EQ(error_of({"--master-weights", "1"}), "(no error)");
}

TEST(Options, NoTf32IsASwitchOfFp32Runs) {
  EXPECT_TRUE(parse({"--no-tf32"}).no_tf32);
  EXPECT_TRUE(parse({"--dtype", "fp32", "--no-tf32"}).no_tf32);
  EXPECT_EQ(error_of({"--no-tf32=1"}), "--no-tf32 takes no value");
  EXPECT_EQ(error_of({"--dtype", "bf16", "--no-tf32"}),
            "--no-tf32 needs --dtype fp32 (bf16 GEMMs take bf16 inputs, never TF32)");
}

TEST(Options, InconsistentOptionsAreAnError) {
  EXPECT_EQ(error_of({"--lr", "1e-5"}), "--min-lr 0.0003 is above --lr 1e-05");
  EXPECT_EQ(error_of({"--lr", "1e-5", "--lr-schedule", "constant"}), "(no error)");
  EXPECT_EQ(error_of({"--save-every", "10"}), "--save-every needs --save FILE");
  EXPECT_EQ(error_of({"--init", "a.bin", "--resume", "b.bin"}),
            "--init and --resume exclude each other (--resume restores the model)");
  EXPECT_EQ(error_of({"--virtual-stages", "2"}), "--virtual-stages 2 needs --schedule interleaved");
  EXPECT_EQ(error_of({"--microbatch-group", "6"}), "--microbatch-group needs --schedule interleaved");
  EXPECT_EQ(error_of({"--schedule", "interleaved", "--microbatch-group", "6"}), "(no error)");
  EXPECT_EQ(error_of({"--schedule", "zb-v", "--virtual-stages", "2"}), "(no error)");
  EXPECT_EQ(error_of({"--schedule", "zb-v", "--virtual-stages", "3"}),
            "--virtual-stages 3 does not fit --schedule zb-v, which runs 2 chunks per rank");
  EXPECT_EQ(error_of({"--schedule", "v-half", "--virtual-stages", "2"}), "(no error)");
  EXPECT_EQ(error_of({"--schedule", "v-min", "--virtual-stages", "3"}),
            "--virtual-stages 3 does not fit --schedule v-min, which runs 2 chunks per rank");
  EXPECT_EQ(error_of({"--schedule", "zb-interleaved", "--virtual-stages", "3"}), "(no error)");
  EXPECT_EQ(error_of({"--schedule", "zb-interleaved"}),
            "--schedule zb-interleaved needs --virtual-stages 2 or more (chunks per rank); got 1");
  EXPECT_EQ(error_of({"--schedule-file", "s.txt", "--schedule", "1f1b"}),
            "--schedule-file and --schedule exclude each other");
  EXPECT_EQ(error_of({"--schedule-file", "s.txt", "--virtual-stages", "2"}),
            "--schedule-file and --virtual-stages exclude each other (the file's chunks say it)");
  EXPECT_EQ(error_of({"--trace-step", "3"}), "--trace-step needs --trace FILE");
  EXPECT_EQ(error_of({"--trace", "t.json", "--trace-step", "30", "--steps", "20"}),
            "--trace-step 30 is after the last step (--steps 20)");
  EXPECT_EQ(error_of({"--schedule-costs", "1,1,1"}), "--schedule-costs needs --print-schedule");
  EXPECT_EQ(error_of({"--format", "pytorch-csv"}), "--format needs --print-schedule");
  EXPECT_EQ(error_of({"--print-schedule", "--format", "pytorch-csv", "--trace", "t.json"}),
            "--format pytorch-csv excludes --trace (stdout then holds the CSV alone)");
  EXPECT_EQ(error_of({"--world", "8"}), "--world needs --print-memory or --plan-layouts (a run's world is mpirun's)");
  EXPECT_EQ(error_of({"--plan-layouts", "--world", "8"}), "(no error)");
  EXPECT_EQ(error_of({"--plan-layouts", "--world", "0"}), "--world 0 is out of range (must be at least 1)");
  EXPECT_EQ(error_of({"--costs", "t.json"}), "--costs needs --plan-layouts");
  EXPECT_EQ(error_of({"--plan-layouts", "--print-memory"}), "--plan-layouts excludes --print-memory and --print-schedule");
  EXPECT_EQ(error_of({"--plan-layouts", "--layers-per-stage", "1,3"}),
            "--plan-layouts chooses the schedule and the split: it excludes --schedule-file, --layers-per-stage and "
            "--pipeline-layout");
}

// The string is taken as given; check_layout parses it and fits it to the run (TrainLayout).
TEST(Options, PipelineLayoutIsTakenAndExcludesTheOtherSplits) {
  EXPECT_EQ(parse({"--pipeline-layout", "E|t*2|tL"}).pipeline_layout, "E|t*2|tL");
  EXPECT_EQ(error_of({"--pipeline-layout", ""}), "--pipeline-layout needs a non-empty value");
  EXPECT_EQ(error_of({"--pipeline-layout", "EtL", "--layers-per-stage", "1"}),
            "--layers-per-stage and --pipeline-layout both give the split: pass one");
  EXPECT_EQ(error_of({"--plan-layouts", "--pipeline-layout", "EtL"}),
            error_of({"--plan-layouts", "--layers-per-stage", "1,3"}));
}

TEST(Options, ScheduleCostsAreThreeOrFourNumbers) {
  EXPECT_EQ(error_of({"--print-schedule", "--schedule-costs", "1,1"}),
            "--schedule-costs 1,1 needs 3 or 4 numbers: TF,TI,TW[,LATENCY]");
  EXPECT_EQ(error_of({"--print-schedule", "--schedule-costs", "0,1,1"}),
            "--schedule-costs 0,1,1 is out of range (must be above 0)");
  EXPECT_EQ(error_of({"--print-schedule", "--schedule-costs", "1,-1,1"}),
            "--schedule-costs 1,-1,1 is out of range (must be at least 0)");
  EXPECT_EQ(error_of({"--print-schedule", "--schedule-costs", "1,x,1"}),
            "--schedule-costs: 'x' is not a finite number");
}

// --tp N (issue 33): at least 1, and with every other option (the sizes it must divide are checked
// against the model by check_tensor_parallel_sizes, TrainLayout's tests; --plan-layouts chooses
// its own tp).
TEST(Options, TensorParallelIsAtLeastOneAndTakesEveryOption) {
  EXPECT_EQ(parse({"--tp", "2"}).tp, 2);
  EXPECT_EQ(parse({}).tp, 1);
  EXPECT_EQ(error_of({"--tp", "0"}), "--tp 0 is out of range (must be at least 1)");
  EXPECT_EQ(error_of({"--tp", "2", "--plan-layouts"}), "(no error)");
  EXPECT_EQ(error_of({"--tp", "1", "--dtype", "bf16", "--zero", "1"}), "(no error)");
  EXPECT_EQ(error_of({"--tp", "2", "--recompute", "--attention", "fused"}), "(no error)");
  EXPECT_EQ(error_of({"--tp", "2", "--dtype", "bf16", "--zero", "1"}), "(no error)");
  EXPECT_EQ(error_of({"--tp", "4", "--trace", "t.json"}), "(no error)");
}

// --layers-per-stage auto (trainer/program/auto_layer_split.h): a split of its own, measured on
// the run's ranks, so not beside another split nor in a plan of other ranks.
TEST(Options, LayersPerStageAutoIsTakenAndExcludesTheOtherSplits) {
  EXPECT_TRUE(parse({"--layers-per-stage", "auto"}).layers_per_stage_auto);
  EXPECT_TRUE(parse({"--layers-per-stage", "auto"}).layers_per_stage.empty());
  EXPECT_FALSE(parse({"--layers-per-stage", "auto", "--layers-per-stage", "2,2"}).layers_per_stage_auto);
  EXPECT_EQ(parse({"--layers-per-stage", "2,3,3,0"}).layers_per_stage, (std::vector<int>{2, 3, 3, 0}));
  EXPECT_EQ(error_of({"--layers-per-stage", "auto", "--pipeline-layout", "EtL"}),
            "--layers-per-stage auto and --pipeline-layout both give the split: pass one");
  EXPECT_EQ(error_of({"--layers-per-stage", "auto", "--print-memory"}),
            "--layers-per-stage auto measures on the run's ranks: it excludes --print-memory");
  EXPECT_EQ(error_of({"--layers-per-stage", "auto", "--plan-layouts"}),
            "--layers-per-stage auto measures on the run's ranks: it excludes --plan-layouts");
}

// --documents and the sequence-length warm-up (issue 34): the warm-up's start in [1, --seq-len],
// given only with a warm-up, which runs with or without --documents; both with --tp above 1.
TEST(Options, DocumentOptionsRefuseABadWarmUpInOneLine) {
  const TrainOptions options = parse({"--documents", "--seq-len-warmup", "100", "--seq-len-warmup-start", "16"});
  EXPECT_TRUE(options.documents);
  EXPECT_EQ(options.seq_len_warmup, 100);
  EXPECT_EQ(options.seq_len_warmup_start, 16);
  EXPECT_EQ(error_of({"--documents", "--seq-len-warmup", "9", "--seq-len-warmup-start", "0"}),
            "--seq-len-warmup-start 0 is not in [1, --seq-len 64]");
  EXPECT_EQ(error_of({"--documents", "--seq-len-warmup", "9", "--seq-len-warmup-start", "65"}),
            "--seq-len-warmup-start 65 is not in [1, --seq-len 64]");
  EXPECT_EQ(error_of({"--documents", "--seq-len-warmup-start", "16"}),
            "--seq-len-warmup-start needs --seq-len-warmup STEPS");
  EXPECT_EQ(error_of({"--seq-len-warmup", "9"}), "(no error)");
  EXPECT_EQ(error_of({"--documents", "--seq-len-warmup", "9", "--tp", "2"}), "(no error)");
  EXPECT_EQ(error_of({"--documents", "--seq-len", "4"}), "(no error)");
}

// --sequence-parallel shards a stage's tokens over its tp ranks: one line when there is nothing to
// shard over and when tp does not divide T; it runs with a schedule file and variable lengths.
TEST(Options, SequenceParallelErrorsNameWhatIsMissing) {
  EXPECT_EQ(error_of({"--sequence-parallel"}),
            "--sequence-parallel needs --tp 2 or more (it shards each stage's tokens over its tp ranks)");
  EXPECT_EQ(error_of({"--sequence-parallel", "--tp", "4", "--seq-len", "62"}),
            "--sequence-parallel: --tp 4 does not divide --seq-len 62 (each tp rank holds B T / tp tokens)");
  EXPECT_EQ(error_of({"--sequence-parallel", "--tp", "2", "--documents", "--seq-len-warmup", "9"}), "(no error)");
  EXPECT_EQ(error_of({"--sequence-parallel", "--tp", "4", "--seq-len-warmup", "9", "--seq-len-warmup-start", "5"}),
            "(no error)");
  for (const char* split : {"zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "dualpipev"})
    EXPECT_EQ(error_of({"--sequence-parallel", "--tp", "2", "--schedule", split}), "(no error)") << split;
  EXPECT_EQ(error_of({"--sequence-parallel", "--tp", "2", "--schedule", "zb-interleaved", "--virtual-stages", "2"}),
            "(no error)");
  EXPECT_EQ(error_of({"--sequence-parallel", "--tp", "2", "--schedule-file", "zb.txt"}), "(no error)");
  EXPECT_TRUE(parse({"--sequence-parallel", "--tp", "2"}).sequence_parallel);
}
