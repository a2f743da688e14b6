#!/usr/bin/python3
"""What an emulated network latency adds to a training step, with the executor's transfer stream
(transfers beside the compute stream) and without it (TRAIN_TRANSFERS_IN_COMPUTE_STREAM=1), against
the schedule simulator's two predictions: a benchmark of issue 13's overlap for the CPU build, not
a test (it takes minutes).
    tools/overlap_latency.py [--latencies-ms 0,20,50] [--rounds 3] [--steps 8] [--ranks 4]
                             [--dir DIR] [-- TRAIN OPTIONS...]
First a run at latency 0 with --trace gives the mean F and B times (tools/trace_svg.py --summary),
the costs of `./train --print-schedule --schedule-costs TF,TB/2,TB/2,LATENCY`, whose two makespans
are the predictions (transfers in the compute stream, and beside it). Then each round runs every
latency in both modes, in turn (so that a change in the machine's load falls on both), each
`CUDA_CPU_NCCL_LATENCY_US=N mpirun -np RANKS ./train --steps STEPS --val-every 0 --sample-every 0
--log ...`, its step time the median of its steps from the third on. Prints every run, then per
latency and mode the median over the rounds and what the latency adds to it (against the same
mode's latency 0), beside what the simulator predicts it adds, and whether the transfer stream's
added time is nearer the "beside" prediction than the "in the stream" one. Default TRAIN OPTIONS:
--microbatches 8 (p = RANKS, 1F1B, the default model). The predictions cover the schedule only;
the step's other NCCL operations (the tied embedding's sum, the norm's gather, the non-finite
count) pay the latency too, about 3 x LATENCY in both modes.
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
    means = dict(re.findall(r"\b(forward|backward) ([0-9.]+)", summary.splitlines()[-1]))
    if "forward" not in means or "backward" not in means:
        fail("the trace's summary has no mean forward and backward: " + summary)
    return float(means["forward"]), float(means["backward"])


def predicted_ms(ranks, extra, t_f, t_b, latency_ms):
    costs = "%g,%g,%g,%g" % (t_f, t_b / 2, t_b / 2, latency_ms)
    text = mpirun(ranks, ["--print-schedule", "--schedule-costs", costs] + extra)
    in_stream = re.search(r"predicted makespan ([0-9.]+) t_f", text)
    beside = re.search(r"beside the compute stream.*makespan ([0-9.]+) t_f", text)
    if not in_stream:
        fail("--print-schedule printed no makespan:\n" + text)
    # Without a latency the simulator prints one makespan: both ways are the same.
    return float(in_stream.group(1)) * t_f, float((beside or in_stream).group(1)) * t_f


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
    t_f, t_b = measured_costs(options.ranks, extra, directory)
    print("t_f %.2f ms, t_b %.2f ms (mean over the stages, latency 0, transfer stream)" % (t_f, t_b))
    predicted = {latency: predicted_ms(options.ranks, extra, t_f, t_b, latency) for latency in latencies}
    modes = {"beside": {}, "in stream": {"TRAIN_TRANSFERS_IN_COMPUTE_STREAM": "1"}}
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
    print("\n| latency (ms) | step, beside (ms) | step, in stream (ms) | adds, beside | adds, in stream "
          "| predicted adds, beside | predicted adds, in stream |")
    print("|---|---|---|---|---|---|---|")
    for latency in latencies:
        added = {mode: median[(latency, mode)] - median[(0, mode)] for mode in modes}
        in_stream, beside = (p - q for p, q in zip(predicted[latency], predicted[0]))
        print("| %g | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |" % (
            latency, median[(latency, "beside")], median[(latency, "in stream")], added["beside"],
            added["in stream"], beside, in_stream))
    for latency in latencies[1:]:
        in_stream, beside = (p - q for p, q in zip(predicted[latency], predicted[0]))
        added = median[(latency, "beside")] - median[(0, "beside")]
        nearer = abs(added - beside) < abs(added - in_stream)
        print("latency %g ms: the transfer stream adds %.0f ms, nearer the %s prediction (%.0f beside, %.0f in "
              "the stream); saved against the compute stream: %.0f ms of %.0f (%.1f%%)" % (
                  latency, added, "beside" if nearer else "in-the-stream", beside, in_stream,
                  median[(latency, "in stream")] - median[(latency, "beside")], median[(latency, "in stream")],
                  100 * (1 - median[(latency, "beside")] / median[(latency, "in stream")])))


if __name__ == "__main__":
    main()
