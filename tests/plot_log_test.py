#!/usr/bin/python3
"""tools/plot_log.py (the picture of a --log file) as a specification.

Logs come from short real runs of ./train (a 2-layer model, 8 steps, validation every 4 steps:
about 2 s each), one under `mpirun -np 2` (two pipeline stages) and one single process, and from
copies of them edited as a resumed or diverged run would write them. Each check runs the tool and
reads the SVG it writes as XML: the panels and curves carry ids (plot_log.py's docstring), the
titles stay text, and a curve's path has one point per value. Run by tools/run_tests.sh with
Debian's /usr/bin/python3 (which has python3-matplotlib):
    /usr/bin/python3 tests/plot_log_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train), MPIRUN the launcher (default mpirun). One line per
check, then "tests: N passed, M failed".
"""
import functools
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

from check_runner import run_checks, skipped_for_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "plot_log.py")
TRAIN = os.environ.get("TRAIN", os.path.join(ROOT, "train"))
MPIRUN = os.environ.get("MPIRUN", "mpirun")
SMALL_RUN = ["--steps", "8", "--layers", "2", "--heads", "2", "--dim", "32", "--seq-len", "16", "--batch", "2",
             "--microbatches", "2", "--val-every", "4", "--val-batches", "2", "--sample-every", "0"]
PANELS = {"loss": "loss", "learning_rate": "learning rate", "grad_norm": "gradient norm (before clipping)",
          "tokens_per_s": "tokens/s", "stage_idle": "idle share per stage (mean of 20 steps)"}
SVG = "{http://www.w3.org/2000/svg}"
DIRECTORY = tempfile.TemporaryDirectory()


