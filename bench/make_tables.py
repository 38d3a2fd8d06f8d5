#!/usr/bin/env python3
"""bench/make_tables.py: writes the result tables of the READMEs from the files in results/ (standard library only).

Each table sits between <!-- NAME begin --> and <!-- NAME end --> markers; nothing outside them changes, and a file
without its markers is left as it is. all_blocks says which file gets which table. A stage counts in the ladder
and stage tables in its default variant (the first of its REGRESSION_VARIANTS / MNIST_VARIANTS) at fp32 and bf16;
its other variants fill its variants table. A table shows the rows of one run (run_id): rows of several runs are
an error unless --allow-mixed-runs, which marks them.
"""

import argparse
import glob
import math
import os
import re
import sys

import results_csv as rc

NOT_COMPARED = "—"
NO_RESULTS = "*Not measured yet: run `make bench` on a GPU machine.*"
MIXED_RUNS = "refuse"  # main sets "mark" for --allow-mixed-runs


class TableError(Exception):
    """What no table can be made of: one error line for main."""


# ----------------------------------------------------------------------------
# number formats, files, tables and the lines above them

def fmt_3(value):
    return NOT_COMPARED if value is None else rc.three_digits(value)


def fmt_times(value):
    return NOT_COMPARED if value is None else f"{value:.2f}×"


def fmt_spread(row):
    """'118–131 (n=3)', 'n=1', or — when the row records no repeats."""
    found = rc.spread(row)
    if found is None:
        return NOT_COMPARED
    n, low, high = found
    return f"n={n}" if n == 1 or low is None or high is None else f"{fmt_3(low)}–{fmt_3(high)} (n={n})"


def read_text(path):
    """The text of the file at path, "" when there is none (a README or summary not written yet)."""
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


def markdown_table(header, align, lines):
    """align: a letter a column, l (left) or r (right)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(":--" if a == "l" else "--:" for a in align) + "|"]
    return "\n".join(out + ["| " + " | ".join(cells) + " |" for cells in lines])


def source_line(rows, device, source):
    """Where rows come from: device, file, commits, run, uncommitted changes, torch version, CPU threads."""
    commits = list(dict.fromkeys(row["commit"] for row in rows if row["commit"]))
    runs = rc.run_ids(rows)
    torches = sorted({row["torch"] for row in rows if row.get("torch")})
    # one entry per kind of CPU row (the CPU reference's rows of several configurations say it once)
    threads = list(dict.fromkeys(f"{rc.row_label(row)} {row['threads']}" for row in rows if row.get("threads")))
    parts = [f"{device} · `{source}`", commits and f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}",
             len(runs) == 1 and runs[0] and f"run `{runs[0]}`",
             any(row.get("dirty") == "1" for row in rows) and "**built with uncommitted changes**",
             torches and f"torch {', '.join(torches)}", threads and "CPU threads: " + ", ".join(threads)]
    return " · ".join(part for part in parts if part)


def runs_note(rows, what):
    """The warning above a table whose rows come from several runs or record none (TableError unless
    --allow-mixed-runs); "" for rows of one recorded run."""
    runs = rc.run_ids(rows)
    if not rows or (len(runs) == 1 and runs[0]):
        return ""
    if runs == [""]:
        return ("*⚠ Run not recorded: these rows carry no run id, so they may come from more "
                "than one run; a new `make bench` records one.*\n\n")
    named = ", ".join(f"`{run}`" if run else "not recorded" for run in runs)
    if MIXED_RUNS != "mark":
        raise TableError(f"{what}: rows of {len(runs)} runs ({named}); a table shows one run: measure again "
                         "in one `make bench`, or pass --allow-mixed-runs to show them marked")
    groups = [f"{'`' + run + '`' if run else 'no run recorded'}: "
              + ", ".join(rc.row_label(r) for r in rows if r.get("run_id", "") == run) for run in runs]
    return f"**⚠ Rows of {len(runs)} runs**, not one measurement: " + "; ".join(groups) + ".\n\n"


def sourced_table(shown, rows, source, what, table, title=""):
    """title, the source line of the rows shown, their runs_note (what names the table; None: no note), table."""
    note = runs_note(shown, f"{what} of {source}") if what else ""
    return f"{title}{source_line(shown, rc.device_of(rows), source)}\n\n{note}{table}"


def per_file(datasets, known, part_of, note):
    """part_of(source, rows, variant defaults) of each results file that gives one, then note in small print;
    NO_RESULTS when none does."""
    parts = [part_of(source, rows, rc.variant_defaults(rows, known)) for source, rows in datasets]
    return "\n\n".join([part for part in parts if part] + [f"<sub>{note}</sub>"]) if any(parts) else NO_RESULTS


def results_tables(datasets, known, lines_of, headers, aligns, what=None, note=None, title=None):
    """One table per results file from lines_of(rows, defaults) -> (cells, rows shown); no rows shown, no table."""
    def part(source, rows, defaults):
        lines, shown = lines_of(rows, defaults)
        if shown:
            return sourced_table(shown, shown, source, what, markdown_table(headers, aligns, lines),
                                 title(shown) if title else "")
    return per_file(datasets, known, part, note)


FOOTNOTE_GENERATED = "Generated by `bench/make_tables.py` from the CSV named above; do not edit by hand."


# ----------------------------------------------------------------------------
# entries: a stage against the one before it, the cells every timing table shares

def short_name(config):
    if config.trainer == "regression":
        return f"regression {rc.REGRESSION_POINTS // 1_000_000}M"
    return f"MNIST --hidden {config.hidden}"


def stage_entry(entries, stage):
    """The fp32 default-variant entry of stage among a configuration's entries, or None."""
    return next((e for e in entries if e.is_ladder_stage and e.stage == stage), None)


def stage_pair(entries, stage, reference=False):
    """(stage's entry, the newest ladder stage before it, else with reference the CPU reference); either may be None."""
    earlier = [e for e in entries if e.is_ladder_stage and e.stage < stage]
    references = [e for e in entries if e.kind == "reference" and reference]  # one at most
    return stage_entry(entries, stage), (earlier or references or [None])[-1]


TIMING_HEADER = ["setup ms", "e2e ms", "wall ms", "e2e spread", "loop ms", "ms/epoch"]


def timing_cells(e, unit=True):
    """An entry's TIMING_HEADER cells and its throughput (with unit: '2,349 GB/s')."""
    rate, rate_unit = rc.throughput(e.row)
    rate_cell = f"{fmt_3(rate)} {rate_unit}" if unit and rate is not None else fmt_3(rate)
    return [fmt_3(e.setup), fmt_3(e.e2e), fmt_3(e.wall), fmt_spread(e.row), fmt_3(e.loop), fmt_3(e.ms_per_epoch),
            rate_cell]


def speedup(before, this, figure):
    """before's figure ÷ this's; totals (all but ms/epoch) only when both ran the same epochs."""
    if before is None or this is None or (figure != "ms_per_epoch" and before.epochs != this.epochs):
        return None
    return rc.ratio(getattr(before, figure), getattr(this, figure))


def step_cell(before, this, before_id, this_id):
    """before ÷ this, naming before_id (a stage, a version) when it is not the one just below this_id."""
    gap = "" if int(this_id) - int(before_id) == 1 else f" (vs {before_id})"
    return fmt_times(rc.ratio(before, this)) + gap


# ----------------------------------------------------------------------------
# the ladder: every stage of one configuration, then the PyTorch baselines

def ladder_lines(entries, stage_names=None):
    """The cells of a ladder table; only rows that ran the configuration's epochs compare (FOOTNOTE_TIMES)."""
    rungs = [e for e in entries if e.is_ladder_stage and e.comparable and e.e2e]
    # the fastest stage of each precision: the last of them sorted slowest first
    best = {e.precision: e for e in sorted((e for e in entries if e.kind == "stage" and e.comparable and e.e2e),
                                           key=lambda e: -e.e2e)}
    lines, previous = [], None
    for e in entries:
        step = step_wall = versus_best = ""
        cumulative = fmt_times(rc.ratio(rungs[0].e2e, e.e2e)) if e.comparable and rungs else ""
        if e in rungs:
            step = step_wall = NOT_COMPARED
            if previous is not None:
                step = step_cell(previous.e2e, e.e2e, previous.stage, e.stage)
                step_wall = fmt_times(rc.ratio(previous.wall, e.wall))
            previous = e
        if e.kind == "pytorch" and e.comparable:
            target = best.get(e.precision) or best.get("fp32")
            versus_best = fmt_times(rc.ratio(e.e2e, target.e2e if target else None))
        lines.append([e.label(stage_names)] + timing_cells(e, unit=False) + [step, step_wall, cumulative, versus_best])
    return lines


def ladder_table(rows, config, source, stage_names=None, defaults=None):
    entries = rc.select_entries(rows, config, defaults)
    if not entries:
        return f"**{config.title()}**: no rows in `{source}` yet."
    # the newest torch.compile row of each mode that is not clean is named under the title, not shown
    newest = {row["variant"]: row for row in rows if config.matches(row) and rc.is_compile_mode(row)}
    bad = "; ".join(f"PyTorch {mode}: {rc.compile_audit(row)[1]}" for mode, row in newest.items()
                    if not rc.compile_audit(row)[0])
    unclean = (f"*Not shown as results: {bad}. A torch.compile row counts only with 0 graph breaks and 0 "
               "recompiles (bench/torch_common.py).*\n\n") if bad else ""
    header = ([""] + TIMING_HEADER + ["GB/s" if config.trainer == "regression" else "GFLOP/s", "step speedup (e2e)",
              "step speedup (wall)", "cumulative speedup", "÷ best stage"])
    table = markdown_table(header, "l" + "r" * 11, ladder_lines(entries, stage_names))
    return sourced_table([e.row for e in entries], rows, source, f"the {short_name(config)} ladder",
                         unclean + table, f"**{config.title()}**  \n")


