#!/usr/bin/python3
"""Our memory plan (./train --print-memory) beside the field's formulas, per pipeline stage.

For a GPT-2 shape on p stages of 1F1B with m microbatches of B sequences of T tokens, prints one
markdown table per case: each stage's planned device bytes, grouped, beside
  - Megatron-LM's theoretical memory (megatron/training/theoretical_memory_usage.py,
    compute_weight_and_optimizer_memory): 18 bytes per parameter, its README's figure for bf16
    parameters with fp32 gradients, fp32 main parameters and two fp32 Adam moments
    (2 + 4 + 4 + 8), on its own parameter count (no linear biases, no position embedding); and
    the activations of Korthikanti et al. 2022 (arXiv 2205.05198) Table 2 without parallelism,
    s·b·h·34 + 5·a·s²·b bytes per layer (16-bit activations, 1-byte dropout masks), times the L
    layers of the p microbatches the first stage holds (times min(1, m/p)), plus the embedding's
    8·s·b·p (the int64 token ids) and s·b·h·p (its dropout mask), as compute_activation_memory
    adds them; with pp > 1 Megatron counts no output layer. Megatron gives the first stage's
    activations only, and for the other stages the parameters of L/p layers.
  - llm.c's activations (karpathy/llm.c train_gpt2.cu, fill_in_activation_sizes, without
    recompute and without cuDNN): per layer and token ln1, atty, attproj, residual2, ln2, fcproj,
    residual3 (C each), fch and fch_gelu (4C each), qkvr (3C) in the element type, att (NH·T),
    and ln1's and ln2's mean and rstd in fp32; per token once encoded, lnf, scratch_btc (C
    each), scratch_bt4c (4C), output (max(3C, NH·T, Vp)), and lnf's mean, rstd and losses in fp32.
    llm.c runs one microbatch on one GPU; a stage's share is its layers (and encoded on the first
    stage, lnf and its statistics and losses on the last) times the microbatches our plan holds in
    flight there, plus the scratch once (output at Vp wide on the last stage, else
    max(3C, NH·T)).
Ours comes from --print-memory (which allocates nothing) with the materialised attention (the
probabilities that llm.c's and the formulas' attention terms count; ./train's default, the fused
attention, is in docs/kernels.md's table), grouped: weights and optimizer
(parameters, gradients, the head's wte gradient, AdamW moments, master weights and the norm's
and AdamW's tables), activations (slot activations and inputs, backward scratch, recompute
working sets, weight-gradient inputs, targets, loss sum, cuBLAS's workspace), transfers (gradient message buffers,
send buffers, set-up's transient). --print-memory prints each item to 3 significant digits
and only the peak exactly: the groups are sums of the printed figures, and the tool fails when
they do not add up to the exact peak within the printed figures' rounding.

    tools/memory_formulas.py                the tables of docs/pipeline.md's section "Memory:
                                            the plan against the field's formulas"
    tools/memory_formulas.py --layers 24 --heads 16 --dim 1024 [--seq-len 1024 --vocab 50257
        --world 4 --microbatches 8 --batch 1 --dtype fp32|bf16]      one case
TRAIN names the program (default ./train).
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
MIB = 1024 * 1024
UNITS = {"B": 1, "KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB, "TiB": 1024 ** 4, "PiB": 1024 ** 5}
NAME_WIDTH, COLUMN_WIDTH = 30, 13  # memory_table's columns (trainer/program/memory_report.cpp)
WEIGHTS = {"parameters", "gradients", "head's wte gradient", "AdamW moments", "master weights", "norm workspace",
           "norm partials", "squared norm", "norm table", "non-finite ranks, norm", "AdamW gate",
           "AdamW region table", "AdamW block table"}
ACTIVATIONS = {"slot activations", "slot inputs", "backward scratch", "recompute working set",
               "weight-gradient inputs", "targets", "loss sum", "cuBLAS workspace"}
TRANSFERS = {"send buffers", "output gradients", "input gradients", "set-up's transient"}
TOTALS = {"ranks", "resident", "peak", "peak, bytes", "pinned host memory"}


class Case:
    def __init__(self, title, layers, heads, dim, seq_len=1024, vocab=50257, world=4, microbatches=8, batch=1,
                 dtype="fp32"):
        self.title, self.L, self.NH, self.C, self.T, self.V = title, layers, heads, dim, seq_len, vocab
        self.p, self.m, self.B, self.dtype = world, microbatches, batch, dtype
        self.Vp = (vocab + 127) // 128 * 128  # model/config.cpp's padding (checked against --print-memory)
        self.element = 4 if dtype == "fp32" else 2

    def layers_of_stage(self):
        if self.L % self.p:
            raise ValueError("--layers %d does not split evenly over %d stages" % (self.L, self.p))
        return self.L // self.p

    def train_flags(self):
        return ["--print-memory", "--world", str(self.p), "--layers", str(self.L), "--heads", str(self.NH), "--dim",
                str(self.C), "--seq-len", str(self.T), "--vocab", str(self.V), "--schedule", "1f1b",
                "--microbatches", str(self.m), "--batch", str(self.B), "--dtype", self.dtype,
                "--attention", "materialized", "--layers-per-stage", ",".join([str(self.layers_of_stage())] * self.p)]


DOC_CASES = [Case("GPT-2 124M, fp32", 12, 12, 768), Case("GPT-2 124M, bf16", 12, 12, 768, dtype="bf16"),
             Case("GPT-2 350M, fp32", 24, 16, 1024), Case("GPT-2 350M, bf16", 24, 16, 1024, dtype="bf16")]


# ---- Megatron-LM ----

def megatron_parameters(case):
    """(parameters of the transformer block, of the embedding): compute_weight_and_optimizer_memory's
    count for a GPT without GQA, MoE or SwiGLU, LayerNorm with bias, ffn = 4h, tied embeddings."""
    h = case.C
    layer = 2 * h * (4 * h + 2) + 2 * h * h * 2  # MLP and the two LayerNorms, then the attention
    return layer * case.L + 2 * h, h * case.Vp     # the block holds the final LayerNorm


def megatron_weights_and_optimizer(case, stage):
    block, embedding = megatron_parameters(case)
    # The most loaded shard (the first stage) holds the embedding; "other shards just have" L/p layers.
    return 18 * (block / case.p + (embedding if stage == 0 else 0))


def megatron_activations(case, attention_scores=True):
    """The first stage's activations: Korthikanti et al.'s s·b·h·34 + 5·a·s²·b per layer (without the
    5·a·s²·b term: what theoretical_memory_usage.py itself uses, which assumes the attention is
    recomputed or fused) times L, plus the embedding's input and dropout mask for p microbatches."""
    s, b, h, a, p = case.T, case.B, case.C, case.NH, case.p
    per_layer = s * b * h * 34 + (5 * a * s * s * b if attention_scores else 0)
    embedding = 8 * s * b * p + s * b * h * p
    return (per_layer * case.L + embedding) * min(1, case.m / p)