@functools.lru_cache(maxsize=None)
def real_log(ranks):
    """The log of the small run on this many ranks (1: a single process), written once."""
    path = os.path.join(DIRECTORY.name, "ranks%d.jsonl" % ranks)
    launcher = [] if ranks == 1 else [MPIRUN, "-np", str(ranks)]
    subprocess.run(launcher + [TRAIN] + SMALL_RUN + ["--log", path], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    return path


def edited_copy(name, source, edit):
    """A copy of the log at source with edit applied to its list of lines."""
    with open(source) as file:
        lines = file.read().splitlines()
    path = os.path.join(DIRECTORY.name, name + ".jsonl")
    with open(path, "w") as file:
        file.write("\n".join(edit(lines)) + "\n")
    return path


def plot(log, more=()):
    """(exit status, stderr, the SVG's root element or None) of the tool on log."""
    output = log[:-len(".jsonl")] + ".svg"
    done = subprocess.run([TOOL, log, "-o", output] + list(more), capture_output=True, text=True, timeout=120)
    root = ElementTree.parse(output).getroot() if done.returncode == 0 else None
    return done.returncode, done.stderr.strip(), root


def element(root, gid):
    return next((e for e in root.iter() if e.get("id") == gid), None)


def points(root, gid):
    """The number of points of the first path under the element with id gid (0 if none)."""
    group = element(root, gid)
    path = next(group.iter(SVG + "path"), None) if group is not None else None
    return len(re.findall(r"[ML]", path.get("d"))) if path is not None else 0


def texts(root):
    return {"".join(e.itertext()).strip() for e in root.iter(SVG + "text")}


def pipeline_run():
    status, said, root = plot(real_log(2))
    if root is None:
        return False, "status %d: %s" % (status, said)
    missing = [gid for gid in list(PANELS) + ["training_loss", "validation_loss", "stage_0_idle", "stage_1_idle"]
               if element(root, gid) is None]
    untitled = [title for title in PANELS.values() if title not in texts(root)]
    counts = {gid: points(root, gid) for gid in ["training_loss", "validation_loss", "learning_rate_line",
                                                 "stage_0_idle", "stage_1_idle"]}
    expected = {"training_loss": 8, "validation_loss": 2, "learning_rate_line": 8, "stage_0_idle": 8, "stage_1_idle": 8}
    ok = root.tag == SVG + "svg" and not missing and not untitled and counts == expected
    return ok, "ids missing %s, titles missing %s, points %s" % (missing, untitled, counts)


def single_process():
    status, said, root = plot(real_log(1))
    if root is None:
        return False, "status %d: %s" % (status, said)
    ok = (element(root, "stage_idle") is not None and element(root, "stage_0_idle") is None
          and "one stage: no pipeline, nothing waits" in texts(root))
    return ok, "idle panel: %s, its note: %s" % (element(root, "stage_idle") is not None,
                                                 "one stage: no pipeline, nothing waits" in texts(root))


def resumed_log():
    # A run that crashed after step 6 and resumed from its save at step 4 writes steps 5 and 6 again.
    log = edited_copy("resumed", real_log(1), lambda lines: lines[:6] + lines[4:])
    status, said, root = plot(log)
    if root is None:
        return False, "status %d: %s" % (status, said)
    return points(root, "training_loss") == 8, "%d training points for 8 steps" % points(root, "training_loss")


def non_finite_loss():
    # printf's %.17g, as ./train writes a NaN: "nan" or "-nan", which JSON has no word for.
    log = edited_copy("nan", real_log(1), lambda lines: [re.sub(r'"loss": [^,]+', '"loss": -nan', line, count=1)
                                                         if line.startswith('{"step": 3,') else line for line in lines])
    status, said, root = plot(log)
    return root is not None and element(root, "training_loss") is not None, "status %d %s" % (status, said)


def malformed_line():
    log = edited_copy("malformed", real_log(1), lambda lines: lines[:2] + [lines[2][:30]] + lines[3:])
    status, said, _ = plot(log)
    expected = "plot_log.py: %s line 3: not a JSON record" % log
    return status == 1 and said == expected, "status %d, said %r" % (status, said)


def missing_log():
    log = os.path.join(DIRECTORY.name, "absent.jsonl")
    status, said, _ = plot(log)
    expected = "plot_log.py: %s: cannot read the log: No such file or directory" % log
    return status == 1 and said == expected, "status %d, said %r" % (status, said)


def beside_another_run():
    """--beside draws another run's training loss (one point per step) and validation losses on the
    loss panel, labelled; a --beside without LABEL= fails in one line."""
    other = edited_copy("other", real_log(1), lambda lines: lines[:6])
    status, said, root = plot(real_log(1), ["--beside", "shorter=" + other])
    if root is None:
        return False, "status %d: %s" % (status, said)
    counts = {gid: points(root, gid) for gid in ["training_loss", "beside_0_loss", "beside_0_validation"]}
    labelled = "shorter, training, mean of 20 steps" in texts(root)
    bad_status, bad_said, _ = plot(real_log(1), ["--beside", other])
    ok = (counts == {"training_loss": 8, "beside_0_loss": 6, "beside_0_validation": 1} and labelled
          and bad_status == 1 and bad_said == "plot_log.py: --beside %s: give LABEL=LOG" % other)
    return ok, "points %s, labelled %s; without a label: status %d, %r" % (counts, labelled, bad_status, bad_said)


CHECKS = {
    "PlotLog.PipelineRunGivesAnSvgWithEveryPanelAndOnePointPerValue": pipeline_run,
    "PlotLog.SingleProcessIdlePanelSaysThereIsOneStage": single_process,
    "PlotLog.ResumedLogKeepsOneRecordPerStep": resumed_log,
    "PlotLog.NonFiniteLossDoesNotStopThePicture": non_finite_loss,
    "PlotLog.MalformedLineFailsNamingIt": malformed_line,
    "PlotLog.MissingLogFailsInOneLine": missing_log,
    "PlotLog.BesideDrawsAnotherRunsLosses": beside_another_run,
}


def run_one(name):
    if name == "PlotLog.PipelineRunGivesAnSvgWithEveryPanelAndOnePointPerValue" and skipped_for_ranks(2):
        return skipped_for_ranks(2)
    try:
        return CHECKS[name]()
    except (OSError, subprocess.SubprocessError, ElementTree.ParseError) as error:
        said = (getattr(error, "stderr", None) or "").strip().splitlines()
        return False, "did not run: %s" % (said[-1] if said else error)


if __name__ == "__main__":
    with DIRECTORY:
        sys.exit(run_checks(CHECKS, run_one))