FOOTNOTE_TIMES = (
    "e2e: from the training data in host memory to the trained parameters back in host memory; "
    "loop: the training loop alone, data already on the device; ms/epoch: median epoch "
    "(docs/DESIGN.md, \"Timing\"). Speedups are ratios of e2e times: step = the stage above ÷ this stage, "
    "cumulative = the first stage ÷ this row; ÷ best stage = a PyTorch row ÷ the fastest stage of the "
    "same precision (above 1: our stage is faster). Rows that ran other epoch counts are not compared."
)
FOOTNOTE_SETUP = (
    "setup: the untimed preparations before e2e starts, the median of the timed runs' (handles, GEMM "
    "plans, pinned buffers, graph capture and instantiation; PyTorch: the capture of cuda-graph modes, the compilation "
    "of compile modes, 0 for eager); wall = setup + e2e, what one training run costs its user; speedups "
    "marked (wall) are ratios of wall times. e2e spread: the smallest and largest e2e of the n timed runs "
    "(the e2e shown is their median). — where a row does not record it."
)
FOOTNOTE_GBS = (
    "GB/s: the minimum traffic, epochs × n_train × 8 B (x and y read once per epoch) ÷ loop time; "
    "the real traffic is higher wherever a stage reads the data more than once."
)
FOOTNOTE_GFLOPS = (
    "GFLOP/s: the training GEMMs' FLOPs ÷ loop time: per sample 2 a weight forward, 2 for its gradient and 2 "
    "for its input's, except the first layer's (the image needs no gradient); samples per epoch = 60,000 // "
    "batch × batch; evaluation not counted."
)


def ladder_block(datasets, trainer, stage_names=None, known=None):
    """The ladder:<trainer> block: every configuration of every results file."""
    def part(source, rows, defaults):
        return "\n\n".join(ladder_table(rows, config, source, stage_names, defaults)
                           for config in rc.canonical_configs() if config.trainer == trainer)
    notes = [FOOTNOTE_TIMES, FOOTNOTE_SETUP, FOOTNOTE_GBS if trainer == "regression" else FOOTNOTE_GFLOPS,
             FOOTNOTE_GENERATED]
    return per_file(datasets, known, part, " ".join(notes))


# ----------------------------------------------------------------------------
# the top README's headline: one line per stage, the ladder's figures of two configurations

HEADLINE_CONFIGS = (rc.Config("regression"), rc.Config("mnist", "128"))
BASELINE_STAGE, BASELINE_IDEA = "02", "the naive first version"  # the first trainer stage brings no idea
STAGE_IDEAS = os.path.join("tools", "stage_ideas.tsv")


def stage_ideas(root):
    """{stage: the idea field of tools/stage_ideas.tsv up to its first colon}, BASELINE_IDEA for BASELINE_STAGE."""
    rows = [line.split("\t") for line in read_text(os.path.join(root, STAGE_IDEAS)).split("\n")
            if not line.startswith("#")]
    return {BASELINE_STAGE: BASELINE_IDEA, **{fields[0]: fields[2].split(":")[0].strip() for fields in rows
                                              if len(fields) >= 3}}


def headline_lines(rows, ideas=None, defaults=None, stage_names=None):
    """(cells, rows shown, {trainer: PyTorch's best entry}): a line per ladder stage of either HEADLINE_CONFIGS."""
    rungs, best, lines, shown = {}, {}, [], []
    for config in HEADLINE_CONFIGS:
        entries = rc.select_entries(rows, config, defaults)
        cells = dict(zip(entries, ladder_lines(entries)))
        rungs[config] = {e.stage: (e, cells[e]) for e in entries if e.is_ladder_stage and e.comparable and e.e2e}
        # PyTorch's best: its fastest fp32 entry (e2e) that ran the configuration's epochs
        best[config.trainer] = min((e for e in entries if e.kind == "pytorch" and e.comparable and e.e2e
                                    and e.precision == "fp32"), key=lambda e: e.e2e, default=None)
    for stage in sorted({stage for by_stage in rungs.values() for stage in by_stage}):
        line = [(stage_names or {}).get(stage, stage), (ideas or {}).get(stage, NOT_COMPARED)]
        for config in HEADLINE_CONFIGS:
            entry, cells = rungs[config].get(stage, (None, None))
            if entry is None:
                line += [NOT_COMPARED] * 3
                continue
            fastest = best[config.trainer]
            # the e2e time itself, beside the two ratios of e2e times: each ratio divides the figure next to it
            line += [fmt_3(entry.e2e), cells[8], fmt_times(rc.ratio(fastest.e2e, entry.e2e) if fastest else None)]
            shown.append(entry.row)
        lines.append(line)
    return lines, shown + [e.row for e in best.values() if e is not None], best


def headline_block(datasets, stage_names=None, known=None, ideas=None):
    """The top README's ladder:headline block: per results file, headline_lines and PyTorch's best mode."""
    header = ["stage", "idea", "regression e2e ms", "÷ stage before", "× PyTorch's best",
              "MNIST --hidden 128 e2e ms", "÷ stage before", "× PyTorch's best"]
    title = " · ".join(f"{short_name(c)}{'' if c.trainer == 'regression' else f', batch {rc.MNIST_BATCH}'}, "
                       f"{c.epochs} epochs" for c in HEADLINE_CONFIGS)

    def part(source, rows, defaults):
        lines, shown, best = headline_lines(rows, ideas, defaults, stage_names)
        if not lines:
            return f"No stage rows in `{source}` yet."
        named = "; ".join(f"{short_name(c)} `{best[c.trainer].row['variant']}`, {fmt_3(best[c.trainer].e2e)} ms e2e"
                          for c in HEADLINE_CONFIGS if best[c.trainer] is not None)
        return sourced_table(shown, rows, source, "the headline table", markdown_table(header, "ll" + "r" * 6, lines)
                             + f"\n\nPyTorch's best (its fastest fp32 mode): {named or 'no PyTorch rows'}.",
                             f"**Every stage: {title}**  \n")
    note = ("Each stage in its default variant at fp32, newest rows. e2e: from the training data in host memory to "
            "the trained parameters back in host memory, all epochs (docs/DESIGN.md, \"Timing\"). "
            "÷ stage before: the stage before's e2e ÷ this stage's (the stage it compares with is named when one is "
            "missing); × PyTorch's best: the e2e of PyTorch's fastest fp32 mode on the same configuration ÷ this "
            "stage's e2e (above 1: the stage is faster). Every column, precision and PyTorch mode: the "
            "per-trainer tables of docs/RESULTS.md. " + FOOTNOTE_GENERATED)
    return per_file(datasets, known, part, note)


# ----------------------------------------------------------------------------
# a stage README: this stage against the one before it

def stage_lines(rows, stage, stage_names=None, defaults=None):
    """(cells, rows shown, payback sentences): per configuration the stage before and this stage (fp32, default
    variants); paybacks only against a stage, not the CPU reference."""
    lines, shown, paybacks = [], [], []
    for config in rc.canonical_configs():
        this, before = stage_pair(rc.select_entries(rows, config, defaults), stage, reference=True)
        if this is None:
            lines.append([short_name(config), stage, "no result yet"] + [""] * 9)
            continue
        if before is not None and before.kind == "stage":
            paybacks.append(payback_sentence(config, before, this, stage_names))
        for e in [e for e in (before, this) if e]:
            compared = e is this and before is not None
            ratios = [fmt_times(speedup(before, this, f)) if compared else "" for f in ("e2e", "wall", "ms_per_epoch")]
            lines.append([short_name(config), e.label(stage_names)] + timing_cells(e) + ratios)
            shown.append(e.row)
    return lines, shown, [sentence for sentence in paybacks if sentence]


def variant_lines(rows, stage, defaults=None):
    """(cells, rows shown) of a stage's variants table: where a configuration has more than one variant or
    precision, every one, the default (fp32) first; vs default: the default's e2e (wall) ÷ this e2e (wall)."""
    if defaults is None:
        defaults = rc.variant_defaults(rows)
    lines, shown = [], []
    for config in rc.canonical_configs():
        entries = rc.variant_entries(rows, config, stage, defaults)
        if len(entries) < 2:
            continue
        default = defaults.get((stage, config.trainer))
        base = entries[0] if entries[0].row["variant"] == default and entries[0].precision == "fp32" else None
        for e in entries:
            name = f"`{e.row['variant']}`" + (" (default)" if e.row["variant"] == default else "")
            if not e.comparable and e.epochs is not None:
                name += f" ({e.epochs} epoch{'s' if e.epochs != 1 else ''})"
            versus = [fmt_times(speedup(base, e, f)) for f in ("e2e", "wall")] if base not in (None, e) else ["", ""]
            lines.append([short_name(config), name, e.precision] + timing_cells(e) + versus)
            shown.append(e.row)
    return lines, shown


