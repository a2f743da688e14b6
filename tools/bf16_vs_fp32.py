#!/usr/bin/python3
"""Trains the same model from the same seed twice, in fp32 and in bf16 (--dtype bf16), and compares
the two loss curves: a benchmark of bf16 training, not a test (the default model's 300 steps take
minutes in the CPU build).
    tools/bf16_vs_fp32.py [--steps 300] [--ranks 4] [--dir DIR] [--plot curve.svg] [-- TRAIN OPTIONS...]
    tools/bf16_vs_fp32.py --logs FP32.jsonl BF16.jsonl [--plot curve.svg]
Runs `mpirun -np RANKS ./train --steps STEPS --log DIR/fp32.jsonl` and the same with --dtype bf16
(RANKS 1: ./train alone), or reads two logs such runs wrote. Prints each run's mean of its last 20
training losses, their relative difference, and PASS when it is within 2% (issue 12's bound: bf16
trains like fp32) or FAIL, exit status 0 or 1. --plot draws both runs' training loss (mean of 20
steps) and validation loss, and below them bf16's difference from fp32, with matplotlib
(python3-matplotlib, /usr/bin/python3; tools/plot_log.py reads the logs).
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_log import read_log, series, trailing_mean  # noqa: E402

WINDOW = 20
BOUND = 0.02


def train(dtype, ranks, steps, log, extra):
    command = ([] if ranks == 1 else ["mpirun", "-np", str(ranks)]) + [
        "./train", "--steps", str(steps), "--log", log, "--dtype", dtype] + extra
    print("running: %s" % " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def last_mean(records):
    losses = [float(r["loss"]) for r in records[-WINDOW:]]
    return sum(losses) / len(losses)


def plot(fp32, bf16, output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "bf16_vs_fp32", "font.size": 9})
    figure, (loss, difference) = plt.subplots(2, 1, figsize=(9, 6.5), gridspec_kw={"height_ratios": [2.2, 1]},
                                              sharex=True)
    colors = {"fp32": "tab:blue", "bf16": "tab:red"}
    means = {}
    for name, records in (("fp32", fp32), ("bf16", bf16)):
        steps, losses = series(records, "loss")
        means[name] = trailing_mean(losses, WINDOW)
        line, = loss.plot(steps, means[name], color=colors[name], linewidth=1.3,
                          label="%s training loss, mean of %d steps" % (name, WINDOW))
        line.set_gid("%s_training_loss" % name)
        val_steps, val_losses = series(records, "val_loss")
        if val_steps:
            line, = loss.plot(val_steps, val_losses, color=colors[name], marker="o", markersize=3, linestyle="--",
                              linewidth=1, label="%s validation loss" % name)
            line.set_gid("%s_validation_loss" % name)
    loss.set_ylabel("loss (nats per token)")
    loss.grid(alpha=0.3)
    loss.legend(loc="upper right")
    loss.set_title("fp32 and bf16 from the same seed", loc="left")
    steps, _ = series(fp32, "loss")
    relative = [(b - f) / f for f, b in zip(means["fp32"], means["bf16"])]
    line, = difference.plot(steps[:len(relative)], [100 * r for r in relative], color="tab:purple", linewidth=1)
    line.set_gid("relative_difference")
    for bound in (-100 * BOUND, 100 * BOUND):
        difference.axhline(bound, color="gray", linestyle=":", linewidth=1)
    difference.set_ylabel("bf16 - fp32 (% of fp32)")
    difference.set_xlabel("step")
    difference.grid(alpha=0.3)
    figure.savefig(output, bbox_inches="tight", metadata={"Date": None} if output.endswith(".svg") else None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--ranks", type=int, default=4, help="mpirun -np (1: ./train alone)")
    parser.add_argument("--dir", help="where the logs go (default: a temporary directory)")
    parser.add_argument("--logs", nargs=2, metavar=("FP32", "BF16"), help="compare these logs instead of training")
    parser.add_argument("--plot", help="the picture to write (.svg, .png, .pdf)")
    parser.add_argument("train_options", nargs="*", help="more ./train options, after --")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        if arguments.logs:
            paths = arguments.logs
        else:
            directory = arguments.dir or scratch
            paths = [os.path.join(directory, "%s.jsonl" % dtype) for dtype in ("fp32", "bf16")]
            for dtype, path in zip(("fp32", "bf16"), paths):
                train(dtype, arguments.ranks, arguments.steps, path, arguments.train_options)
        fp32, bf16 = read_log(paths[0]), read_log(paths[1])
    if len(fp32) < WINDOW or len(bf16) < WINDOW:
        print("bf16_vs_fp32: FAIL: the logs need %d steps each, they have %d and %d" % (WINDOW, len(fp32), len(bf16)))
        return 1
    fp32_mean, bf16_mean = last_mean(fp32), last_mean(bf16)
    relative = (bf16_mean - fp32_mean) / fp32_mean
    print("fp32: mean of steps %d-%d: %.4f" % (fp32[-WINDOW]["step"], fp32[-1]["step"], fp32_mean))
    print("bf16: mean of steps %d-%d: %.4f" % (bf16[-WINDOW]["step"], bf16[-1]["step"], bf16_mean))
    verdict = "PASS" if abs(relative) <= BOUND else "FAIL"
    print("bf16_vs_fp32: %s: bf16's mean is %+.2f%% of fp32's (bound %.0f%%)" % (verdict, 100 * relative, 100 * BOUND))
    if arguments.plot:
        plot(fp32, bf16, arguments.plot)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
