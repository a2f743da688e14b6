#!/usr/bin/python3
"""./train --trace (trainer/program/measured_timeline.h, pipeline/timeline.h) and tools/trace_svg.py as a specification.

Traces come from short real runs of ./train under `mpirun -np 4` with a tiny model (2 steps of zb-h1,
4 layers, m = 5: about 3 s each): one pipeline of 4 stages, and 2 replicas of 2 stages; the
predicted trace from --print-schedule --trace with the same options. The checks read the JSON
with Python's own parser: every rank's track holds exactly the steps its schedule has (the
predicted trace's, which the simulator makes from the schedule; the measured events are named by
what the executor ran), one track's events never overlap, every send has one flow to the receive
of the same message on the neighbouring stage; and tools/trace_svg.py draws every event and sums
them up. Run by tools/run_tests.sh with Debian's /usr/bin/python3:
    /usr/bin/python3 tests/trace_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed".
"""
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

from check_runner import run_checks, skipped_for_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "trace_svg.py")
TRAIN = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
MPIRUN = os.environ.get("MPIRUN", "mpirun")
SMALL_RUN = ["--steps", "2", "--layers", "4", "--heads", "2", "--dim", "32", "--seq-len", "16", "--batch", "2",
             "--microbatches", "5", "--schedule", "zb-h1", "--val-every", "0", "--sample-every", "0"]
SVG = "{http://www.w3.org/2000/svg}"
DIRECTORY = tempfile.TemporaryDirectory()
# The JSON's microseconds have three decimals: two events that touch may seem to overlap by that much.
ROUNDING_US = 0.002


@functools.lru_cache(maxsize=None)
def trace(kind, dp, extra=()):
    """The trace of the small run ('measured', or 'predicted' by --print-schedule) with dp replicas on 4 ranks."""
    path = os.path.join(DIRECTORY.name, "%s_dp%d_%s.json" % (kind, dp, "_".join(extra)))
    arguments = SMALL_RUN + ["--dp", str(dp), "--trace", path] + list(extra)
    if kind == "predicted":
        arguments.append("--print-schedule")
    subprocess.run([MPIRUN, "-np", "4", TRAIN] + arguments, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, text=True, timeout=120)
    with open(path) as file:
        return path, json.load(file)


def tracks(document):
    """The complete events by (replica, stage), in time order."""
    by_track = {}
    for event in document["traceEvents"]:
        if event["ph"] == "X":
            by_track.setdefault((event["pid"], event["tid"]), []).append(event)
    for events in by_track.values():
        events.sort(key=lambda e: e["ts"])
    return by_track


def exactly_the_schedules_steps():
    for dp in (1, 2):
        measured, predicted = tracks(trace("measured", dp)[1]), tracks(trace("predicted", dp)[1])
        stages = 4 // dp
        expected_tracks = {(r, s) for r in range(dp) for s in range(stages)}
        if set(measured) != expected_tracks:
            return False, "dp %d: tracks %s" % (dp, sorted(measured))
        for (replica, stage), events in measured.items():
            names = [e["name"] for e in events]
            planned = [e["name"] for e in predicted[(0, stage)]]
            if names != planned:
                return False, "dp %d replica %d stage %d ran %s, its schedule is %s" % (dp, replica, stage, names, planned)
    return True, "every track of 4 stages and of 2 x 2 has its schedule's steps, in order"


def events_never_overlap():
    worst = 0.0
    for dp in (1, 2):
        for key, events in tracks(trace("measured", dp)[1]).items():
            for before, after in zip(events, events[1:]):
                worst = max(worst, before["ts"] + before["dur"] - after["ts"])
    return worst <= ROUNDING_US, "the largest overlap of two events of one track: %.3f us" % worst