# ---- llm.c ----

def llmc_layer_bytes(case):
    """One layer's activations for one microbatch (fill_in_activation_sizes, recompute 0)."""
    BT = case.B * case.T
    return BT * ((18 * case.C + case.NH * case.T) * case.element + 4 * 4)


def llmc_head_bytes(case):
    """lnf, and lnf_mean, lnf_rstd, losses in fp32, for one microbatch."""
    BT = case.B * case.T
    return BT * (case.C * case.element + 3 * 4)


def llmc_scratch_bytes(case, with_logits):
    """output, scratch_bt4c and scratch_btc: one microbatch's, held once."""
    widest = max(3 * case.C, case.NH * case.T, case.Vp if with_logits else 0)
    return case.B * case.T * (widest + 5 * case.C) * case.element


def llmc_stage_activations(case, stage, slots):
    first, last = stage == 0, stage == case.p - 1
    per_slot = case.layers_of_stage() * llmc_layer_bytes(case)
    per_slot += (case.B * case.T * case.C * case.element if first else 0) + (llmc_head_bytes(case) if last else 0)
    return per_slot * slots + llmc_scratch_bytes(case, last)


def llmc_whole_model(case):
    """(weights and optimizer, activations) of llm.c's one GPU: parameters and gradients in the element
    type, fp32 m and v, fp32 master weights with bf16 (its default)."""
    C, L = case.C, case.L
    parameters = case.Vp * C + case.T * C + L * (12 * C * C + 13 * C) + 2 * C
    weights = parameters * (2 * case.element + 8 + (4 if case.element == 2 else 0))
    activations = (L * llmc_layer_bytes(case) + case.B * case.T * case.C * case.element + llmc_head_bytes(case)
                   + llmc_scratch_bytes(case, True))
    return weights, activations


# ---- our plan ----

def parse_bytes(cell):
    """(count, bytes each, the printed figure's rounding per buffer) of a --print-memory cell, or None for '-'."""
    if cell == "-":
        return None
    match = re.fullmatch(r"(?:(\d+)x )?([\d.]+) (B|KiB|MiB|GiB|TiB|PiB)", cell)
    if not match:
        raise ValueError("--print-memory printed a size this tool cannot read: %r" % cell)
    count = int(match.group(1) or 1)
    figure, unit = match.group(2), UNITS[match.group(3)]
    decimals = len(figure.partition(".")[2])
    return count, float(figure) * unit, (0.5 * 10 ** -decimals * unit if unit > 1 else 0)


