#!/usr/bin/python3
"""Draws a run's --log file (one JSON object per step, trainer/program/log.h) as one picture: the training
loss (each step faint, the mean of the last --smooth steps solid) and the validation loss on top,
and below it small panels of the learning rate, the gradient norm before clipping, tokens/s and
each pipeline stage's idle share of the step.
    tools/plot_log.py run.jsonl -o run.svg [--title TEXT] [--smooth 20] [--beside LABEL=OTHER.jsonl ...]
--beside draws other runs' training loss (the same mean) and validation loss on the loss panel, to
compare runs (ids beside_0_loss, beside_0_validation, ...); the small panels stay the first run's.
Needs Debian's python3-matplotlib (make test installs it). The format follows the output's
extension (svg, png, pdf). An SVG keeps its text as text and names each panel and curve by id
(loss, training_loss, validation_loss, learning_rate, grad_norm, tokens_per_s, stage_idle,
stage_0_idle, ...), so that tests and scripts can find them. A resumed run's log may repeat
steps: the last record of a step wins. A bad log ends with one line naming the line and exit 1.
"""
import argparse
import json
import math
import re
import sys

PANELS = [("learning_rate", "learning rate", "lr"), ("grad_norm", "gradient norm (before clipping)", "grad_norm"),
          ("tokens_per_s", "tokens/s", "tokens_per_s")]


def fail(message):
    print("plot_log.py: %s" % message, file=sys.stderr)
    sys.exit(1)


def read_log(path):
    """The records of the log in step order, one per step."""
    try:
        with open(path) as file:
            lines = file.read().splitlines()
    except OSError as error:
        fail("%s: cannot read the log: %s" % (path, error.strerror))
    by_step = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        # printf writes a non-finite double as nan, -nan or inf, which JSON has no word for.
        text = re.sub(r"(?<=: )-?nan\b", "NaN", line)
        text = re.sub(r"(?<=: )(-?)inf\b", r"\1Infinity", text)
        try:
            record = json.loads(text)
        except ValueError:
            fail("%s line %d: not a JSON record" % (path, number))
        if not isinstance(record, dict) or not isinstance(record.get("step"), int) or "loss" not in record:
            fail("%s line %d: a record needs a \"step\" and a \"loss\"" % (path, number))
        by_step[record["step"]] = record
    if not by_step:
        fail("%s: the log has no steps" % path)
    return [by_step[step] for step in sorted(by_step)]


def trailing_mean(values, window):
    """Each value's mean with up to window - 1 values before it, leaving non-finite ones out."""
    means = []
    for i in range(len(values)):
        finite = [v for v in values[max(0, i + 1 - window):i + 1] if math.isfinite(v)]
        means.append(sum(finite) / len(finite) if finite else math.nan)
    return means


def series(records, key):
    """(steps, values) of the records that have key."""
    chosen = [r for r in records if key in r]
    return [r["step"] for r in chosen], [float(r[key]) for r in chosen]