def every_send_has_its_flow():
    """Each send of each group event starts one flow, which ends in the event on the neighbouring stage
    (of the same replica) that receives that message."""
    for dp in (1, 2):
        document = trace("measured", dp)[1]
        by_track = tracks(document)
        starts = {e["id"]: e for e in document["traceEvents"] if e["ph"] == "s"}
        ends = {e["id"]: e for e in document["traceEvents"] if e["ph"] == "f"}
        if set(starts) != set(ends):
            return False, "flows without both ends: %s" % sorted(set(starts) ^ set(ends))

        def enclosing(point):
            """The latest-starting event of the point's track that holds it."""
            holding = [e for e in by_track[(point["pid"], point["tid"])] if e["ts"] <= point["ts"] <= e["ts"] + e["dur"]]
            return max(holding, key=lambda e: e["ts"]) if holding else None

        sends = sum(len(re.findall(r"(?:^|\+)s[FB]\d+", e["name"])) for events in by_track.values() for e in events)
        if len(starts) != sends:
            return False, "dp %d: %d sends, %d flows" % (dp, sends, len(starts))
        for flow_id, start in starts.items():
            end = ends[flow_id]
            sender, receiver = enclosing(start), enclosing(end)
            message = start["name"]  # "sF3": its receive is "rF3" (one chunk per stage)
            step = 1 if message[1] == "F" else -1
            if sender is None or receiver is None or message not in sender["name"].split("+"):
                return False, "flow %s %s is not bound to its send" % (flow_id, message)
            if ("r" + message[1:]) not in receiver["name"].split("+") or end["pid"] != start["pid"] \
                    or end["tid"] != start["tid"] + step:
                return False, "flow %s %s ends in %s on stage %d" % (flow_id, message, receiver["name"], end["tid"])
    return True, "every send's flow ends at its receive, on the next (sF) or previous (sB) stage"


def trace_step_and_about():
    _, document = trace("measured", 1, ("--trace-step", "1"))
    what = document["otherData"]["what"]
    ok = what.startswith("the measured timeline of step 1;") and document["otherData"]["schedule"] == "zb-h1 schedule"
    return ok, "otherData: %s" % document["otherData"]


def svg_draws_every_event():
    path, document = trace("measured", 2)
    output = path[:-len(".json")] + ".svg"
    done = subprocess.run([TOOL, path, "-o", output], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return False, "status %d: %s" % (done.returncode, done.stderr.strip())
    root = ElementTree.parse(output).getroot()
    counts = {}
    for (replica, stage), events in tracks(document).items():
        group = next((e for e in root.iter() if e.get("id") == "replica_%d_stage_%d" % (replica, stage)), None)
        counts[(replica, stage)] = (len(list(group.iter(SVG + "rect"))) if group is not None else -1, len(events))
    ok = all(drawn == events for drawn, events in counts.values())
    return ok, "(boxes drawn, events) per track: %s" % counts


def summary_names_idle_and_costs():
    path, _ = trace("measured", 1)
    done = subprocess.run([TOOL, path, "--summary"], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    ok = (done.returncode == 0 and len(lines) == 5 and all(re.match(r"stage \d: idle 0\.\d{3}; mean ms: forward ", line)
                                                          for line in lines[:4])
          and re.match(r"mean ms over all stages: forward [\d.]+, input gradient [\d.]+, weight gradient [\d.]+$",
                       lines[4]))
    return ok, "said %r" % done.stdout


def bad_trace_fails_in_one_line():
    path = os.path.join(DIRECTORY.name, "bad.json")
    with open(path, "w") as file:
        file.write('{"traceEvents": [{"ph": "X", "name": "F0"}]}')
    done = subprocess.run([TOOL, path, "-o", path + ".svg"], capture_output=True, text=True, timeout=60)
    said = done.stderr.strip()
    ok = done.returncode == 1 and said.startswith("trace_svg.py: %s: a complete event without" % path) and "\n" not in said
    return ok, "status %d, said %r" % (done.returncode, said)


CHECKS = {
    "Trace.EveryTrackHoldsExactlyItsSchedulesSteps": exactly_the_schedules_steps,
    "Trace.EventsOfATrackNeverOverlap": events_never_overlap,
    "Trace.EverySendHasItsFlowToTheMatchingReceive": every_send_has_its_flow,
    "Trace.TraceStepChoosesTheStepAndTheFileSaysWhatItIs": trace_step_and_about,
    "TraceSvg.DrawsEveryEventOfEveryTrack": svg_draws_every_event,
    "TraceSvg.SummaryGivesIdleSharesAndMeanCosts": summary_names_idle_and_costs,
    "TraceSvg.BadTraceFailsInOneLine": bad_trace_fails_in_one_line,
}


def run_one(name):
    if skipped_for_ranks(4):
        return skipped_for_ranks(4)
    try:
        return CHECKS[name]()
    except subprocess.CalledProcessError as error:
        return False, "%s exited %d: %s" % (" ".join(error.cmd[:4]), error.returncode, (error.stderr or "").strip())
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as error:
        return False, "%s: %s" % (type(error).__name__, error)


if __name__ == "__main__":
    sys.exit(run_checks(list(CHECKS), run_one))