def stage_block(datasets, stage, stage_names=None, known=None):
    """The results:stageNN block: the stage table, when its fixed cost pays back, its variants table."""
    header = ["configuration", "run"] + TIMING_HEADER + ["throughput", "speedup (e2e)", "speedup (wall)",
                                                         "speedup (ms/epoch)"]
    variant_header = (["configuration", "variant", "precision"] + TIMING_HEADER
                      + ["throughput", "vs default (e2e)", "vs default (wall)"])

    def part(source, rows, defaults):
        lines, shown, paybacks = stage_lines(rows, stage, stage_names, defaults)
        parts = [sourced_table(shown, rows, source, f"the stage {stage} table",
                               markdown_table(header, "ll" + "r" * 10, lines))]
        if paybacks:
            parts.append(f"**When stage {stage}'s fixed cost pays back** against the stage before it, in wall "
                         "time: setup + e2e = fixed cost + epochs × ms/epoch, where the fixed cost (setup + e2e − "
                         "epochs × ms/epoch) is everything outside the median epochs: setup, uploads, downloads, "
                         "slower epochs.\n\n" + "\n".join(f"- {sentence}" for sentence in paybacks))
        variants, variant_rows = variant_lines(rows, stage, defaults)
        if variants:
            parts.append(sourced_table(variant_rows, rows, source, f"the stage {stage} variants table",
                                       markdown_table(variant_header, "lll" + "r" * 9, variants),
                                       f"**Variants of stage {stage}** (`--variant`, `--precision`)  \n"))
        return "\n\n".join(parts)

    notes = [f"Stage {stage} against the stage before it (stage 02: against the CPU reference), each in its "
             "default variant at fp32. Speedups: the earlier run ÷ this one; e2e only when both ran the same epochs."]
    if any(variant_lines(rows, stage, rc.variant_defaults(rows, known))[0] for _, rows in datasets):
        notes.append("Variants: the same configurations with `--variant` or `--precision`; vs default = the "
                     "default variant's fp32 e2e ÷ this e2e (above 1: faster than the default).")
    notes += [FOOTNOTE_SETUP, FOOTNOTE_GBS, FOOTNOTE_GFLOPS, FOOTNOTE_GENERATED]
    return per_file(datasets, known, part, " ".join(notes))


def fixed_cost(r):
    """What a run costs besides its epochs: setup + e2e − epochs × ms/epoch (setup, uploads, downloads)."""
    return r.setup + r.e2e - r.epochs * r.ms_per_epoch


def payback(before, this):
    """(break-even epochs or None, kind) of this entry's fixed cost against before's, wall(E) = fixed + E × ms/epoch.
    kind: 'at once', 'after' E epochs, 'never', 'until' (ahead for E epochs only), None without a figure."""
    if None in (before.setup, before.e2e, before.ms_per_epoch, before.epochs, this.setup, this.e2e,
                this.ms_per_epoch, this.epochs):
        return None, None
    extra, saving = fixed_cost(this) - fixed_cost(before), before.ms_per_epoch - this.ms_per_epoch
    if extra <= 0 and saving >= 0:
        return 0, "at once"
    if saving <= 0:
        return (None, "never") if extra > 0 else (math.floor(extra / saving), "until")
    return math.ceil(extra / saving), "after"


def payback_sentence(config, before, this, stage_names=None):
    epochs, kind = payback(before, this)
    if kind is None:
        return None
    plural = "s" if epochs != 1 else ""
    # the fixed costs are what the break-even compares, so the sentence shows them (setup alone can mislead)
    text = (f"{short_name(config)}, against {before.label(stage_names)}: fixed cost {fmt_3(fixed_cost(this))} ms "
            f"against {fmt_3(fixed_cost(before))} ms (setup {fmt_3(this.setup)} against "
            f"{fmt_3(before.setup)}), {fmt_3(this.ms_per_epoch)} against {fmt_3(before.ms_per_epoch)} ms an "
            "epoch: ") + {
        "at once": "ahead from the first epoch (its fixed cost is no larger, its epochs no slower)",
        "after": f"its larger fixed cost pays back after {epochs} epoch{plural}",
        "never": "its larger fixed cost never pays back (its epochs are no faster)",
        "until": f"ahead for the first {epochs} epoch{plural} only (its epochs are slower)"}[kind]
    if this.epochs == before.epochs and this.wall and before.wall:
        text += (f"; at the {this.epochs} epochs measured, wall {fmt_3(this.wall)} against {fmt_3(before.wall)} ms "
                 f"({fmt_times(rc.ratio(before.wall, this.wall))})")
    return text + "."


# ----------------------------------------------------------------------------
# 01-vector-add/README.md: the versions of the warm-up (rows of trainer "vector-add")

def vector_add_lines(rows):
    """(cells, rows shown): the newest row of each version at the newest run's size, in the program's order."""
    mine = [r for r in rows if r["trainer"] == "vector-add"]
    if not mine:
        return [], []
    n = rc.integer(mine[-1], "points")
    newest = list({row["variant"]: row for row in mine if rc.integer(row, "points") == n}.values())
    lines = []
    for previous, row in zip([None] + newest, newest):
        cells = [row["variant"]]
        for column in ("e2e_ms", "loop_ms"):  # with transfers, kernel only
            ms = rc.number(row, column)
            cells += [fmt_3(ms), fmt_3(None if ms is None or ms <= 0 else 12 * n / ms / 1e6),
                      "" if previous is None else fmt_times(rc.ratio(rc.number(previous, column), ms))]
        lines.append(cells)
    return lines, newest


def vector_add_block(datasets):
    note = ("GB/s: the bytes the add must move, 3 × 4 B × n (a and b read, c written) ÷ time. Speedup: the "
            "row above ÷ this row. " + FOOTNOTE_GENERATED)
    return results_tables(datasets, None, lambda rows, _: vector_add_lines(rows),
                          ["version", "with transfers ms", "GB/s", "speedup", "kernel only ms", "GB/s", "speedup"],
                          "l" + "r" * 6, what="the vector-add table", note=note,
                          title=lambda shown: f"c = a + b on n = {rc.integer(shown[-1], 'points'):,} floats  \n")


# ----------------------------------------------------------------------------
# stage 08: the persistent sweep, stages 07 and 08 at each hidden width

def sweep_block(datasets, known=None):
    """The sweep:stage08 block: a line per width (none: --hidden 0), 07's and 08's ms/epoch and 07 ÷ 08."""
    def sweep_lines(rows, defaults):
        lines, shown = [], []
        for width, by_stage in rc.persistent_sweep(rows, defaults).items():
            seven, eight = (rc.number(by_stage[s], "ms_per_epoch") if s in by_stage else None for s in ("07", "08"))
            lines.append(["none (`--hidden 0`)" if width == 0 else str(width), fmt_3(seven), fmt_3(eight),
                          fmt_times(rc.ratio(seven, eight))])
            shown += by_stage.values()
        return lines, shown

    note = (f"MNIST with one hidden layer (784-W-10; none: 784-10), batch {rc.MNIST_BATCH}, fp32, each stage's "
            "default variant, the newest run's rows (the persistent sweep of `make bench`, and the ladder's --hidden "
            "0 and 128); ms/epoch: the median epoch, comparable across epoch counts. 07 ÷ 08 above 1: stage 08 "
            "faster. " + FOOTNOTE_GENERATED)
    return results_tables(datasets, known, sweep_lines, ["hidden units", "stage 07 ms/epoch", "stage 08 ms/epoch",
                          "07 ÷ 08"], "lrrr", note=note)


# ----------------------------------------------------------------------------
# a stage README's per-step figures: what its prose would otherwise derive by hand (fp32, default variants)

def mnist_steps_per_epoch(batch=rc.MNIST_BATCH):
    """Training steps in an MNIST epoch: the full batches of the training set (60,000 // 128 = 468)."""
    return rc.MNIST_TRAIN // batch


def step_figures(entry):
    """(µs per step, steps per epoch): a regression step is a full-batch epoch; MNIST's, ms/epoch ÷ its steps."""
    if entry is None:
        return None, None
    if entry.row["trainer"] == "regression":
        return (None if entry.loop is None or not entry.epochs else entry.loop / entry.epochs * 1000), 1
    steps = mnist_steps_per_epoch(rc.integer(entry.row, "batch") or rc.MNIST_BATCH)
    return (None if entry.ms_per_epoch is None or steps <= 0 else entry.ms_per_epoch / steps * 1000), steps


def steps_lines(rows, stage, stage_names=None, defaults=None):
    """(regression cells, MNIST cells, rows shown): the stage before (if any) and this stage, newest fp32 rows."""
    regression, mnist, shown = [], [], []
    for config in rc.canonical_configs():
        this, before = stage_pair(rc.select_entries(rows, config, defaults), stage)
        lines, name = (regression, []) if config.trainer == "regression" else (mnist, [short_name(config)])
        if this is None:
            lines.append(name + [stage, "no result yet", "", "", ""])
            continue
        previous_us = step_figures(before)[0]  # None without a stage before
        for e in [e for e in (before, this) if e]:
            us, steps = step_figures(e)
            saved = ""
            if e is this and before is not None:  # positive when this stage is faster, signed when slower
                value = previous_us - us if None not in (previous_us, us) else None
                saved = NOT_COMPARED if value is None else ("−" if value < 0 else "") + rc.three_digits(abs(value))
            outside = e.e2e - e.loop if None not in (e.e2e, e.loop) else None
            figures = ([fmt_3(e.loop), fmt_3(us), fmt_3(outside)] if config.trainer == "regression" else
                       [fmt_3(e.ms_per_epoch), str(steps), fmt_3(us)])
            lines.append(name + [e.label(stage_names)] + figures + [saved])
            shown.append(e.row)
    return regression, mnist, shown


