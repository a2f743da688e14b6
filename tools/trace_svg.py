#!/usr/bin/python3
"""Draws a pipeline timeline (the Chrome trace-event JSON that ./train --trace FILE writes: the
measured timeline of a step, or with --print-schedule the simulator's predicted one) as an SVG
picture: one row per stage (and replica, and tp rank), each F, B, I, W and transfer group a box from its start
for its duration, an arrow from each send to its receive, and a time axis in milliseconds.
    tools/trace_svg.py trace.json -o trace.svg [--title TEXT] [--no-flows]
    tools/trace_svg.py trace.json --summary
--summary prints instead, for each stage, its idle share (1 - the time in F, B, I and W over the
span from its first step's start to its last step's end) and the mean duration of each kind of
compute, then the means over all stages: the t_f, t_i and t_w to give ./train --print-schedule
--schedule-costs. Standard library only. The SVG names its rows by id (stage_0, or replica_1_stage_0
with several replicas) and gives each box a tooltip; a bad file ends with one line naming the
problem and exit 1.
"""
import argparse
import html
import json
import math
import re
import sys

COLOURS = {"forward": "#4e79a7", "backward": "#f28e2b", "input gradient": "#e15759", "weight gradient": "#59a14f",
           "transfer": "#c9c4bf"}
COMPUTE = ["forward", "backward", "input gradient", "weight gradient"]
WIDTH, LEFT, RIGHT, TOP, ROW, GAP = 1100, 190, 20, 40, 26, 6


def fail(message):
    print("trace_svg.py: %s" % message, file=sys.stderr)
    sys.exit(1)


def read_trace(path):
    """The trace's complete events by track (pid, tid), in time order; its flows; its otherData; its
    tracks' names by (pid, tid) ("stage 1", "stage 1, tp rank 0"), where it names them."""
    try:
        with open(path) as file:
            trace = json.load(file)
    except OSError as error:
        fail("%s: cannot read the trace: %s" % (path, error.strerror))
    except ValueError as error:
        fail("%s: not JSON: %s" % (path, error))
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        fail("%s: no \"traceEvents\" list" % path)
    tracks, starts, ends, names = {}, {}, {}, {}
    for event in events:
        if not isinstance(event, dict):
            fail("%s: an event that is not an object" % path)
        phase = event.get("ph")
        if phase == "X":
            try:
                key = (int(event["pid"]), int(event["tid"]))
                start, duration = float(event["ts"]), float(event["dur"])
            except (KeyError, TypeError, ValueError):
                fail("%s: a complete event without a numeric pid, tid, ts and dur: %s" % (path, json.dumps(event)))
            tracks.setdefault(key, []).append((start, duration, str(event.get("name", "")), str(event.get("cat", "")),
                                               str(event.get("args", {}).get("used", ""))))
        elif phase == "M" and event.get("name") == "thread_name":
            try:
                names[(int(event["pid"]), int(event["tid"]))] = str(event["args"]["name"])
            except (KeyError, TypeError, ValueError):
                fail("%s: a thread_name without a numeric pid and tid and a name: %s" % (path, json.dumps(event)))
        elif phase in ("s", "f"):
            point = (int(event.get("pid", 0)), int(event.get("tid", 0)), float(event.get("ts", 0)))
            (starts if phase == "s" else ends)[event.get("id")] = point
    if not tracks:
        fail("%s: no complete events (\"ph\": \"X\")" % path)
    for key in tracks:
        tracks[key].sort()
    flows = [(starts[i], ends[i]) for i in starts if i in ends]
    return tracks, flows, trace.get("otherData", {}), names


def track_name(key, replicas, names):
    """The track's name in the trace, or "stage TID"; with replicas, after "replica PID "."""
    name = names.get(key, "stage %d" % key[1])
    return name if replicas == 1 else "replica %d %s" % (key[0], name)


def row_id_of(name):
    """The SVG group id of a track's row: its name in lower case, runs of other characters as one
    "_" ("stage 1, tp rank 0" gives "stage_1_tp_rank_0"), so a row is found by what it shows."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def summary(tracks, names):
    """Per track: its idle share and each compute kind's mean duration (ms); then the means over all."""
    replicas = len({pid for pid, _ in tracks})
    lines, all_durations = [], {}
    for key in sorted(tracks):
        events = tracks[key]
        span = max(s + d for s, d, _, _, _ in events) - min(s for s, _, _, _, _ in events)
        busy = sum(d for _, d, _, category, _ in events if category in COMPUTE)
        means = []
        for category in COMPUTE:
            durations = [d / 1e3 for _, d, _, c, _ in events if c == category]
            all_durations.setdefault(category, []).extend(durations)
            if durations:
                means.append("%s %.3f (%d)" % (category, sum(durations) / len(durations), len(durations)))
        idle = 1 - busy / span if span > 0 else 0
        lines.append("%s: idle %.3f; mean ms: %s" % (track_name(key, replicas, names), idle, ", ".join(means)))
    overall = ["%s %.3f" % (c, sum(v) / len(v)) for c, v in ((c, all_durations.get(c, [])) for c in COMPUTE) if v]
    lines.append("mean ms over all stages: " + ", ".join(overall))
    return "\n".join(lines) + "\n"


