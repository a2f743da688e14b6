// The train program's options: the defaults of issues 4 and 5, every option parsed in both the
// "--name value" and "--name=value" forms, one-line errors for every kind of bad input, and a
// --help that lists every option with its default. Runs in both builds (host code only).
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainer/command_line/options.h"

namespace {

TrainOptions parse(const std::vector<std::string>& arguments) {
  std::vector<const char*> argv = {"train"};
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

std::string error_of(const std::vector<std::string>& arguments) {
  try {
    parse(arguments);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Options, DefaultsAreTheIssuesDefaults) {
  const TrainOptions o = parse({});

  EXPECT_EQ(o.train_data, "data/kjv.txt");
  EXPECT_EQ(o.val_data, "");
  EXPECT_EQ(o.tokenizer, "");
  EXPECT_EQ(o.init, "");
  EXPECT_EQ(o.layers, 4);
  EXPECT_EQ(o.heads, 4);
  EXPECT_EQ(o.dim, 128);
  EXPECT_EQ(o.seq_len, 64);
  EXPECT_EQ(o.vocab, 0);
  EXPECT_EQ(o.dtype, "fp32");
  EXPECT_EQ(o.master_weights, 1);
  EXPECT_FALSE(o.no_tf32);
  EXPECT_EQ(o.batch, 8);
  EXPECT_EQ(o.microbatches, 4);
  EXPECT_EQ(o.steps, 2000);
  EXPECT_EQ(o.lr, 3e-3f);
  EXPECT_EQ(o.lr_schedule, "cosine");
  EXPECT_EQ(o.min_lr, 3e-4f);
  EXPECT_EQ(o.warmup, 20);
  EXPECT_EQ(o.weight_decay, 0.1f);
  EXPECT_EQ(o.beta1, 0.9f);
  EXPECT_EQ(o.beta2, 0.95f);
  EXPECT_EQ(o.eps, 1e-8f);
  EXPECT_EQ(o.grad_clip, 1.0f);
  EXPECT_EQ(o.val_every, 100);
  EXPECT_EQ(o.val_batches, 8);
  EXPECT_EQ(o.sample_every, 200);
  EXPECT_EQ(o.sample_len, 128);
  EXPECT_EQ(o.sample_temperature, 0.8f);
  EXPECT_EQ(o.save, "");
  EXPECT_EQ(o.save_every, 0);
  EXPECT_EQ(o.resume, "");
  EXPECT_EQ(o.seed, 1337u);
  EXPECT_FALSE(o.shuffle);
  EXPECT_EQ(o.log, "");
  EXPECT_EQ(o.pp, 0);
  EXPECT_EQ(o.dp, 1);
  EXPECT_EQ(o.schedule, "1f1b");
  EXPECT_EQ(o.virtual_stages, 1);
  EXPECT_FALSE(o.recompute);
  EXPECT_TRUE(o.layers_per_stage.empty());
  EXPECT_FALSE(o.print_schedule);
  EXPECT_EQ(o.schedule_file, "");
  EXPECT_EQ(o.schedule_costs, (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(o.trace, "");
  EXPECT_EQ(o.trace_step, 0);
  EXPECT_FALSE(o.help);
  EXPECT_TRUE(o.given.empty());
}

TEST(Options, EveryOptionParses) {
  const TrainOptions o = parse({"--train-data",
                                "d/train_*.bin",
                                "--val-data",
                                "d/val_*.bin",
                                "--tokenizer",
                                "d/gpt2_tokenizer.bin",
                                "--save",
                                "out/model.bin",
                                "--init",
                                "gpt2_124M.bin",
                                "--layers",
                                "12",
                                "--heads",
                                "6",
                                "--dim",
                                "384",
                                "--seq-len",
                                "256",
                                "--vocab",
                                "50257",
                                "--dtype",
                                "bf16",
                                "--master-weights",
                                "0",
                                "--batch",
                                "2",
                                "--microbatches",
                                "16",
                                "--steps",
                                "5000",
                                "--lr",
                                "6e-4",
                                "--lr-schedule",
                                "constant",
                                "--min-lr",
                                "0",
                                "--warmup",
                                "700",
                                "--weight-decay",
                                "0",
                                "--beta1",
                                "0.8",
                                "--beta2",
                                "0.999",
                                "--eps",
                                "1e-6",
                                "--grad-clip",
                                "0",
                                "--val-every",
                                "0",
                                "--val-batches",
                                "20",
                                "--sample-every",
                                "250",
                                "--sample-len",
                                "64",
                                "--sample-temperature",
                                "1.5",
                                "--save-every",
                                "1000",
                                "--seed",
                                "18446744073709551615",
                                "--shuffle",
                                "--log",
                                "out/log.jsonl",
                                "--pp",
                                "4",
                                "--dp",
                                "2",
                                "--schedule",
                                "interleaved",
                                "--virtual-stages",
                                "2",
                                "--recompute",
                                "--layers-per-stage",
                                "2,4,4,2",
                                "--print-schedule",
                                "--schedule-costs",
                                "1.5,0.75,0.5,0.25",
                                "--trace",
                                "out/trace.json",
                                "--trace-step",
                                "7"});

  EXPECT_EQ(o.train_data, "d/train_*.bin");
  EXPECT_EQ(o.val_data, "d/val_*.bin");
  EXPECT_EQ(o.tokenizer, "d/gpt2_tokenizer.bin");
  EXPECT_EQ(o.save, "out/model.bin");
  EXPECT_EQ(o.layers, 12);
  EXPECT_EQ(o.heads, 6);
  EXPECT_EQ(o.dim, 384);
  EXPECT_EQ(o.seq_len, 256);
  EXPECT_EQ(o.vocab, 50257);
  EXPECT_EQ(o.dtype, "bf16");
  EXPECT_EQ(o.master_weights, 0);
  EXPECT_EQ(o.batch, 2);
  EXPECT_EQ(o.microbatches, 16);
  EXPECT_EQ(o.steps, 5000);
  EXPECT_EQ(o.lr, 6e-4f);
  EXPECT_EQ(o.lr_schedule, "constant");
  EXPECT_EQ(o.min_lr, 0.0f);
  EXPECT_EQ(o.warmup, 700);
  EXPECT_EQ(o.weight_decay, 0.0f);
  EXPECT_EQ(o.beta1, 0.8f);
  EXPECT_EQ(o.beta2, 0.999f);
  EXPECT_EQ(o.eps, 1e-6f);
  EXPECT_EQ(o.grad_clip, 0.0f);
  EXPECT_EQ(o.val_every, 0);
  EXPECT_EQ(o.val_batches, 20);
  EXPECT_EQ(o.sample_every, 250);
  EXPECT_EQ(o.sample_len, 64);
  EXPECT_EQ(o.sample_temperature, 1.5f);
  EXPECT_EQ(o.save_every, 1000);
  EXPECT_EQ(o.seed, 18446744073709551615u);
  EXPECT_TRUE(o.shuffle);
  EXPECT_EQ(o.log, "out/log.jsonl");
  EXPECT_EQ(o.pp, 4);
  EXPECT_EQ(o.dp, 2);
  EXPECT_EQ(o.schedule, "interleaved");
  EXPECT_EQ(o.virtual_stages, 2);
  EXPECT_TRUE(o.recompute);
  EXPECT_EQ(o.layers_per_stage, (std::vector<int>{2, 4, 4, 2}));
  EXPECT_TRUE(o.print_schedule);
  EXPECT_EQ(o.schedule_costs, (std::vector<double>{1.5, 0.75, 0.5, 0.25}));
  EXPECT_EQ(o.trace, "out/trace.json");
  EXPECT_EQ(o.trace_step, 7);
  EXPECT_EQ(o.init, "gpt2_124M.bin");
  EXPECT_EQ(o.given.size(), 43u)
      << "every option but --resume (it excludes --init), --schedule-file (it excludes --schedule) and --help";
  EXPECT_EQ(o.given.count("layers-per-stage"), 1u);
}

TEST(Options, ResumeParses) { EXPECT_EQ(parse({"--resume", "out/model.bin"}).resume, "out/model.bin"); }

TEST(Options, KeyEqualsValueFormParsesLikeTwoArguments) {
  const TrainOptions o = parse({"--layers=6", "--lr=3e-4", "--train-data=a=b.txt", "--schedule=afab"});
  EXPECT_EQ(o.layers, 6);
  EXPECT_EQ(o.lr, 3e-4f);
  EXPECT_EQ(o.train_data, "a=b.txt");
  EXPECT_EQ(o.schedule, "afab");
}

TEST(Options, LastValueWinsAndOnlyGivenOptionsAreRecorded) {
  const TrainOptions o = parse({"--layers", "6", "--layers", "8", "--dim", "128"});
  EXPECT_EQ(o.layers, 8);
  EXPECT_EQ(o.given, (std::set<std::string>{"layers", "dim"}));
}

TEST(Options, HelpIsSetWhateverElseIsOnTheLine) {
  EXPECT_TRUE(parse({"--help"}).help);
  EXPECT_TRUE(parse({"--layers", "x", "-h"}).help);
}

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
  EXPECT_EQ(error_of({"--layers-per-stage", "2,0,2"}), "--layers-per-stage 2,0,2 is out of range (must be at least 1)");
}

TEST(Options, ChoiceOutsideItsListIsAnError) {
  EXPECT_EQ(error_of({"--lr-schedule", "linear"}), "--lr-schedule linear is not one of cosine|constant");
  EXPECT_EQ(error_of({"--schedule", "gpipe"}), "--schedule gpipe is not one of afab|1f1b|interleaved|zb-h1|zb-h2|zb-v|v-half|v-min|looped-bfs|zb-interleaved|dualpipev");
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

TEST(Options, HelpListsEveryOptionWithItsDefault) {
  // Each option's line as it must start and end: "  --name VALUE ... (default: X)".
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"--train-data PATH", "(default: data/kjv.txt)"},
      {"--val-data PATH", "(default: none)"},
      {"--tokenizer FILE", "(default: none)"},
      {"--init FILE", "(default: none)"},
      {"--layers N", "(default: 4)"},
      {"--heads N", "(default: 4)"},
      {"--dim N", "(default: 128)"},
      {"--seq-len N", "(default: 64)"},
      {"--vocab N", "(default: 0)"},
      {"--dtype fp32|bf16", "(default: fp32)"},
      {"--master-weights N", "(default: 1)"},
      {"--no-tf32", "(default: off)"},
      {"--batch N", "(default: 8)"},
      {"--microbatches N", "(default: 4)"},
      {"--steps N", "(default: 2000)"},
      {"--lr X", "(default: 0.003)"},
      {"--lr-schedule cosine|constant", "(default: cosine)"},
      {"--min-lr X", "(default: 0.0003)"},
      {"--warmup N", "(default: 20)"},
      {"--weight-decay X", "(default: 0.1)"},
      {"--beta1 X", "(default: 0.9)"},
      {"--beta2 X", "(default: 0.95)"},
      {"--eps X", "(default: 1e-08)"},
      {"--grad-clip X", "(default: 1)"},
      {"--val-every N", "(default: 100)"},
      {"--val-batches N", "(default: 8)"},
      {"--sample-every N", "(default: 200)"},
      {"--sample-len N", "(default: 128)"},
      {"--sample-temperature X", "(default: 0.8)"},
      {"--save FILE", "(default: none)"},
      {"--save-every N", "(default: 0)"},
      {"--resume FILE", "(default: none)"},
      {"--seed N", "(default: 1337)"},
      {"--shuffle", "(default: off)"},
      {"--log FILE", "(default: none)"},
      {"--timeout N", "(default: 300)"},
      {"--max-skipped N", "(default: 5)"},
      {"--pp N", "(default: 0)"},
      {"--dp N", "(default: 1)"},
      {"--schedule afab|1f1b|interleaved|zb-h1|zb-h2|zb-v|v-half|v-min|looped-bfs|zb-interleaved|dualpipev", "(default: 1f1b)"},
      {"--schedule-file FILE", "(default: none)"},
      {"--virtual-stages N", "(default: 1)"},
      {"--microbatch-group N", "(default: 0)"},
      {"--recompute", "(default: off)"},
      {"--zero N", "(default: 0)"},
      {"--layers-per-stage N,N,...", "(default: none)"},
      {"--pipeline-layout STRING", "(default: none)"},
      {"--print-schedule", "(default: off)"},
      {"--schedule-costs TF,TI,TW[,LAT]", "(default: 1,1,1,0)"},
      {"--pair-cost sum|max", "(default: sum)"},
      {"--format grid|pytorch-csv", "(default: grid)"},
      {"--print-memory", "(default: off)"},
      {"--memory-limit BYTES", "(default: none)"},
      {"--world N", "(default: 0)"},
      {"--plan-layouts", "(default: off)"},
      {"--costs FILE", "(default: none)"},
      {"--trace FILE", "(default: none)"},
      {"--trace-step N", "(default: 0)"}};
  std::istringstream help(train_options_help());
  std::vector<std::string> option_lines;
  for (std::string line; std::getline(help, line);) {
    if (line.rfind("  --", 0) == 0) option_lines.push_back(line);
  }

  ASSERT_EQ(option_lines.size(), expected.size() + 1) << "every option, and --help";
  for (size_t i = 0; i < expected.size(); i++) {
    const std::string& line = option_lines[i];
    EXPECT_EQ(line.rfind("  " + expected[i].first + " ", 0), 0u) << line;
    EXPECT_EQ(line.substr(line.size() - expected[i].second.size()), expected[i].second) << line;
  }
  EXPECT_EQ(option_lines.back().rfind("  --help ", 0), 0u);
}