def steps_block(datasets, stage, stage_names=None, known=None):
    """The steps:stageNN block: per results file, the two per-step tables of steps_lines."""
    def part(source, rows, defaults):
        regression, mnist, shown = steps_lines(rows, stage, stage_names, defaults)
        if not shown:
            return f"No stage {stage} rows in `{source}` yet."
        tables = markdown_table(["regression 5M", "loop ms", "µs per epoch", "e2e − loop ms", "µs saved per epoch"],
                                "l" + "r" * 4, regression)
        tables += "\n\n" + markdown_table(["configuration", "run", "ms/epoch", "steps per epoch", "µs per step",
                                            "µs saved per step"], "ll" + "r" * 4, mnist)
        return sourced_table(shown, rows, source, f"the stage {stage} per-step table", tables)

    note = (f"Stage {stage} and the stage before it (the first stage: its own figures only), each in its default "
            "variant at fp32, newest rows. Regression: a step is a full-batch epoch; µs per epoch = loop ms ÷ epochs; "
            "e2e − loop: the time outside the training loop (uploads, downloads, evaluation). MNIST: µs per step "
            f"= ms/epoch (the median epoch) ÷ steps per epoch ({rc.MNIST_TRAIN:,} // batch). µs saved: the stage "
            "before's figure minus this stage's (− where this stage is slower). " + FOOTNOTE_GENERATED)
    return per_file(datasets, known, part, note)


# ----------------------------------------------------------------------------
# TEACHING.md's answer key: each stage's default fp32 run, the figures a class should expect

ANSWER_KEY_SPREAD = 0.2  # another GPU of the same model lands within about this share (clocks, driver, host)


def answer_key_block(datasets, stages, known=None):
    """The answerkey block: per stage its newest default fp32 rows, e2e with the range (± ANSWER_KEY_SPREAD) a
    student's run on the same GPU model should fall in."""
    def with_range(value):
        low, high = value * (1 - ANSWER_KEY_SPREAD), value * (1 + ANSWER_KEY_SPREAD)
        return f"{fmt_3(value)} ({fmt_3(low)}–{fmt_3(high)})"

    def cell(entry, figure, fmt=fmt_3):
        return fmt(getattr(entry, figure)) if entry else NOT_COMPARED

    def lines_of(rows, defaults):
        configs = (rc.Config("regression"), rc.Config("mnist", "0"), rc.Config("mnist", "128"))
        entries = [rc.select_entries(rows, config, defaults) for config in configs]
        lines, shown = [], []
        for stage in stages:
            regression, small, mid = found = [stage_entry(e, stage) for e in entries]
            if any(found):
                shown += [e.row for e in found if e is not None]
                lines.append([stage, cell(regression, "e2e", with_range), cell(regression, "loop"),
                              cell(small, "e2e", with_range), cell(mid, "e2e", with_range), cell(mid, "ms_per_epoch")])
        return lines, shown

    note = (f"Each stage's default variant, fp32, newest row; in brackets ± {ANSWER_KEY_SPREAD:.0%}, the range a run "
            "on the same GPU model should fall in. " + FOOTNOTE_GENERATED)
    return results_tables(datasets, known, lines_of,
                          ["stage", "regression e2e ms (range)", "regression loop ms", "MNIST hidden 0 e2e ms (range)",
                           "MNIST hidden 128 e2e ms (range)", "MNIST hidden 128 ms/epoch"],
                          "l" + "r" * 5, what="the answer key", note=note)


# ----------------------------------------------------------------------------
# compute-sanitizer: the summaries `make sanitize` records, linked with their verdicts

SANITIZE_SUFFIX = "-sanitize.txt"
ALL_VARIANTS_SUFFIX = "-sanitize-all-variants.txt"


def sanitize_summaries(results_dir):
    """[(file name, lines)] of the full-matrix summaries in results_dir (sorted by name)."""
    names = sorted(os.listdir(results_dir)) if os.path.isdir(results_dir) else []
    return [(name, [line.rstrip() for line in read_text(os.path.join(results_dir, name)).rstrip("\n").split("\n")])
            for name in names if name.endswith(SANITIZE_SUFFIX)]


def sanitize_verdicts(header, line):
    """'mnist: clean under all 4 tools' or 'mnist: racecheck 2 errors (library) 5s', cells cut at the header's."""
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
    tools = header.split()[2:]
    bad = [f"{tool} {cell}" for tool, cell in zip(tools, cells[2:]) if not cell.startswith("clean")]
    return f"{cells[1]}: " + (", ".join(bad) if bad else f"clean under all {len(tools)} tools")


def sanitize_block(summaries, results_dir, stage=None):
    """The sanitize blocks (docs/RESULTS.md, stage READMEs): each summary linked with its verdict, or stage's rows'."""
    blocks = []
    for name, lines in summaries:
        link = f"[`results/{name}`](../results/{name}) ({lines[0]})"
        if stage is None and len(lines) >= 3:
            text = f"{link}: *{lines[-1]}*"
            variants = name[:-len(SANITIZE_SUFFIX)] + ALL_VARIANTS_SUFFIX
            if os.path.exists(os.path.join(results_dir, variants)):
                last = read_text(os.path.join(results_dir, variants)).rstrip("\n").split("\n")[-1]
                text += (f"\n\nEvery variant and precision (`SAN_VARIANTS=all`): [`results/{variants}`]"
                         f"(../results/{variants}), which ends: *{last}*")
            blocks.append(text)
        elif stage is not None:
            mine = [sanitize_verdicts(lines[1], line) for line in lines[2:] if line.split()[:1] == [stage]]
            if mine:
                blocks.append(f"{link}, stage {stage}: " + "; ".join(mine) + ".")
    return "\n\n".join(blocks) if blocks else "*Not run yet: run `make sanitize` on a GPU machine.*"


# ----------------------------------------------------------------------------
# Nsight Compute: the per-kernel summaries `make stage N profile RECORD=1` records, quoted in part

PROFILE_MARKER = re.compile(r"<!-- (profile:stage(\d\d)(?: [^>]*?)?) begin -->")
PROFILE_NOTE = (
    "share: of the summed kernel time of the launches profiled (the first 40 of a 2-epoch run: the untimed "
    "warm-up epoch first); median, min and max µs: gpu__time_duration of one launch, alone on the GPU, cold "
    "caches, base clocks; dram %, sm %: medians of the throughputs as a share of their peaks, - where not "
    "collected (docs/PROFILING.md). Quoted by `bench/make_tables.py` from the file named above; do not edit by hand."
)


def parse_profile_selection(text, where):
    """[(trainer, K or None, [kernel names])] of a marker's 'regression=top2 mnist=a,b'."""
    picks = []
    for word in text.split():
        trainer, _, chosen = word.partition("=")
        if trainer not in ("regression", "mnist") or not chosen:
            raise TableError(f"{where}: '{word}': each selection is regression=... or mnist=...")
        top = re.fullmatch(r"top(\d+)", chosen)
        picks.append((trainer, int(top.group(1)), []) if top else (trainer, None, chosen.split(",")))
    if not picks:
        raise TableError(f"{where}: a profile marker names the trainers to quote, e.g. regression=top2 mnist=top3")
    return picks


def profile_excerpt(path, picks, results_rel):
    """The quote of a results/<gpu>-profile-NN.txt (provenance, command, then per trainer '== trainer: ...', a
    table header, kernel lines, a closing line): its provenance, then per trainer the lines picked."""
    lines = read_text(path).rstrip("\n").split("\n")
    sections, trainer = {}, None  # trainer: its lines after the ncu command, the table header first
    for line in lines[2:]:
        match = re.fullmatch(r"== (\w+): .*", line)
        if match:
            trainer = match.group(1)
            sections[trainer] = []
        elif trainer and line.strip():
            sections[trainer].append(line)
    command = lines[1].removeprefix("command: ") if len(lines) > 1 else ""
    parts = [f"`{results_rel}`: {lines[0]} (`{command}`)"]
    for trainer, top, names in picks:
        if trainer not in sections:
            parts.append(f"*{trainer}: not in this profile.*")
            continue
        header, *body = sections[trainer]
        kernels = [line for line in body if not line.endswith(" in all")]
        closing = [line for line in body if line.endswith(" in all")][-1:]
        if top is not None:
            chosen, what = kernels[:top], f"the {min(top, len(kernels))} lines of most time, of {len(kernels)}"
        else:
            chosen = [line for line in kernels if line.split()[-1] in names]
            missing = [n for n in names if n not in {line.split()[-1] for line in kernels}]
            what = f"{len(chosen)} of {len(kernels)} lines" + (f"; not in this profile: {', '.join(missing)}"
                                                               if missing else "")
        parts.append(f"{trainer} ({what}):\n\n```\n" + "\n".join([header] + chosen + closing) + "\n```")
    return "\n\n".join(parts)


def profile_block(datasets, results_dir, root, stage, picks):
    """A profile:stageNN block: per GPU with results or a recorded profile, its excerpt or a line saying none."""
    gpus = {}
    for device in [rc.device_of(rows) for _, rows in datasets]:
        gpus.setdefault(rc.gpu_slug(device), device)
    names = os.listdir(results_dir) if os.path.isdir(results_dir) else []
    for match in filter(None, (re.fullmatch(rf"(.+)-profile-{stage}\.txt", name) for name in names)):
        gpus.setdefault(match.group(1), match.group(1))
    missing = f"*(no profile recorded for this GPU yet: run `make stage {int(stage)} profile RECORD=1`)*"
    parts, quoted = [], False
    for slug, device in sorted(gpus.items()):
        path = os.path.join(results_dir, f"{slug}-profile-{stage}.txt")
        if os.path.exists(path):
            rel = os.path.relpath(path, root)
            parts.append(profile_excerpt(path, picks, path if rel.startswith("..") else rel))
            quoted = True
        else:
            parts.append(f"{device}: {missing}")
    return "\n\n".join((parts or [missing]) + ([f"<sub>{PROFILE_NOTE}</sub>"] if quoted else []))


