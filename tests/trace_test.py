#!/usr/bin/python3
"""./train --trace (trainer/program/measured_timeline.h, pipeline/timeline.h) and tools/trace_svg.py as a specification.

Traces come from short real runs of ./train under `mpirun -np 4` with a tiny model (2 steps of zb-h1,
4 layers, m = 5: about 3 s each): one pipeline of 4 stages, and 2 replicas of 2 stages; the
predicted trace from --print-schedule --trace with the same options. The checks read the JSON
with Python's own parser: every rank's track holds exactly the steps its schedule has (the
predicted trace's, which the simulator makes from the schedule; the measured events are named by
what the executor ran), one track's events never overlap, no compute is drawn elsewhere than
measured, every send has one flow to the receive of the same message on the neighbouring stage,
inside both groups' measured times; against the world: every flow ends after it starts (the
ranks' clocks aligned by the barrier, also with one rank's device slowed), and --trace-step's step
has the loss --log gives that step; pipedream's traced step holds the computes --print-schedule
gives it, and its predicted trace the printed schedule with its updates; dualpipev's pairs' backwards on each stage's second compute
track, as predicted; at tp 2 x pp 2 a track per stage and tp rank, the flows within a tp rank; and
tools/trace_svg.py draws every event and sums them up. Run by tools/run_tests.sh with Debian's /usr/bin/python3:
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
# The JSON's microseconds have three decimals: two events that touch may seem to overlap by that much,
# and a flow between them seem to go back by as much.
ROUNDING_US = 0.002
# The details' measured times are in ms with three decimals: 0.5 us each way.
MEASURED_US = 0.5 + ROUNDING_US


# The stream delay (us per device operation) of rank 0 in the late-rank run: a few hundred
# operations per step make its step about 100 ms longer than the others', more than the 50 ms
# of barrier exit skew measured with 4 ranks on 2 loaded cores.
LATE_RANK_DELAY_US = "200"


@functools.lru_cache(maxsize=None)
def trace(kind, dp, extra=()):
    """The trace of the small run ('measured', or 'predicted' by --print-schedule) with dp replicas on 4 ranks,
    and the path of its --log. extra: more options, or "late rank 0" for rank 0's device slowed."""
    path = os.path.join(DIRECTORY.name, "%s_dp%d_%s.json" % (kind, dp, "_".join(extra).replace(" ", "_")))
    options = [option for option in extra if option != "late rank 0"]
    arguments = SMALL_RUN + ["--dp", str(dp), "--trace", path, "--log", path + ".log"] + options
    if kind == "predicted":
        arguments.append("--print-schedule")
    command = [MPIRUN, "-np", "4", TRAIN] + arguments
    if "late rank 0" in extra:  # MPMD: rank 0 with the delay, ranks 1-3 without
        command = [MPIRUN, "-np", "1", "env", "CUDA_CPU_STREAM_DELAY_US=" + LATE_RANK_DELAY_US, TRAIN] + arguments \
            + [":", "-np", "3", TRAIN] + arguments
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                   timeout=120)
    with open(path) as file:
        return path, json.load(file)


def logged_losses(path):
    """The losses --log wrote next to a trace, by step."""
    with open(path + ".log") as file:
        return {record["step"]: record["loss"] for record in map(json.loads, file)}


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


def measured_interval(event):
    """An event's measured start and end (us): its drawn ones, or those its details give when drawn elsewhere."""
    found = re.search(r"\(measured (-?[\d.]+)-(-?[\d.]+) ms\)", event.get("args", {}).get("used", ""))
    if found:
        return float(found.group(1)) * 1e3, float(found.group(2)) * 1e3
    return event["ts"], event["ts"] + event["dur"]