def our_plan(case):
    """Per stage a dict: the groups' bytes, the slots in flight, and the exact peak."""
    done = subprocess.run([TRAIN] + case.train_flags(), capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ValueError("./train --print-memory failed: %s" % (done.stderr.strip().splitlines() or ["?"])[-1])
    lines = done.stdout.splitlines()
    if "Vp=%d," % case.Vp not in lines[0]:
        raise ValueError("--print-memory's model is not Vp = %d: %s" % (case.Vp, lines[0]))
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("stage 0"))
    stages = [{"weights": 0.0, "activations": 0.0, "slots activations": 0.0, "transfers": 0.0, "rounding": 0.0,
               "slots": 0} for _ in range(case.p)]
    for line in lines[header + 1:]:
        if not line.strip():
            break
        name = re.sub(r", chunk \d+$", "", line[:NAME_WIDTH].strip())
        cells = [line[NAME_WIDTH + COLUMN_WIDTH * s:NAME_WIDTH + COLUMN_WIDTH * (s + 1)].strip()
                 for s in range(case.p)]
        if name == "peak, bytes":
            for stage, cell in zip(stages, cells):
                stage["peak"] = int(cell)
            continue
        if name in TOTALS:
            continue
        group = next((g for g, names in [("weights", WEIGHTS), ("activations", ACTIVATIONS),
                                          ("transfers", TRANSFERS)] if name in names), None)
        if group is None:
            raise ValueError("--print-memory lists an item this tool does not group: %r" % name)
        for stage, cell in zip(stages, cells):
            size = parse_bytes(cell)
            if size is None:
                continue
            count, each, rounding = size
            stage[group] += count * each
            stage["rounding"] += count * rounding
            if name == "slot activations":
                stage["slots activations"] += count * each
                stage["slots"] += count
    for index, stage in enumerate(stages):
        total = stage["weights"] + stage["activations"] + stage["transfers"]
        if abs(total - stage["peak"]) > stage["rounding"] + 1:
            raise ValueError("stage %d's printed items add up to %.0f bytes, not its peak %d (rounding %.0f)"
                             % (index, total, stage["peak"], stage["rounding"]))
    return stages


# ---- the table ----

def mib(value):
    return "%.0f" % (value / MIB)


def case_table(case):
    stages = our_plan(case)
    rows = ["**%s**: L = %d, NH = %d, C = %d, Vp = %d, T = %d, B = %d, p = %d, 1F1B, m = %d. MiB."
            % (case.title, case.L, case.NH, case.C, case.Vp, case.T, case.B, case.p, case.m), "",
            "| stage | layers | slots | ours: weights + optimizer | ours: activations | of which slots "
            "| ours: transfers | ours: peak | Megatron: weights + optimizer | Megatron: activations "
            "| Megatron: total | llm.c: activations |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for index, stage in enumerate(stages):
        weights = megatron_weights_and_optimizer(case, index)
        activations = megatron_activations(case) if index == 0 else None
        rows.append("| %d | %d | %d | %s | %s | %s | %s | %.1f | %s | %s | %s | %s |" % (
            index, case.layers_of_stage(), stage["slots"], mib(stage["weights"]), mib(stage["activations"]),
            mib(stage["slots activations"]), mib(stage["transfers"]), stage["peak"] / MIB, mib(weights),
            mib(activations) if activations is not None else "-",
            mib(weights + activations) if activations is not None else "-",
            mib(llmc_stage_activations(case, index, stage["slots"]))))
    llmc_weights, llmc_activations = llmc_whole_model(case)
    rows += ["", "llm.c on one GPU, the whole model: weights + optimizer %s, activations %s (%s a layer). "
             "Megatron's own estimator (no 5·a·s²·b term, times 1.05 without sequence parallelism): "
             "%s of activations on stage 0." % (mib(llmc_weights), mib(llmc_activations),
                                                mib(llmc_layer_bytes(case)),
                                                mib(1.05 * megatron_activations(case, attention_scores=False)))]
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--dim", type=int)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    model = [args.layers, args.heads, args.dim]
    if any(x is not None for x in model) and None in model:
        parser.error("give --layers, --heads and --dim together (none: the doc's cases)")
    cases = DOC_CASES if model[0] is None else [
        Case("L = %d, C = %d, %s" % (args.layers, args.dim, args.dtype), args.layers, args.heads, args.dim,
             args.seq_len, args.vocab, args.world, args.microbatches, args.batch, args.dtype)]
    try:
        print("\n\n".join(case_table(case) for case in cases))
    except (ValueError, OSError, subprocess.SubprocessError) as error:
        print("memory_formulas.py: %s" % error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