# ----------------------------------------------------------------------------
# kernel ladders (NN-*/NAME_ladder.cu): `make stage N ladder RECORD=1` appends one row per version and shape to
# results/<gpu>-ladders.csv; a ladder:NAME block shows the last run of each file, one table per shape

# common/ladder.h LADDER_CSV_HEADER; tests/bench/test_bench.py checks that the two stay equal.
LADDER_COLUMNS = (
    "stage", "ladder", "shape", "version", "name", "median_ms", "min_ms", "max_ms", "setup_ms", "rate", "unit",
    "ceiling", "ceiling_ms", "ceiling_rate", "repeats", "device", "cc", "cuda", "driver", "commit", "run",
)
# Ladders whose reference row is a baseline to beat, not a bound: "baseline" where the others say "ceiling".
LADDER_BASELINES = {("08", "persistent"), ("08", "regression")}
# Version names recorded before a rename, shown as today's (the rows stay as written): (stage, ladder, old) -> new.
LADDER_RENAMED = {("08", "persistent", "step-graph"): "kernel-graph"}


def current_names(row):
    """row with its version's and its reference's names as the ladder calls them today (LADDER_RENAMED)."""
    names = {column: LADDER_RENAMED.get((row["stage"], row["ladder"], row[column]), row[column])
             for column in ("name", "ceiling")}
    return {**row, **names} if any(names[c] != row[c] for c in names) else row


def last_run(rows, stage, ladder):
    """The rows of the last run (in file order) that wrote rows of this stage and ladder, names as today's."""
    mine = [r for r in rows if r["stage"] == stage and r["ladder"] == ladder]
    return [current_names(r) for r in mine if r["run"] == mine[-1]["run"]] if mine else []


def kernel_ladder_lines(rows, reference="ceiling"):
    """The cells of one shape's table in version order, then the ceiling (or baseline: reference)."""
    rows = sorted(rows, key=lambda r: rc.integer(r, "version") or 0)
    lines = []
    for previous, row in zip([None] + rows, rows):
        ms, rate, setup = rc.number(row, "median_ms"), rc.number(row, "rate"), rc.number(row, "setup_ms")
        share = rc.ratio(rate, rc.number(row, "ceiling_rate"))
        step = NOT_COMPARED if previous is None else step_cell(rc.number(previous, "median_ms"), ms,
                                                               previous["version"], row["version"])
        lines.append([str(rc.integer(row, "version")), f"`{row['name']}`",
                      f"{fmt_3(ms)} ({fmt_3(rc.number(row, 'min_ms'))}–{fmt_3(rc.number(row, 'max_ms'))})",
                      fmt_3(rate), f"{100 * share:.1f}%" if share is not None else NOT_COMPARED, step,
                      "1.00×" if previous is None else fmt_times(rc.ratio(rc.number(rows[0], "median_ms"), ms)),
                      "" if setup is None else fmt_3(setup)])
    if rows:
        lines.append(["", f"{reference}: {rows[-1]['ceiling']}", fmt_3(rc.number(rows[-1], "ceiling_ms")),
                      fmt_3(rc.number(rows[-1], "ceiling_rate")), "100%", "", "", ""])
    return lines


LADDER_STEPS = "Step: the row above ÷ this row; cumulative: the first row ÷ this row."
LADDER_FOOTNOTE = (
    "ms per call: median of the timed runs after 3 warm-ups, min–max in brackets (a GEMM run is 10 calls back "
    "to back). Rate at the median: GB/s of the bytes the kernel must read, or GFLOP/s = 2 m n k ÷ time. % of "
    f"ceiling: this rate ÷ the ceiling's, measured in the same run. {LADDER_STEPS} Setup: host time to plan the "
    f"version before its first call (autotuning included). {FOOTNOTE_GENERATED}"
)
LADDER_FOOTNOTES = {
    # 05-streams/upload_ladder.cu times copies on the host clock, not kernels on events
    "upload": (
        "ms per upload: host clock from the call until the bytes are on the device, median of the timed runs "
        "after 3 warm-ups, min–max in brackets. Rate: GB/s of the bytes moved (x and y, 8 B a point). % of "
        f"ceiling: this rate ÷ a pinned cudaMemcpy's of the same bytes, measured in the same run. {LADDER_STEPS} "
        "Setup: host time before the version's first upload, once (pinned slots, copy threads: a trainer's "
        "setup_ms); for `host-register` the registration of the caller's array, which its time includes (every "
        f"new array pays it again). {FOOTNOTE_GENERATED}"
    ),
    # 08-persistent-kernels/persistent_ladder.cu: a run is S SGD steps, against a baseline (LADDER_BASELINES)
    "persistent": (
        "ms per step: one run of S steps (one graph launch or one kernel launch) between CUDA events, ÷ S; "
        "median of the timed runs after 3 warm-ups, min–max in brackets, each run from the same initial weights "
        "(restored untimed). Rate: GFLOP/s of a step's GEMMs (forward and gradients). The baseline row is version "
        "0, `kernel-graph` (three kernels a step, all S steps in one CUDA graph), which the persistent versions "
        f"must beat: % of baseline = this rate ÷ the baseline's, above 100% faster than it. {LADDER_STEPS} "
        f"{FOOTNOTE_GENERATED}"
    ),
    # 08-persistent-kernels/regression_ladder.cu: a run is every epoch of the trainer; its ceiling is its baseline
    "regression": (
        "ms per epoch: one run of every epoch (the graph launches of 10 epochs each, or one cooperative launch) "
        "between CUDA events, ÷ the epochs; median of the timed runs after 3 warm-ups, min–max in brackets, each "
        "run from the same initial w and b (restored untimed). Rate: GB/s of an epoch's reads of x and y, 8 B a "
        "point; `on-chip` reads most points once a run, not every epoch, so its rate is an effective one. The "
        "baseline row is version 0, `graphs` (stage 07's two kernels an epoch, 10 epochs a CUDA graph, as the "
        "trainer's `graphs` variant runs them), which the persistent versions must beat: % of baseline above "
        f"100% is faster than it. {LADDER_STEPS} {FOOTNOTE_GENERATED}"
    ),
}


def kernel_ladder_block(datasets, stage, ladder):
    """The ladder:<ladder> block of stage's README."""
    parts = []
    reference = "baseline" if (stage, ladder) in LADDER_BASELINES else "ceiling"
    for source, rows in datasets:
        run = last_run(rows, stage, ladder)
        first = run[0] if run else {}
        commit = f" · commit {first['commit']}" if run and first["commit"] else ""
        for shape in dict.fromkeys(r["shape"] for r in run):
            lines = kernel_ladder_lines([r for r in run if r["shape"] == shape], reference)
            columns = 8 if any(cells[7] for cells in lines) else 7  # setup only where measured
            header = ["#", "version", "ms (min–max)", first["unit"] or "rate", f"% of {reference}", "step",
                      "cumulative", "setup ms"]
            table = markdown_table(header[:columns], "rl" + "r" * (columns - 2),
                                   [cells[:columns] for cells in lines])
            parts.append(f"**Stage {stage} · {ladder} ladder · {shape}**  \n{first['device']} · `{source}`{commit}"
                         f" · run {first['run']}, {first['repeats']} timed runs a version\n\n{table}")
    if not parts:
        return (f"*Not measured yet: run `make stage {int(stage)} ladder RECORD=1` on a GPU machine, then "
                "`python3 bench/make_tables.py`.*")
    return "\n\n".join(parts + [f"<sub>{LADDER_FOOTNOTES.get(ladder, LADDER_FOOTNOTE)}</sub>"])


def kernel_ladder_blocks(datasets, root, stage, stage_dir):
    """{'ladder:NAME': text} for every ladder the stage folder holds (NAME_ladder.cu) or the results name."""
    folder = os.path.join(root, stage_dir)
    files = os.listdir(folder) if os.path.isdir(folder) else []
    names = {m.group(1) for m in (re.fullmatch(r"(\w+)_ladder\.cu", f) for f in files) if m}
    for _, rows in datasets:
        names.update(r["ladder"] for r in rows if r["stage"] == stage)
    return {f"ladder:{name}": kernel_ladder_block(datasets, stage, name) for name in sorted(names)}


# ----------------------------------------------------------------------------
# assistant rounds: `make stage N try FILE=answer.md`, its output kept as results/<gpu>-try-NN-TRAINER.txt

TRY_FILE = re.compile(r"(?P<gpu>.+)-try-(?P<stage>\d\d)-(?P<trainer>regression|mnist)\.txt")
TRY_COMMAND = re.compile(r"# make stage \d+ try FILE=(?P<answer>\S+)")
TRY_PROVENANCE = re.compile(r"# commit (?P<commit>[0-9a-f]+)(?: \((?P<state>[^)]*)\))?, (?P<device>[^,]+),")
TRY_RUN = re.compile(r"stage (?P<stage>\d\d)(?P<try>-try)? (?:regression|mnist) \((?P<variant>[^,)]+)[^)]*\) on "
                     r"[^:]+: setup [^,]+, e2e (?P<e2e>[\d.]+) ms, loop (?P<loop>[\d.]+) ms")
# PASS, FAIL, NOT RUN, UNVERIFIED; a PASS also gives the relative loop speed
TRY_VERDICT = re.compile(r"try: (?P<verdict>[A-Z]+(?: [A-Z]+)*)(?:.*?relative loop speed (?P<speed>[\d.]+x.*)|.*)")


