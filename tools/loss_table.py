#!/usr/bin/python3
"""The loss table of docs/training.md from a --log file (one JSON object per step):

    tools/loss_table.py run.jsonl [--every 200]

A row for step 1 and every EVERY steps after: the step's training loss, the mean of the 20 steps
up to it (single steps jump with the part of the corpus being read) and the validation loss
where the run measured one, to 4 places as the step line prints them. Then the figures
docs/training.md quotes beside it: how often the gradient norm was above 1 (clipped), the median
step time, and each stage's mean idle share.
"""
import argparse
import json


def rows(records, every):
    by_step = {r["step"]: r for r in records}
    losses = [by_step[s]["loss"] for s in sorted(by_step)]
    for step in [1] + list(range(every, max(by_step) + 1, every)):
        if step not in by_step:
            continue
        window = losses[max(0, step - 20):step]
        val = by_step[step].get("val_loss")
        yield step, by_step[step]["loss"], sum(window) / len(window), val


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--every", type=int, default=200)
    args = parser.parse_args()
    with open(args.log) as f:
        records = [json.loads(line) for line in f if line.strip()]
    print("| step | training loss | mean of 20 steps | validation loss |")
    print("|-----:|--------------:|-----------------:|----------------:|")
    for step, loss, mean, val in rows(records, args.every):
        print("| %-4d | %-13.4f | %-16.4f | %-15s |" % (step, loss, mean, "%.4f" % val if val is not None else ""))
    print()
    for line in summary(records):
        print(line)


def summary(records):
    norms = [r["grad_norm"] for r in records]
    clipped = lambda lo, hi: sum(n > 1 for n in norms[lo:hi])
    ms = sorted(r["ms"] for r in records)
    lines = ["gradient norm above 1: %d of the first 30 steps, %.0f%% of steps 31 to 300, %.0f%% of the rest"
             % (clipped(0, 30), 100 * clipped(30, 300) / max(1, len(norms[30:300])),
                100 * clipped(300, None) / max(1, len(norms[300:])))]
    lines.append("median step %.0f ms over %d steps" % (ms[len(ms) // 2], len(ms)))
    stages = {}
    for r in records:
        for s in r.get("stages", []):
            stages.setdefault(s["stage"], []).append(s["idle"])
    if stages:
        lines.append("mean idle share by stage: " + ", ".join(
            "%d: %.0f%%" % (k, 100 * sum(v) / len(v)) for k, v in sorted(stages.items())))
    return lines


if __name__ == "__main__":
    main()