def tick_step(span_ms):
    """A round step (1, 2 or 5 times a power of ten) giving about 8 ticks over span_ms."""
    raw = span_ms / 8 if span_ms > 0 else 1
    power = 10 ** math.floor(math.log10(raw))
    return next(f * power for f in (1, 2, 5, 10) if f * power >= raw)


def svg(tracks, flows, title, draw_flows, names):
    keys = sorted(tracks)
    replicas = len({pid for pid, _ in keys})
    row_of = {key: i for i, key in enumerate(keys)}
    begin = min(s for events in tracks.values() for s, _, _, _, _ in events)
    end = max(s + d for events in tracks.values() for s, d, _, _, _ in events)
    scale = (WIDTH - LEFT - RIGHT) / (end - begin) if end > begin else 1
    x = lambda t: LEFT + (t - begin) * scale
    y = lambda key: TOP + row_of[key] * (ROW + GAP)
    height = TOP + len(keys) * (ROW + GAP) + 60
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="10">'
           % (WIDTH, height),
           '<defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="5" markerHeight="5" '
           'orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#333"/></marker></defs>',
           '<rect width="100%" height="100%" fill="white"/>',
           '<text id="title" x="%d" y="20" font-size="13">%s</text>' % (LEFT, html.escape(title))]
    for key in keys:
        row_id = row_id_of(track_name(key, replicas, names))
        out.append('<g id="%s">' % row_id)
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (LEFT - 8, y(key) + ROW / 2 + 4,
                                                                          track_name(key, replicas, names)))
        for start, duration, name, category, used in tracks[key]:
            left, width = x(start), max(duration * scale, 0.5)
            tip = "%s: %.3f ms at %.3f ms%s" % (name, duration / 1e3, (start - begin) / 1e3, "; " + used if used else "")
            out.append('<rect x="%.2f" y="%.1f" width="%.2f" height="%d" fill="%s" stroke="white" stroke-width="0.5">'
                       '<title>%s</title></rect>' % (left, y(key), width, ROW, COLOURS.get(category, "#999"),
                                                     html.escape(tip)))
            if category != "transfer" and width > 6.2 * len(name) + 2:
                out.append('<text x="%.2f" y="%.1f" text-anchor="middle" fill="white">%s</text>'
                           % (left + width / 2, y(key) + ROW / 2 + 3.5, html.escape(name)))
        out.append('</g>')
    if draw_flows:
        out.append('<g id="flows" stroke="#333" stroke-width="0.7" opacity="0.45">')
        for (pid0, tid0, t0), (pid1, tid1, t1) in flows:
            if (pid0, tid0) in row_of and (pid1, tid1) in row_of:
                y0, y1 = y((pid0, tid0)) + ROW / 2, y((pid1, tid1)) + ROW / 2
                out.append('<line x1="%.2f" y1="%.1f" x2="%.2f" y2="%.1f" marker-end="url(#arrow)"/>'
                           % (x(t0), y0, x(t1), y1 + (-ROW / 2 if y1 > y0 else ROW / 2)))
        out.append('</g>')
    axis_y = TOP + len(keys) * (ROW + GAP) + 4
    step = tick_step((end - begin) / 1e3)
    out.append('<g id="axis"><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>' % (LEFT, axis_y, WIDTH - RIGHT, axis_y))
    tick = 0.0
    while begin + tick * 1e3 <= end + 1e-9:
        out.append('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#333"/><text x="%.2f" y="%d" '
                   'text-anchor="middle">%g</text>' % (x(begin + tick * 1e3), axis_y, x(begin + tick * 1e3), axis_y + 4,
                                                       x(begin + tick * 1e3), axis_y + 16, round(tick, 9)))
        tick += step
    out.append('<text x="%d" y="%d" text-anchor="end">ms</text></g>' % (WIDTH - RIGHT, axis_y + 30))
    legend_x = LEFT
    out.append('<g id="legend">')
    for category in COMPUTE + ["transfer"]:
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>'
                   % (legend_x, axis_y + 36, COLOURS[category], legend_x + 16, axis_y + 46, category))
        legend_x += 16 + 7 * len(category) + 18
    out.append('</g></svg>')
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace", help="the trace JSON (./train --trace FILE)")
    parser.add_argument("-o", "--output", help="the SVG to write")
    parser.add_argument("--title", help="the picture's title (default: the trace's schedule and what it is)")
    parser.add_argument("--no-flows", action="store_true", help="leave out the arrows from sends to receives")
    parser.add_argument("--summary", action="store_true", help="print idle shares and mean durations instead")
    options = parser.parse_args()
    tracks, flows, about, names = read_trace(options.trace)
    if options.summary:
        sys.stdout.write(summary(tracks, names))
        return
    if not options.output:
        fail("give -o FILE.svg, or --summary")
    title = options.title or "%s: %s" % (about.get("schedule", "schedule"), about.get("what", "timeline"))
    text = svg(tracks, flows, title, not options.no_flows, names)
    try:
        with open(options.output, "w") as file:
            file.write(text)
    except OSError as error:
        fail("%s: cannot write: %s" % (options.output, error.strerror))


if __name__ == "__main__":
    main()