def parse_try_file(path):
    """The round recorded in path: answer, commit, device, verdict line and word ("outcome"), the variant, e2e
    and loop ms (as printed) of the stage's own file ("own") and of the candidate, the relative loop speed."""
    match = TRY_FILE.fullmatch(os.path.basename(path))
    if not match:
        raise TableError(f"{path}: not named <gpu>-try-NN-TRAINER.txt")
    lines = read_text(path).rstrip("\n").split("\n")
    command = TRY_COMMAND.fullmatch(lines[0])
    provenance = TRY_PROVENANCE.match(lines[1]) if len(lines) > 1 else None
    if not command or not provenance:
        raise TableError(f"{path}: the first two lines must be '# make stage N try FILE=...' and '# commit ...'")
    verdict = TRY_VERDICT.fullmatch(lines[-1])
    if not verdict:
        raise TableError(f"{path}: its last line is not a 'try: ...' verdict")
    round_ = {**match.groupdict(), **command.groupdict(), **provenance.groupdict(""), "verdict": lines[-1],
              "outcome": verdict.group("verdict"), "speed": verdict.group("speed")}
    for run in filter(None, map(TRY_RUN.match, lines)):
        if run.group("stage") == round_["stage"]:
            round_["candidate" if run.group("try") else "own"] = {k: run.group(k) for k in ("variant", "e2e", "loop")}
    if round_["outcome"] == "PASS" and not ("own" in round_ and "candidate" in round_):
        raise TableError(f"{path}: a PASS without the two timed runs")
    return round_


def try_rounds(results_dir):
    """Every round in results_dir, by stage, trainer and file name."""
    names = os.listdir(results_dir) if os.path.isdir(results_dir) else []
    rounds = [dict(parse_try_file(os.path.join(results_dir, n)), file=n) for n in names if TRY_FILE.fullmatch(n)]
    return sorted(rounds, key=lambda r: (r["stage"], r["trainer"], r["file"]))


def rounds_block(rounds, stage=None, base="."):
    """The table of the rounds (all, or stage's), a line per file; links relative to base, the README's folder."""
    shown = [r for r in rounds if stage is None or r["stage"] == stage]
    if not shown:
        return "*No round recorded yet: `make stage N try FILE=answer.md` on a GPU machine, output kept in results/.*"
    lines = []
    for r in shown:
        figures = [r.get(run, {}).get(key, NOT_COMPARED) for key in ("e2e", "loop") for run in ("own", "candidate")]
        commit = r["commit"] + (f" ({r['state']})" if r["state"] else "")
        output = os.path.relpath(os.path.join("results", r["file"]), base)
        lines.append([r["stage"], r["trainer"], f"[`{r['answer']}`]({os.path.relpath(r['answer'], base)})",
                      r["outcome"]] + figures + [r["speed"] or NOT_COMPARED, r["device"], commit,
                                                 f"[`{r['file']}`]({output})"])
    header = ["stage", "trainer", "answer", "verdict", "stage e2e ms", "answer e2e ms", "stage loop ms",
              "answer loop ms", "loop speed", "GPU", "commit", "output"]
    footnote = ("<sub>One line per `results/<gpu>-try-NN-TRAINER.txt`, the output of `make stage N try "
                "FILE=answer.md`: verdict and relative loop speed from its last line (`try:`; the stage's loop ÷ "
                "the answer's, above 1: the answer is faster), the stage's own file and the answer timed one after "
                "the other with the same flags (the canonical configuration, medians of 3 runs), GPU and commit "
                "from its header. " + FOOTNOTE_GENERATED.replace("the CSV named above", "those files") + "</sub>")
    return markdown_table(header, "l" * 4 + "r" * 5 + "l" * 3, lines) + "\n\n" + footnote


# ----------------------------------------------------------------------------
# the assistant loop: its rounds (results/loop/<gpu>.csv and the records in 02-llm-baseline/loop/)

LOOP_DIR = os.path.join("02-llm-baseline", "loop")
LOOP_RECORD = re.compile(r"(?P<trainer>regression|mnist)(?P<guided>-guided)?/round-(?P<round>\d+)")
LOOP_FIGURE_NAME = {"regression": "e2e ms", "mnist": "ms/epoch"}
LOOP_CONFIG = {"regression": "5M points, 200 epochs", "mnist": "`--hidden 128`, 10 epochs"}
STUDY_REMOVED = (0.5, 0.9)  # the study's shares of time removed: iterated prompting, hand optimization


def loop_verdicts(root):
    """{(trainer, mode, round): PASS or FAIL} of every round recorded under LOOP_DIR (its verdict.txt's last try:)."""
    verdicts = {}
    for path in glob.glob(os.path.join(root, LOOP_DIR, "*", "round-*", "verdict.txt")):
        match = LOOP_RECORD.fullmatch(os.path.relpath(os.path.dirname(path), os.path.join(root, LOOP_DIR)))
        tries = [line for line in read_text(path).split("\n") if line.startswith("try: ")]
        if match and tries:
            key = (match["trainer"], "guided" if match["guided"] else "open", int(match["round"]))
            verdicts[key] = "PASS" if TRY_VERDICT.fullmatch(tries[-1]).group("verdict") == "PASS" else "FAIL"
    return verdicts


def removed(this, stage02):
    """The share of stage 02's time that this figure removes (None where either is missing)."""
    share = rc.ratio(this, stage02)
    return None if share is None else 1 - share


def fmt_speedup(value):
    return NOT_COMPARED if value is None else f"{rc.three_digits(value)}×"


def fmt_removed(share):
    """A removed share as a percentage, with the decimals that keep the later stages' 99.9x % apart."""
    if share is None:
        return NOT_COMPARED
    digits = 2 if share >= 0.999 else 1 if share >= 0.99 else 0  # never rounded up to a 100 % no run reaches
    return f"{100 * share:.{digits}f} %"


def loop_cells(run, version, verdict):
    """The loop table's cells of version in one run's rows {stage: row}, against stage 02 and 08 of that run."""
    this, before, best = (run.get(stage) for stage in (version, "02", "08"))
    figure, figure02 = rc.loop_figure(this), rc.loop_figure(before)
    return [verdict, fmt_3(figure), fmt_3(figure02), fmt_speedup(rc.ratio(figure02, figure)),
            fmt_removed(removed(figure, figure02)), fmt_3(this and rc.wall_ms(this)), fmt_3(best and rc.wall_ms(best)),
            fmt_3(rc.loop_figure(best))]


def loop_lines(trainer, rounds, stages, verdicts, ideas):
    """The hand-written stages, then each recorded round; guided round k named with stage k+2's idea."""
    lines, hand = [], stages.get(trainer, {})
    for nn in sorted(s for s in hand if s not in ("02", rc.LOOP_CANDIDATE)):
        lines.append([f"stage {nn}"] + loop_cells(hand, nn, "hand-written"))
    for key in sorted((k for k in set(verdicts) | set(rounds) if k[0] == trainer), key=lambda k: (k[1] != "open", k)):
        idea = ideas.get(f"{key[2] + 2:02d}") if key[1] == "guided" else None
        named = f" ({key[2] + 2:02d}: {idea})" if idea else ""
        lines.append([f"{key[1]} round {key[2]}{named}"]
                     + loop_cells(rounds.get(key, {}), rc.LOOP_CANDIDATE, verdicts.get(key, "not recorded")))
    return lines


def loop_block(datasets, root):
    """One table a trainer a results file of the loop: every round beside the hand-written stages."""
    verdicts, ideas, parts = loop_verdicts(root), stage_ideas(root), []
    for source, rows in datasets:
        rounds, stages = rc.loop_rounds(rows), rc.loop_stages(rows)
        for trainer in ("regression", "mnist"):
            lines = loop_lines(trainer, rounds, stages, verdicts, ideas)
            if lines:
                figure = LOOP_FIGURE_NAME[trainer]
                header = ["version", "verdict", figure, f"stage 02 {figure}", "× stage 02", "02's time removed",
                          "set-up + e2e ms", "stage 08 set-up + e2e ms", f"stage 08 {figure}"]
                parts.append(f"**{trainer}**, {LOOP_CONFIG[trainer]} ({rc.device_of(rows)} · `{source}`):\n\n"
                             + markdown_table(header, "llrrrrrrr", lines))
    if not parts:
        return "*No round measured yet: `make loop TRAINER=... ROUND=2 FROM=answer.md` on a GPU machine.*"
    note = ("A round's candidate, stage 02 and stage 08 are timed one after the other in the round's own run "
            "(`--repeat 3`, medians); the hand-written stages in one run of their own, with the same flags. "
            "× stage 02: stage 02 ÷ this; 02's time removed: 1 − this ÷ stage 02, both against stage 02 of the same run "
            "(the study's 50 % is 2×). set-up + e2e: what one training run costs its user, the untimed set-up "
            "(pinned buffers, registered host arrays, graphs) included. A round's verdict covers every variant its "
            "answer lists; a FAIL has no figures. Stage 02 and 08 vary from run to run: compare a round with the "
            "stage 08 of its own run. ")
    return "\n\n".join(parts + [f"<sub>{note}{FOOTNOTE_GENERATED}</sub>"])


def fmt_cut(this, stage02):
    """'99.9 % (1,400×)': the share of stage 02's time removed and the speedup it is."""
    return f"{fmt_removed(removed(this, stage02))} ({fmt_speedup(rc.ratio(stage02, this))})"


