#!/usr/bin/python3
"""tools/memory_formulas.py (our memory plan beside Megatron's and llm.c's formulas) as a specification.

The tables in docs/pipeline.md's section "Memory: the plan against the field's formulas" must be
the tool's output now: a change to the plan, the model code or the tool that moves a figure fails
here until the doc is regenerated. The tool's formulas are checked against figures derived by hand
below for a model small enough to do it on paper, and the tool is run on that model to check what
it reads from ./train --print-memory. Run by tools/run_tests.sh with Debian's /usr/bin/python3:
    /usr/bin/python3 tests/memory_formulas_test.py [--gtest_filter=PATTERN]
TRAIN names the program (default ./train). One line per check, then "tests: N passed, M failed".
"""
import importlib.util
import os
import subprocess
import sys

from check_runner import run_check_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "memory_formulas.py")
DOC = os.path.join(ROOT, "docs", "pipeline.md")
SECTION = "## Memory: the plan against the field's formulas"
SPEC = importlib.util.spec_from_file_location("memory_formulas", TOOL)
formulas = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(formulas)

# A model to do by hand: L = 2, NH = a = 2, C = h = 8, T = s = 4, B = b = 1, V = 100 (Vp = 128), p = 2.
TINY = ["--layers", "2", "--heads", "2", "--dim", "8", "--seq-len", "4", "--vocab", "100", "--world", "2",
        "--batch", "1"]


def tiny(microbatches=4, dtype="fp32"):
    return formulas.Case("tiny", 2, 2, 8, seq_len=4, vocab=100, world=2, microbatches=microbatches, batch=1,
                         dtype=dtype)


def run_tool(arguments):
    return subprocess.run([sys.executable, TOOL] + arguments, capture_output=True, text=True, timeout=120)


def doc_section():
    with open(DOC) as file:
        text = file.read()
    start = text.find(SECTION)
    if start < 0:
        return None
    end = text.find("\n## ", start + len(SECTION))
    return text[start:] if end < 0 else text[start:end]


def doc_tables_are_the_tools_output():
    done = run_tool([])
    if done.returncode != 0:
        return False, "the tool failed: %s" % done.stderr.strip()
    section = doc_section()
    if section is None:
        return False, "docs/pipeline.md has no section %r" % SECTION
    if done.stdout.strip() in section:
        return True, "%d lines of tables found verbatim" % len(done.stdout.strip().splitlines())
    # The first line of the tool's output the doc lacks, to say which figure went stale.
    stale = next(line for line in done.stdout.splitlines() if line not in section.splitlines())
    return False, "docs/pipeline.md differs from tools/memory_formulas.py's output; rerun it and paste " \
                  "its tables (first line the doc lacks: %r)" % stale


def megatron_by_hand():
    # Korthikanti et al.'s layer: s·b·h·34 + 5·a·s²·b = 4·8·34 + 5·2·16 = 1088 + 160 = 1248 bytes;
    # the first stage holds L = 2 layers' worth (p microbatches of L/p): 2496; the embedding's
    # 8·s·b·p = 64 and s·b·h·p = 64: 2624. With m = 1 < p only m/p of it: 1312.
    # Parameters: a layer 12·h² + 4·h = 800 (Megatron counts no biases), the block 2·800 + 2·h
    # (final LayerNorm) = 1616, a stage 808; the first adds h·Vp = 1024: 1832 x 18 = 32976 bytes,
    # the second 808 x 18 = 14544.
    got = (formulas.megatron_activations(tiny()), formulas.megatron_activations(tiny(microbatches=1)),
           formulas.megatron_weights_and_optimizer(tiny(), 0), formulas.megatron_weights_and_optimizer(tiny(), 1))
    expected = (2624, 1312, 32976, 14544)
    return got == expected, "activations, with m = 1, weights of stage 0 and 1: %s, by hand %s" % (got, expected)


def llmc_by_hand():
    # llm.c's layer for B·T = 4 tokens: 18·C + NH·T = 144 + 8 = 152 elements and 4 fp32 statistics
    # a token: 4·(152·4 + 16) = 2496 bytes in fp32, 4·(152·2 + 16) = 1280 in bf16.
    got = (formulas.llmc_layer_bytes(tiny()), formulas.llmc_layer_bytes(tiny(dtype="bf16")))
    return got == (2496, 1280), "a layer in fp32 and bf16: %s, by hand (2496, 1280)" % (got,)


def tiny_model_table():
    # 1F1B on 2 stages holds 2 slots on stage 0 and 1 on stage 1; the tool fails unless the
    # groups it reads add up to --print-memory's exact peak.
    done = run_tool(TINY + ["--microbatches", "4"])
    rows = [line.split("|")[1:4] for line in done.stdout.splitlines() if line.startswith("| 0 ")
            or line.startswith("| 1 ")]
    got = [[cell.strip() for cell in row] for row in rows]
    expected = [["0", "1", "2"], ["1", "1", "1"]]
    return done.returncode == 0 and got == expected, "status %d, stage, layers, slots: %s (%s)" % (
        done.returncode, got, done.stderr.strip())


def uneven_split_refused():
    done = run_tool(["--layers", "3", "--heads", "2", "--dim", "8", "--world", "2"])
    expected = "memory_formulas.py: --layers 3 does not split evenly over 2 stages"
    return done.returncode == 1 and done.stderr.strip() == expected, "status %d, said %r" % (
        done.returncode, done.stderr.strip())


CHECKS = {
    "MemoryFormulas.DocTablesAreTheToolsOutput": doc_tables_are_the_tools_output,
    "MemoryFormulas.MegatronMatchesTheFiguresDerivedByHand": megatron_by_hand,
    "MemoryFormulas.LlmcLayerMatchesTheFigureDerivedByHand": llmc_by_hand,
    "MemoryFormulas.TinyModelHoldsOneFOneBsSlotsPerStage": tiny_model_table,
    "MemoryFormulas.UnevenSplitFailsInOneLine": uneven_split_refused,
}


if __name__ == "__main__":
    sys.exit(run_check_table(CHECKS))
