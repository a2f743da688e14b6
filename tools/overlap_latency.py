#!/usr/bin/python3
"""What an emulated network latency adds to a training step, with the executor's transfer stream
(transfers beside the compute stream) and without it (TRAIN_TRANSFERS_IN_COMPUTE_STREAM=1), against
the schedule simulator's three predictions: a benchmark of issue 13's overlap for the CPU build, not
a test (it takes minutes).
    tools/overlap_latency.py [--latencies-ms 0,20,50] [--rounds 3] [--steps 8] [--ranks 4]
                             [--dir DIR] [-- TRAIN OPTIONS...]
First a run at latency 0 with --trace gives the mean F, B (or I and W) times (tools/trace_svg.py
--summary), the costs of `./train --print-schedule --schedule-costs TF,TI,TW,LATENCY` (TI = TW =
TB/2 for a fused B), whose makespans are the predictions: one step at a time (transfers in the
compute stream), the executor's two streams (groups in order on a transfer stream beside the
computes), and the data flow (transfers that hold nothing, which one in-order stream of NCCL groups
cannot reach). Then each round runs every latency in both modes, in turn (so that a change in the
machine's load falls on both), each `CUDA_CPU_NCCL_LATENCY_US=N mpirun -np RANKS ./train --steps
STEPS --val-every 0 --sample-every 0 --log ...`, its step time the median of its steps from the
third on. Prints every run, then per latency and mode the median over the rounds and what the
latency adds to it (against the same mode's latency 0), beside what the simulator predicts it adds,
and whether the step with the transfer stream is nearer the transfer-stream prediction than the step
without it. Default TRAIN OPTIONS: --microbatches 8 (p = RANKS, 1F1B, the default model). The
predictions cover the schedule only; the step's other NCCL operations (the tied embedding's sum, the
norm's gather, the non-finite count) pay the latency too, about 3 x LATENCY in both modes.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(message):
    sys.exit("overlap_latency.py: error: " + message)


def mpirun(ranks, arguments, environment=None, capture=True):
    command = ["mpirun", "-np", str(ranks), "./train"] + arguments
    env = dict(os.environ, **(environment or {}))
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        fail("%s failed:\n%s" % (" ".join(command), done.stderr))
    return done.stdout


def step_ms(log):
    with open(log) as file:
        records = [json.loads(line) for line in file if line.strip()]
    times = [float(r["ms"]) for r in records if "ms" in r and "loss" in r and r["step"] >= 3]
    if not times:
        fail("%s: no steps from the third on" % log)
    return statistics.median(times)


def measured_costs(ranks, extra, directory):
    trace = os.path.join(directory, "step.json")
    mpirun(ranks, ["--steps", "4", "--val-every", "0", "--sample-every", "0", "--trace", trace] + extra)
    summary = subprocess.run([sys.executable, os.path.join(HERE, "trace_svg.py"), trace, "--summary"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout
    means = dict(re.findall(r"\b(forward|backward|input gradient|weight gradient) ([0-9.]+)", summary.splitlines()[-1]))
    if "forward" not in means:
        fail("the trace's summary has no mean forward: " + summary)
    if "backward" in means:  # a fused B: taken as half I, half W
        return float(means["forward"]), float(means["backward"]) / 2, float(means["backward"]) / 2
    if "input gradient" in means and "weight gradient" in means:
        return float(means["forward"]), float(means["input gradient"]), float(means["weight gradient"])
    fail("the trace's summary has no mean backward, nor input and weight gradients: " + summary)


def predicted_ms(ranks, extra, t_f, t_i, t_w, latency_ms):
    """The simulator's makespans: one step at a time (groups in the compute stream), the executor's
    two streams, and the data flow (transfers that hold nothing)."""
    costs = "%g,%g,%g,%g" % (t_f, t_i, t_w, latency_ms)
    text = mpirun(ranks, ["--print-schedule", "--schedule-costs", costs] + extra)
    in_stream = re.search(r"predicted makespan ([0-9.]+) t_f", text)
    streamed = re.search(r"transfer stream.*makespan ([0-9.]+) t_f", text)
    beside = re.search(r"data flow.*makespan ([0-9.]+) t_f", text)
    if not in_stream:
        fail("--print-schedule printed no makespan:\n" + text)
    # The simulator leaves out a makespan equal to the one step at a time.
    return tuple(float((found or in_stream).group(1)) * t_f for found in (in_stream, streamed, beside))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latencies-ms", default="0,20,50")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--dir")
    parser.add_argument("train", nargs="*", help="options for ./train (after --)")
    options = parser.parse_args()
    latencies = [float(x) for x in options.latencies_ms.split(",")]
    if latencies[0] != 0:
        fail("--latencies-ms must start with 0: the added times are measured against it")
    extra = options.train or ["--microbatches", "8"]
    directory = options.dir or tempfile.mkdtemp(prefix="overlap_latency.")
    os.makedirs(directory, exist_ok=True)
    t_f, t_i, t_w = measured_costs(options.ranks, extra, directory)
    print("t_f %.2f ms, t_i %.2f ms, t_w %.2f ms (mean over the stages, latency 0, transfer stream)" % (t_f, t_i, t_w))
    predicted = {latency: predicted_ms(options.ranks, extra, t_f, t_i, t_w, latency) for latency in latencies}
    modes = {"transfer stream": {}, "compute stream": {"TRAIN_TRANSFERS_IN_COMPUTE_STREAM": "1"}}
    runs = {(latency, mode): [] for latency in latencies for mode in modes}
    for round_number in range(options.rounds):
        for latency in latencies:
            for mode, environment in modes.items():
                log = os.path.join(directory, "run.jsonl")
                if os.path.exists(log):
                    os.remove(log)
                mpirun(options.ranks, ["--steps", str(options.steps), "--val-every", "0", "--sample-every", "0",
                                       "--log", log] + extra,
                       dict(environment, CUDA_CPU_NCCL_LATENCY_US=str(int(latency * 1000))), capture=False)
                runs[(latency, mode)].append(step_ms(log))
                print("round %d, latency %g ms, %s: %.0f ms a step" % (round_number + 1, latency, mode,
                                                                      runs[(latency, mode)][-1]), flush=True)
    median = {key: statistics.median(values) for key, values in runs.items()}
    added = {key: median[key] - median[(0, key[1])] for key in median}
    predicted_added = {latency: [now - then for now, then in zip(predicted[latency], predicted[0])]
                       for latency in latencies}
    print("\n| latency (ms) | step, transfer stream (ms) | step, in the compute stream (ms) | adds, transfer stream "
          "| adds, in the compute stream | predicted adds: one step at a time | transfer stream | data flow |")
    print("|---|---|---|---|---|---|---|---|")
    for latency in latencies:
        print("| %g | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |" % (
            (latency, median[(latency, "transfer stream")], median[(latency, "compute stream")], added[(latency, "transfer stream")],
             added[(latency, "compute stream")]) + tuple(predicted_added[latency])))
    for latency in latencies[1:]:
        one_at_a_time, streamed, dataflow = predicted_added[latency]
        with_stream, without = added[(latency, "transfer stream")], added[(latency, "compute stream")]
        print("latency %g ms: the transfer stream saves %.0f ms a step against the compute stream (predicted %.0f); "
              "with it the step is %.0f ms from the transfer-stream prediction, without it %.0f ms from it: %s" % (
                  latency, without - with_stream, one_at_a_time - streamed, abs(with_stream - streamed),
                  abs(without - streamed), "nearer with overlap" if abs(with_stream - streamed) < abs(without - streamed)
                  else "not nearer with overlap"))

if __name__ == "__main__":
    main()