def loop_outcome_block(datasets, root):
    """A line a trainer: each mode's best round against the study's 50 % and 90 %, its run's stage 08, the hand-
    written stages."""
    verdicts, lines, sources = loop_verdicts(root), [], []
    for source, rows in datasets:
        rounds, stages = rc.loop_rounds(rows), rc.loop_stages(rows)
        for trainer in ("regression", "mnist"):
            best = {}  # mode: (share removed, round, its run's figures by stage)
            for (t, mode, k), run in rounds.items():
                f = {stage: rc.loop_figure(row) for stage, row in run.items()}
                share = removed(f.get(rc.LOOP_CANDIDATE), f.get("02"))
                if t == trainer and share is not None and share > best.get(mode, (-math.inf,))[0]:
                    best[mode] = (share, k, f)
            if not best:
                continue
            sources.append(source)
            said = "; ".join(
                f"the best of {sum(1 for key in verdicts if key[:2] == (trainer, m))} {m} rounds "
                f"({sum(1 for key, v in verdicts.items() if key[:2] == (trainer, m) and v == 'PASS')} passed), round "
                f"{k}, removed **{fmt_cut(f[rc.LOOP_CANDIDATE], f['02'])}**, "
                f"{fmt_speedup(rc.ratio(f.get('08'), f[rc.LOOP_CANDIDATE]))} stage 08 of its run"
                for m, (_, k, f) in sorted(best.items(), reverse=True))
            top = max(share for share, _, _ in best.values())
            verdict = ", ".join(f"{100 * goal:.0f} % **{'hit' if top >= goal else 'miss'}**" for goal in STUDY_REMOVED)
            hand = {nn: rc.loop_figure(row) for nn, row in stages.get(trainer, {}).items()}
            hand_said = ", ".join(f"{nn} {fmt_cut(hand[nn], hand.get('02'))}" for nn in sorted(hand) if nn != "02")
            lines.append(f"- **{trainer}**, {LOOP_FIGURE_NAME[trainer]} ({rc.device_of(rows)}): {said}. Against the "
                         f"study's figures: {verdict}."
                         + (f" The hand-written stages removed {hand_said}." if hand_said else ""))
    if not lines:
        return "*No round measured yet.*"
    named = ", ".join(f"`{s}`" for s in dict.fromkeys(sources))
    return "\n".join(lines) + (f"\n\n<sub>Each round against stage 02 and stage 08 of its own run; the table of every "
                               f"round is in [loop/README.md](loop/README.md). Generated by `bench/make_tables.py` from "
                               f"{named}; do not edit by hand.</sub>")


# ----------------------------------------------------------------------------
# predictions: the stage READMEs' <!-- predictions --> tables, and the generated outcome

PREDICTIONS_HEADER = ("trainer", "config", "metric", "predicted low", "predicted high")
VERDICT_HIT = "**Verdict: hit**"  # prose may say "as predicted" only inside an outcome block that says it

# metric -> (what it is, unit, the Entry figure); speedup_*: the stage before's figure ÷ this stage's (speedup)
PREDICTION_METRICS = {
    "speedup_e2e": ("e2e speedup", "×", "e2e"),
    "speedup_wall": ("wall speedup", "×", "wall"),
    "speedup_loop": ("loop speedup", "×", "loop"),
    "speedup_epoch": ("ms/epoch speedup", "×", "ms_per_epoch"),
    "e2e_ms": ("e2e", " ms", "e2e"),
    "wall_ms": ("wall", " ms", "wall"),
    "loop_ms": ("loop", " ms", "loop"),
    "ms_per_epoch": ("ms/epoch", " ms", "ms_per_epoch"),
    "setup_ms": ("setup", " ms", "setup"),
}


class Prediction:
    """One line of a predictions table. config: the regression's canonical size ('5M', '5000000' or empty) or an
    MNIST --hidden of the ladder ('0', '128', '1024,1024'), then optionally variant=NAME and precision=NAME."""

    def __init__(self, trainer, config_text, metric, low, high, where):
        self.trainer, self.metric, self.low, self.high, self.where = trainer, metric, low, high, where
        tokens = config_text.replace("--hidden", " ").split()
        base = tokens[0] if tokens and "=" not in tokens[0] else ""
        if trainer == "regression":
            if base.replace(",", "") not in ("", "5M", str(rc.REGRESSION_POINTS)):
                raise TableError(f"{where}: config {config_text!r}: the regression's canonical size is 5M")
        elif trainer == "mnist":
            if base not in rc.MNIST_HIDDEN:
                raise TableError(f"{where}: config {config_text!r}: an MNIST --hidden of the ladder, one of "
                                 f"{', '.join(rc.MNIST_HIDDEN)}")
        else:
            raise TableError(f"{where}: trainer {trainer!r}: regression or mnist")
        found = dict(token.partition("=")[::2] for token in tokens[1 if base else 0:])
        if not set(found) <= {"variant", "precision"} or not all(found.values()):
            raise TableError(f"{where}: config {config_text!r}: after the size only variant=NAME and precision=NAME")
        self.config = rc.Config("regression") if trainer == "regression" else rc.Config("mnist", base)
        self.variant, self.precision = found.get("variant"), found.get("precision")

    def predicted(self):
        unit = PREDICTION_METRICS[self.metric][1]
        if self.low is None or self.high is None:
            return f"≤ {self.high:g}{unit}" if self.low is None else f"≥ {self.low:g}{unit}"
        return f"{self.low:g}{unit}" if self.low == self.high else f"{self.low:g}–{self.high:g}{unit}"

    def judge(self, value):
        """(hit, measured ÷ predicted): against the middle of the range (or its one bound) for a hit, against
        the bound passed for a miss; (None, None) without a value."""
        if value is None:
            return None, None
        if self.low is not None and value < self.low:
            return False, value / self.low
        if self.high is not None and value > self.high:
            return False, value / self.high
        bounds = [b for b in (self.low, self.high) if b is not None]
        return True, value / (sum(bounds) / len(bounds))


def parse_predictions(text, where):
    """The Prediction of each line of text's predictions table ([] when it has none); metric: one of
    PREDICTION_METRICS; a bound may be empty (open), not both:

        | trainer | config | metric | predicted low | predicted high |
        |:--|:--|:--|--:|--:|
        | mnist | 128 | speedup_epoch | 1.1 | 1.2 |
    """
    span = marked_span(text, "predictions", where)
    if span is None:
        return []
    first_line = text.count("\n", 0, span[0]) + 2
    predictions, header = [], None
    for offset, line in enumerate(text[span[0]:span[1]].split("\n")[1:]):
        here = f"{where}:{first_line + offset}"
        line = line.strip()
        if not line:
            continue
        if not (line.startswith("|") and line.endswith("|")):
            raise TableError(f"{here}: not a table line: {line!r}")
        cells = [c.strip() for c in line[1:-1].split("|")]
        if header is None:
            header = tuple(c.lower() for c in cells)
            if header != PREDICTIONS_HEADER:
                raise TableError(f"{here}: the header must be | {' | '.join(PREDICTIONS_HEADER)} |")
            continue
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        if len(cells) != len(PREDICTIONS_HEADER):
            raise TableError(f"{here}: {len(cells)} cells, expected {len(PREDICTIONS_HEADER)}")
        trainer, config, metric, low, high = cells
        if metric not in PREDICTION_METRICS:
            raise TableError(f"{here}: metric {metric!r}: one of {', '.join(PREDICTION_METRICS)}")
        low, high = _number_or_none(low, here, "predicted low"), _number_or_none(high, here, "predicted high")
        if low is None and high is None:
            raise TableError(f"{here}: a prediction needs a low or a high bound")
        if low is not None and high is not None and low > high:
            raise TableError(f"{here}: predicted low {low:g} is above predicted high {high:g}")
        predictions.append(Prediction(trainer, config, metric, low, high, here))
    return predictions


def _number_or_none(text, where, column):
    """A bound's cell as rc.number reads a field (thousands separators and a × allowed), None when empty."""
    text = text.strip().rstrip("×x").replace(",", "").strip()
    value = rc.number({column: text}, column)
    if text and value is None:
        raise TableError(f"{where}: {column} {text!r} is not a number (a finite one)")
    return value


def outcome_lines(rows, stage, predictions, stage_names=None, defaults=None):
    """(cells, rows used, hits, misses): a line per prediction, read as the stage table reads its figures (this:
    the stage's default variant at fp32, or what the prediction names; before: the stage before it)."""
    lines, used, hits, misses = [], [], 0, 0
    for p in predictions:
        what, unit, figure = PREDICTION_METRICS[p.metric]
        is_speedup = p.metric.startswith("speedup_")
        this, before = stage_pair(rc.select_entries(rows, p.config, defaults), stage, reference=True)
        if p.variant is not None or p.precision not in (None, "fp32"):
            this = next((e for e in rc.variant_entries(rows, p.config, stage, defaults)
                         if (p.variant is None or e.row["variant"] == p.variant)
                         and e.precision == (p.precision or "fp32")), None)
        value = None if this is None else (speedup(before, this, figure) if is_speedup else getattr(this, figure))
        config = short_name(p.config) + "".join(f" {k}={v}" for k, v in (("variant", p.variant),
                                                                         ("precision", p.precision)) if v)
        if is_speedup and before is not None:
            what += f" vs {before.label(stage_names)}"
        hit, ratio = p.judge(value)
        if hit is None:
            lines.append([config, what, p.predicted(), "no result yet", "", "—"])
            continue
        used += [this.row, before.row] if is_speedup else [this.row]
        hits, misses = hits + hit, misses + (not hit)
        measured = f"{value:.3g}{unit}" if unit == "×" else f"{fmt_3(value)}{unit}"
        lines.append([config, what, p.predicted(), measured, f"{ratio:.2f}×", "hit" if hit else "**miss**"])
    return lines, used, hits, misses


