// The train program's options: the defaults of issues 4 and 5, every option parsed in both the
// "--name value" and "--name=value" forms, and a --help that lists every option with its default
// (their errors: tests/option_errors_test.cu). Runs in both builds (host code only).
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/options_parsing.h"
#include "trainer/command_line/options.h"

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
  EXPECT_EQ(o.attention, "auto");
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
                                "--attention",
                                "fused",
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
  EXPECT_EQ(o.attention, "fused");
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
  EXPECT_EQ(o.given.size(), 44u)
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
      {"--attention auto|fused|materialized", "(default: auto)"},
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
      {"--documents", "(default: off)"},
      {"--seq-len-warmup N", "(default: 0)"},
      {"--seq-len-warmup-start N", "(default: 8)"},
      {"--log FILE", "(default: none)"},
      {"--timeout N", "(default: 300)"},
      {"--max-skipped N", "(default: 5)"},
      {"--pp N", "(default: 0)"},
      {"--dp N", "(default: 1)"},
      {"--tp N", "(default: 1)"},
      {"--sequence-parallel", "(default: off)"},
      {"--schedule afab|1f1b|interleaved|zb-h1|zb-h2|zb-v|v-half|v-min|looped-bfs|zb-interleaved|dualpipev|pipedream", "(default: 1f1b)"},
      {"--update-every N", "(default: 1)"},
      {"--weight-stashing on|off", "(default: on)"},
      {"--vertical-sync", "(default: off)"},
      {"--schedule-file FILE", "(default: none)"},
      {"--virtual-stages N", "(default: 1)"},
      {"--microbatch-group N", "(default: 0)"},
      {"--recompute", "(default: off)"},
      {"--zero N", "(default: 0)"},
      {"--layers-per-stage N,N,...|auto", "(default: none)"},
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