def draw(records, output, title, smooth, beside=()):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Text stays text in an SVG, and the file is the same for the same log (no date, fixed ids).
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "plot_log", "font.size": 9})

    figure = plt.figure(figsize=(10, 8.5))
    grid = figure.add_gridspec(3, 2, height_ratios=[2.2, 1, 1], hspace=0.45, wspace=0.25)
    loss = figure.add_subplot(grid[0, :])
    loss.set_gid("loss")
    steps, losses = series(records, "loss")
    loss.plot(steps, losses, color="tab:blue", alpha=0.25, linewidth=0.6, label="training, each step")
    mean_line, = loss.plot(steps, trailing_mean(losses, smooth), color="tab:blue", linewidth=1.4,
                           label="training, mean of %d steps" % smooth)
    mean_line.set_gid("training_loss")
    val_steps, val_losses = series(records, "val_loss")
    if val_steps:
        val_line, = loss.plot(val_steps, val_losses, color="tab:orange", marker="o", markersize=3, linewidth=1.2,
                              label="validation")
        val_line.set_gid("validation_loss")
    for i, (label, other) in enumerate(beside):
        color = "C%d" % (i + 2)  # after the first run's blue and orange
        other_steps, other_losses = series(other, "loss")
        line, = loss.plot(other_steps, trailing_mean(other_losses, smooth), color=color, linewidth=1.2,
                          linestyle="--", label="%s, training, mean of %d steps" % (label, smooth))
        line.set_gid("beside_%d_loss" % i)
        other_val_steps, other_val = series(other, "val_loss")
        if other_val_steps:
            line, = loss.plot(other_val_steps, other_val, color=color, marker="s", markersize=3, linewidth=0,
                              label="%s, validation" % label)
            line.set_gid("beside_%d_validation" % i)
    loss.set_title(title or "loss", loc="left")
    loss.set_xlabel("step")
    loss.set_ylabel("loss (nats per token)")
    loss.grid(alpha=0.3)
    loss.legend(loc="upper right")

    cells = [grid[1, 0], grid[1, 1], grid[2, 0]]
    for (gid, panel_title, key), cell in zip(PANELS, cells):
        axes = figure.add_subplot(cell)
        axes.set_gid(gid)
        panel_steps, values = series(records, key)
        line, = axes.plot(panel_steps, values, color="tab:green", linewidth=0.8)
        line.set_gid(gid + "_line")
        axes.set_title(panel_title, loc="left")
        axes.grid(alpha=0.3)
    axes.set_xlabel("step")

    idle = figure.add_subplot(grid[2, 1])
    idle.set_gid("stage_idle")
    idle.set_title("idle share per stage (mean of %d steps)" % smooth, loc="left")
    # A single process is one stage, whose idle share (host work between kernels) says nothing of a pipeline.
    stages = sorted({s["stage"] for r in records for s in r.get("stages", [])})
    stages = stages if len(stages) > 1 else []
    for stage in stages:
        shares = [(r["step"], s["idle"]) for r in records for s in r.get("stages", []) if s["stage"] == stage]
        line, = idle.plot([step for step, _ in shares], trailing_mean([v for _, v in shares], smooth),
                          linewidth=0.9, label="stage %d" % stage)
        line.set_gid("stage_%d_idle" % stage)
    if stages:
        idle.set_ylim(0, 1)
        idle.legend(loc="upper right", ncol=min(len(stages), 4), fontsize=7)
    else:
        idle.text(0.5, 0.5, "one stage: no pipeline, nothing waits", ha="center", va="center",
                  transform=idle.transAxes)
    idle.set_xlabel("step")
    idle.grid(alpha=0.3)

    try:
        figure.savefig(output, bbox_inches="tight", metadata={"Date": None} if output.endswith(".svg") else None)
    except (OSError, ValueError) as error:
        fail("%s: cannot write the picture: %s" % (output, error))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", help="a ./train --log file")
    parser.add_argument("-o", "--output", required=True, help="the picture to write (.svg, .png, .pdf)")
    parser.add_argument("--title", default="", help="the loss panel's title (default: loss)")
    parser.add_argument("--smooth", type=int, default=20, help="steps in the training loss's and idle shares' mean")
    parser.add_argument("--beside", action="append", default=[], metavar="LABEL=LOG",
                        help="another run's log whose losses the loss panel also draws, labelled")
    arguments = parser.parse_args()
    if arguments.smooth < 1:
        fail("--smooth must be at least 1")
    beside = []
    for given in arguments.beside:
        label, equals, path = given.partition("=")
        if not equals or not label or not path:
            fail("--beside %s: give LABEL=LOG" % given)
        beside.append((label, read_log(path)))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail("needs matplotlib: apt-get install python3-matplotlib (and run with /usr/bin/python3)")
    draw(read_log(arguments.log), arguments.output, arguments.title, arguments.smooth, beside)


if __name__ == "__main__":
    main()