def outcome_block(datasets, stage, predictions, stage_names=None, known=None):
    """The outcome:stageNN block: each prediction against each results file, then one verdict (hit when every
    prediction measured hit)."""
    parts, hits, misses = [], 0, 0
    for source, rows in datasets:
        lines, used, h, m = outcome_lines(rows, stage, predictions, stage_names, rc.variant_defaults(rows, known))
        hits, misses = hits + h, misses + m
        table = markdown_table(["configuration", "metric", "predicted", "measured", "measured ÷ predicted",
                                "verdict"], "llrrrl", lines)
        parts.append(sourced_table(used, rows, source, f"the stage {stage} outcome", table))
    if not hits and not misses:
        verdict = "**Verdict: not measured yet.**"
    elif misses:
        verdict = f"**Verdict: miss**: {misses} of {hits + misses} predictions measured missed their range."
    else:
        verdict = f"{VERDICT_HIT}: all {hits} predictions measured came out as predicted."
    note = ("Predictions: the table under *Prediction* above, made before measuring. measured ÷ predicted: "
            "for a hit, against the middle of the predicted range (or its one bound); for a miss, against the "
            "bound it passed. Speedups: the stage before ÷ this stage, as in the table above. " + FOOTNOTE_GENERATED)
    return "\n\n".join(parts + [verdict, f"<sub>{note}</sub>"])


def outcomes_block(datasets, predictions, stage_names=None, known=None):
    """TEACHING.md's outcomes:all: every stage's predictions ({stage: [Prediction]}), a line each."""
    def lines_of(rows, defaults):
        lines, shown = [], []
        for nn, stage_predictions in predictions.items():
            cells, used, _, _ = outcome_lines(rows, nn, stage_predictions, stage_names, defaults)
            lines += [[nn] + c for c in cells]
            shown += used
        return lines, shown

    note = ("Each stage README's predictions table, made before measuring, against the rows named above, as "
            "the README's own outcome block reads them. " + FOOTNOTE_GENERATED)
    return results_tables(datasets, known, lines_of, ["stage", "configuration", "metric", "predicted", "measured",
                          "measured ÷ predicted", "verdict"], "lllrrrl", what="the outcomes", note=note)


AS_PREDICTED = re.compile(r"(?<!not )(?<!not\n)(?<!n't )\bas\s+predicted\b", re.IGNORECASE)
OUTCOME_BLOCK = re.compile(r"<!-- (outcome:[\w-]+) begin -->(.*?)<!-- \1 end -->", re.DOTALL)


def prediction_claim_problems(where, text):
    """A message per "as predicted" in text outside a generated outcome block whose verdict is hit."""
    hit_spans = [m.span() for m in OUTCOME_BLOCK.finditer(text) if VERDICT_HIT in m.group(2)]
    return [f"{where}:{text.count(chr(10), 0, match.start()) + 1}: says \"{' '.join(match.group(0).split())}\" "
            "outside a generated outcome block whose verdict is hit" for match in AS_PREDICTED.finditer(text)
            if not any(start <= match.start() < end for start, end in hit_spans)]


# ----------------------------------------------------------------------------
# the files: which blocks go where, and writing them between their markers

RESULTS_DOC = os.path.join("docs", "RESULTS.md")  # the ladder tables and the sanitizer table


def marked_span(text, name, where):
    """(start, end) of text between name's begin and end markers, None without either; TableError for one only,
    or both in the wrong order."""
    begin, end = f"<!-- {name} begin -->", f"<!-- {name} end -->"
    b, e = text.find(begin), text.find(end)
    if b < 0 and e < 0:
        return None
    if b < 0 or e < 0 or e < b:
        raise TableError(f"{where}: '{begin}' and '{end}' must both appear, in that order")
    return b + len(begin), e


def replace_between(text, name, content, where="text"):
    """text with the part between name's markers replaced by content, or None when it has neither marker."""
    span = marked_span(text, name, where)
    return None if span is None else text[:span[0]] + "\n" + content.strip("\n") + "\n" + text[span[1]:]


def all_blocks(datasets, root, results_dir):
    """{file: {marker name: content}}: README.md's headline; docs/RESULTS.md's ladders and sanitizer table; each
    stage README's tables (outcome when it has predictions, a profile quote per profile marker); the assistant
    READMEs' rounds; the loop's; TEACHING.md's answer key and outcomes."""
    dirs, predictions, rounds = rc.stage_dirs(root), {}, try_rounds(results_dir)
    names = {nn: f"{nn} {d[3:]}" for nn, d in dirs.items()}
    known = rc.source_default_variants(root)
    summaries = sanitize_summaries(results_dir)
    ladder_sets = rc.load_datasets(results_dir, root, LADDER_COLUMNS)
    loop_sets = rc.load_datasets(os.path.join(results_dir, "loop"), root)
    files = {
        os.path.join(root, "README.md"): {
            "ladder:headline": headline_block(datasets, names, known, stage_ideas(root)),
        },
        os.path.join(root, RESULTS_DOC): {
            "ladder:regression": ladder_block(datasets, "regression", names, known),
            "ladder:mnist": ladder_block(datasets, "mnist", names, known),
            "sanitize:summary": sanitize_block(summaries, results_dir),
        },
    }
    for nn, d in dirs.items():
        readme = os.path.join(root, d, "README.md")
        blocks = files[readme] = {
            f"results:stage{nn}": vector_add_block(datasets) if nn == "01" else stage_block(datasets, nn, names, known),
            f"sanitize:stage{nn}": sanitize_block(summaries, results_dir, nn)}
        if nn != "01":
            blocks[f"steps:stage{nn}"] = steps_block(datasets, nn, names, known)
        if nn == "02":
            blocks["rounds:all"] = rounds_block(rounds, None, d)
            blocks["loop:outcome"] = loop_outcome_block(loop_sets, root)
            files[os.path.join(root, LOOP_DIR, "README.md")] = {"loop:rounds": loop_block(loop_sets, root)}
        if nn == "08":
            blocks["sweep:stage08"] = sweep_block(datasets, known)
        assistant = os.path.join(root, d, "assistant", "README.md")
        if os.path.exists(assistant):
            files[assistant] = {f"rounds:stage{nn}": rounds_block(rounds, nn, os.path.join(d, "assistant"))}
        blocks.update(kernel_ladder_blocks(ladder_sets, root, nn, d))
        text = read_text(readme)
        predictions[nn] = parse_predictions(text, readme) if nn != "01" else []
        if predictions[nn]:
            blocks[f"outcome:stage{nn}"] = outcome_block(datasets, nn, predictions[nn], names, known)
        for match in PROFILE_MARKER.finditer(text):
            name, profiled = match.group(1), match.group(2)
            where = f"{readme}:{text.count(chr(10), 0, match.start()) + 1}"
            picks = parse_profile_selection(name[len(f"profile:stage{profiled}"):], where)
            blocks[name] = profile_block(datasets, results_dir, root, profiled, picks)
    files[os.path.join(root, "TEACHING.md")] = {
        "answerkey": answer_key_block(datasets, [nn for nn in dirs if nn != "01"], known),
        "outcomes:all": outcomes_block(datasets, predictions, names, known)}
    return files


def main(argv=None):
    parser = argparse.ArgumentParser(description="Write the README result tables from results/.")
    parser.add_argument("--root", default=".", help="repository root (default: .)")
    parser.add_argument("--results", help="folder of result CSV files (default: ROOT/results)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--print", action="store_true", help="print the tables, change nothing")
    mode.add_argument("--check", action="store_true", help="exit 1 if a README differs from what results/ gives, "
                      "or its prose says 'as predicted' outside a generated outcome block whose verdict is hit")
    parser.add_argument("--allow-mixed-runs", action="store_true",
                        help="let a table show rows of several runs (run_id), marked; by default that is an error")
    args = parser.parse_args(argv)
    results_dir = args.results or os.path.join(args.root, "results")
    global MIXED_RUNS
    saved, MIXED_RUNS = MIXED_RUNS, "mark" if args.allow_mixed_runs else "refuse"
    claims, stale = [], []
    try:
        files = all_blocks(rc.load_datasets(results_dir, args.root), args.root, results_dir)
        if args.print:
            print("".join(f"<!-- {name} -->\n{content}\n\n" for blocks in files.values()
                          for name, content in blocks.items()), end="")
            return 0
        # a file that does not exist reads as "", lacks every marker and is left as it is
        for path, blocks in files.items():
            old = new = read_text(path)
            for name, content in blocks.items():
                new = replace_between(new, name, content, path) or new  # None: path lacks name's markers
            claims += prediction_claim_problems(os.path.relpath(path, args.root), new)
            if new != old:
                stale.append(path)
                if not args.check:
                    with open(path, "w", encoding="utf-8") as f:
                        f.write(new)
                    print(f"make_tables: updated {path}")
    except (OSError, rc.SchemaError, TableError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        MIXED_RUNS = saved
    for problem in claims:
        print(f"{'error' if args.check else 'warning'}: {problem}", file=sys.stderr)
    if args.check and stale:
        print("error: tables out of date in " + ", ".join(stale) + ": run python3 bench/make_tables.py",
              file=sys.stderr)
    if args.check and (stale or claims):
        return 1
    if not stale:
        print("make_tables: every table is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