def every_send_has_its_flow():
    """Each send of each group event starts one flow, which ends at the group on the neighbouring stage
    (of the same replica) that receives that message: each end inside its group's measured times
    (within MEASURED_US: the details' rounding), where the arrows are drawn."""
    for dp in (1, 2):
        document = trace("measured", dp)[1]
        by_track = tracks(document)
        starts = {e["id"]: e for e in document["traceEvents"] if e["ph"] == "s"}
        ends = {e["id"]: e for e in document["traceEvents"] if e["ph"] == "f"}
        if set(starts) != set(ends):
            return False, "flows without both ends: %s" % sorted(set(starts) ^ set(ends))

        def group_with(point, action):
            """The event of the point's track that ran `action` ("sF3") while the point's time."""
            for e in by_track[(point["pid"], point["tid"])]:
                begin, end = measured_interval(e)
                if action in e["name"].split("+") and begin - MEASURED_US <= point["ts"] <= end + MEASURED_US:
                    return e
            return None

        sends = sum(len(re.findall(r"(?:^|\+)s[FB]\d+", e["name"])) for events in by_track.values() for e in events)
        if len(starts) != sends:
            return False, "dp %d: %d sends, %d flows" % (dp, sends, len(starts))
        for flow_id, start in starts.items():
            end = ends[flow_id]
            message = start["name"]  # "sF3": its receive is "rF3" (one chunk per stage)
            step = 1 if message[1] == "F" else -1
            if group_with(start, message) is None:
                return False, "flow %s %s does not start at its send" % (flow_id, message)
            if group_with(end, "r" + message[1:]) is None or end["pid"] != start["pid"] \
                    or end["tid"] != start["tid"] + step:
                return False, "flow %s %s does not end at its receive: stage %d at %.3f us" % (
                    flow_id, message, end["tid"], end["ts"])
    return True, "every send's flow ends at its receive, on the next (sF) or previous (sB) stage"


def flows_point_forward(document):
    """(ok, what): every flow's end at or after its start, and each rank's clock correction within its
    barrier's bound (the file's "clock corrections": "rank 0 +0.000 of 0.512 ms, ...")."""
    starts = {e["id"]: e for e in document["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in document["traceEvents"] if e["ph"] == "f"}
    backward = ["%s %s by %.3f us" % (k, starts[k]["name"], starts[k]["ts"] - ends[k]["ts"])
                for k in starts if ends[k]["ts"] < starts[k]["ts"] - ROUNDING_US]
    said = document["otherData"].get("clock corrections", "")
    corrections = re.findall(r"rank \d+ \+(\d+\.\d{3}) of (\d+\.\d{3}) ms", said)
    ranks = len({(e["pid"], e["tid"]) for e in document["traceEvents"] if e["ph"] == "X"})
    if backward or len(corrections) != ranks or said.startswith("none") \
            or any(float(moved) > float(bound) for moved, bound in corrections):
        return False, "%d of %d flows backward (%s); clock corrections: %s" % (
            len(backward), len(starts), ", ".join(backward[:3]), said)
    return True, "%d flows forward; clock corrections: %s" % (len(starts), said)


def flows_end_after_they_start():
    """The ranks' times are aligned by one barrier, corrected within its bounds
    (trainer/program/measured_timeline.cpp): a message's receive then ends after its send started
    (the arrows are drawn at the measured times), within ROUNDING_US."""
    for dp in (1, 2):
        ok, what = flows_point_forward(trace("measured", dp)[1])
        if not ok:
            return False, "dp %d: %s" % (dp, what)
    return True, what


def flows_end_after_they_start_with_a_rank_late():
    """Rank 0's device slowed (the CPU build's CUDA_CPU_STREAM_DELAY_US on that rank only) reaches the
    traced step late: only the barrier gives the ranks one origin, and without it rank 0's receives
    would end before their sends start."""
    ok, what = flows_point_forward(trace("measured", 1, ("late rank 0",))[1])
    return ok, what


def computes_drawn_as_measured():
    """A compute is drawn at its measured times: its details never carry other measured times."""
    for dp in (1, 2):
        for events in tracks(trace("measured", dp)[1]).values():
            moved = [e["name"] for e in events if e["cat"] != "transfer" and "measured" in e.get("args", {}).get("used", "")]
            if moved:
                return False, "dp %d: computes drawn elsewhere than measured: %s" % (dp, moved)
    return True, "no compute of 4 stages or of 2 x 2 drawn elsewhere than measured"


def trace_step_and_about():
    """--trace-step 1 traces step 1, identified by the step's loss (the file's "loss", as --log writes
    it) as well as by the label: the loss of step 1 in the run's log, not that of step 2."""
    path, document = trace("measured", 1, ("--trace-step", "1"))
    about = document["otherData"]
    losses = logged_losses(path)
    ok = (about["what"].startswith("the measured timeline of step 1;") and about["schedule"] == "zb-h1 schedule"
          and float(about.get("loss", "nan")) == losses[1] and losses[1] != losses[2])
    return ok, "otherData: %s; logged losses %s" % (about, losses)


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


# DualPipeV's overlapped pairs (docs/pipeline.md): 4 stages, m = 8 (its least), one layer per chunk.
DUAL_PIPE_V = ("--schedule", "dualpipev", "--layers", "8", "--microbatches", "8")


def dualpipev_pairs_on_the_second_track():
    """Each stage's overlapped pairs' backwards, which ran on the executor's second compute stream, are
    drawn on its second compute track (tid 4 + stage, named so), as the predicted trace draws them: each
    of the 8 tracks exactly the predicted one's steps in order, and no two events of one track overlap."""
    measured, predicted = tracks(trace("measured", 1, DUAL_PIPE_V)[1]), tracks(trace("predicted", 1, DUAL_PIPE_V)[1])
    if set(measured) != {(0, tid) for tid in range(8)} or set(predicted) != set(measured):
        return False, "tracks %s, predicted %s" % (sorted(measured), sorted(predicted))
    names = {e["tid"]: e["args"]["name"] for e in trace("measured", 1, DUAL_PIPE_V)[1]["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    if any(names[4 + stage] != "stage %d, second compute stream" % stage for stage in range(4)):
        return False, "the tracks' names: %s" % names
    for key, events in measured.items():
        ran, planned = [e["name"] for e in events], [e["name"] for e in predicted[key]]
        if ran != planned:
            return False, "track %d ran %s, the predicted one holds %s" % (key[1], ran, planned)
        overlap = max([before["ts"] + before["dur"] - after["ts"] for before, after in zip(events, events[1:])] + [0])
        if overlap > ROUNDING_US:
            return False, "track %d: two events overlap by %.3f us" % (key[1], overlap)
    pairs = sum(len(measured[(0, 4 + stage)]) for stage in range(4))
    return True, "%d pairs' backwards on the 4 second compute tracks, every track its predicted steps" % pairs


# Tensor parallelism: tp 2 x pp 2 with 1F1B (one compute track per stage and tp rank).
TENSOR_PARALLEL = ("--tp", "2", "--pp", "2", "--schedule", "1f1b")


def tensor_parallel_ranks_have_their_own_tracks():
    """At tp 2 x pp 2 each stage's two tp ranks have a track each (tid 2 stage + tp rank, named
    "stage S, tp rank T"), each holding exactly its stage's predicted steps in order, its events never
    overlapping; every flow joins two tracks of one tp rank on neighbouring stages and ends after it
    starts; tools/trace_svg.py labels the rows with the tracks' names and gives each row's group the
    id of its name ("stage 1, tp rank 0" is stage_1_tp_rank_0), holding that track's events."""
    path, document = trace("measured", 1, TENSOR_PARALLEL)
    measured, predicted = tracks(document), tracks(trace("predicted", 1, TENSOR_PARALLEL)[1])
    if set(measured) != {(0, tid) for tid in range(4)} or set(predicted) != {(0, 0), (0, 1)}:
        return False, "tracks %s, predicted %s" % (sorted(measured), sorted(predicted))
    names = {e["tid"]: e["args"]["name"] for e in document["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    if names != {tid: "stage %d, tp rank %d" % (tid // 2, tid % 2) for tid in range(4)}:
        return False, "the tracks' names: %s" % names
    for (_, tid), events in measured.items():
        ran, planned = [e["name"] for e in events], [e["name"] for e in predicted[(0, tid // 2)]]
        if ran != planned:
            return False, "%s ran %s, its stage's schedule is %s" % (names[tid], ran, planned)
        overlap = max([before["ts"] + before["dur"] - after["ts"] for before, after in zip(events, events[1:])] + [0])
        if overlap > ROUNDING_US:
            return False, "%s: two events overlap by %.3f us" % (names[tid], overlap)
    starts = {e["id"]: e for e in document["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in document["traceEvents"] if e["ph"] == "f"}
    if not starts or set(starts) != set(ends):
        return False, "flows: %d starts, %d ends" % (len(starts), len(ends))
    for k, start in starts.items():
        end = ends[k]
        if start["tid"] % 2 != end["tid"] % 2 or abs(start["tid"] // 2 - end["tid"] // 2) != 1:
            return False, "flow %s from %s to %s" % (start["name"], names[start["tid"]], names[end["tid"]])
        if end["ts"] < start["ts"] - ROUNDING_US:
            return False, "flow %s ends %.3f us before it starts" % (start["name"], start["ts"] - end["ts"])
    summary = subprocess.run([TOOL, path, "--summary"], capture_output=True, text=True, timeout=60).stdout.splitlines()
    if [line.split(":")[0] for line in summary[:4]] != [names[tid] for tid in range(4)]:
        return False, "the summary's rows: %s" % summary
    output = path[:-len(".json")] + ".svg"
    subprocess.run([TOOL, path, "-o", output], capture_output=True, text=True, timeout=60)
    groups = {e.get("id"): e for e in ElementTree.parse(output).getroot().iter(SVG + "g")}
    for tid in range(4):
        row = groups.get("stage_%d_tp_rank_%d" % (tid // 2, tid % 2))
        drawn = len(list(row.iter(SVG + "rect"))) if row is not None else -1
        if drawn != len(measured[(0, tid)]):
            return False, "the SVG's row of %s draws %d boxes of its %d events" % (names[tid], drawn,
                                                                                len(measured[(0, tid)]))
    return True, ("4 tracks named by stage and tp rank, each its stage's steps, each drawn in the SVG row of its "
                  "name; %d flows within a tp rank" % len(starts))


def pipedream_step_is_the_printed_step():
    """--schedule pipedream (issue 37), step 2 of 3 traced: each stage's computes are the ones
    --print-schedule gives that step ("F7@4" ran as F7; the updates are not steps of their own), in
    order, although some of its forwards take an input received in step 1; every send has one flow
    (the step's messages alone: a send and its receive share a step), each ending after it starts;
    the file's loss is step 2's in the log."""
    options = ["--schedule", "pipedream", "--grad-clip", "0", "--steps", "3", "--microbatches", "4"]
    path, document = trace("measured", 1, tuple(options + ["--trace-step", "2"]))
    printed = subprocess.run([MPIRUN, "-np", "4", TRAIN, "--print-schedule"] + SMALL_RUN + options, cwd=ROOT,
                             check=True, capture_output=True, text=True, timeout=120).stdout
    step_2 = printed.split("step 2:\n", 1)[1].split("step 3:", 1)[0]
    planned = {int(stage): [a.split("@")[0] for a in actions.split() if not a.startswith("U")]
               for stage, actions in re.findall(r"^stage (\d) \| (.*)$", step_2, re.M)}
    by_track = tracks(document)
    for (_, stage), events in by_track.items():
        ran = [e["name"] for e in events if e["cat"] != "transfer"]
        if ran != planned.get(stage):
            return False, "stage %d computed %s, --print-schedule's step 2 is %s" % (stage, ran, planned.get(stage))
    sends = sum(len(re.findall(r"(?:^|\+)s[FB]\d+", e["name"])) for events in by_track.values() for e in events)
    flows = [e for e in document["traceEvents"] if e["ph"] == "s"]
    forward, what = flows_point_forward(document)
    loss = float(document["otherData"].get("loss", "nan"))
    ok = len(by_track) == 4 and len(flows) == sends and forward and loss == logged_losses(path)[2]
    return ok, "4 tracks of step 2's computes; %d sends, %d flows; %s; loss %r" % (sends, len(flows), what, loss)


def pipedream_predicted_timeline_is_the_printed_schedule():
    """--schedule pipedream --print-schedule --trace (pipeline/pipedream_timeline.h): each stage's
    computes, in time order, are the printed schedule's of the 3 steps, each with the weight version
    printed ("F7@4": "weights v4"); its updates are the printed ones, in order, each at the end of the
    compute printed just before it (an update costs nothing in the model)."""
    options = ("--schedule", "pipedream", "--grad-clip", "0", "--steps", "3", "--microbatches", "4")
    _, document = trace("predicted", 1, options)
    printed = subprocess.run([MPIRUN, "-np", "4", TRAIN, "--print-schedule"] + SMALL_RUN + list(options), cwd=ROOT,
                             check=True, capture_output=True, text=True, timeout=120).stdout
    planned = {}  # the grid of the steps, before the report's timeline
    for stage, actions in re.findall(r"^stage (\d) \| (.*)$", printed.split("\ntimeline of those steps")[0], re.M):
        planned.setdefault(int(stage), []).extend(actions.split())
    updates = 0
    for (_, stage), events in tracks(document).items():
        computes = [e for e in events if e["cat"] not in ("transfer", "update")]
        shown = ["%s@%s" % (e["name"], e.get("args", {}).get("used", "")[len("weights v"):]) for e in computes]
        printed_computes = [a for a in planned.get(stage, []) if not a.startswith("U")]
        if shown != printed_computes:
            return False, "stage %d's computes %s, printed %s" % (stage, shown[:8], printed_computes[:8])
        ends = {a: e["ts"] + e["dur"] for a, e in zip(shown, computes)}
        placed = [e for e in events if e["cat"] == "update"]
        expected = [(a, planned[stage][i - 1]) for i, a in enumerate(planned[stage]) if a.startswith("U")]
        if [e["name"] for e in placed] != [name for name, _ in expected]:
            return False, "stage %d's updates %s, printed %s" % (stage, [e["name"] for e in placed], expected)
        for event, (name, before) in zip(placed, expected):
            if abs(event["ts"] - ends[before]) > ROUNDING_US:
                return False, "stage %d's %s at %.3f us, %s ends at %.3f" % (stage, name, event["ts"], before,
                                                                            ends[before])
        updates += len(placed)
    return updates == 4 * 12, "4 stages' computes and versions as printed; %d updates, each where printed" % updates


CHECKS = {
    "Trace.EveryTrackHoldsExactlyItsSchedulesSteps": exactly_the_schedules_steps,
    "Trace.EventsOfATrackNeverOverlap": events_never_overlap,
    "Trace.EverySendHasItsFlowToTheMatchingReceive": every_send_has_its_flow,
    "Trace.FlowsEndAfterTheyStart": flows_end_after_they_start,
    "Trace.FlowsEndAfterTheyStartWithARankLate": flows_end_after_they_start_with_a_rank_late,
    "Trace.ComputesAreDrawnAsMeasured": computes_drawn_as_measured,
    "Trace.DualPipeVPairsBackwardsAreOnTheSecondComputeTrack": dualpipev_pairs_on_the_second_track,
    "Trace.TraceStepChoosesTheStepAndTheFileSaysWhatItIs": trace_step_and_about,
    "Trace.TensorParallelRanksHaveTheirOwnTracks": tensor_parallel_ranks_have_their_own_tracks,
    "Trace.PipeDreamStepIsThePrintedStep": pipedream_step_is_the_printed_step,
    "Trace.PipeDreamPredictedTimelineIsThePrintedSchedule": pipedream_predicted_timeline_is_the_printed_schedule,
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
