"""bench/kernel_ladders.py: the tables of the kernel ladders (NN-*/NAME_ladder.cu) for the stage READMEs.

A ladder appends one row per version and shape to --csv FILE (LADDER_COLUMNS, the schema of
common/ladder.h); `make stage N ladder RECORD=1` appends to results/<slug>-ladders.csv. A stage README
shows ladder NAME between <!-- ladder:NAME begin --> and <!-- ladder:NAME end --> (e.g. ladder:reduce
and ladder:gemm in 04-shared-memory/README.md, ladder:persistent in 08's); bench/make_tables.py writes
it there. A table is one
run: of each results file, the rows of the last run that wrote rows of that stage and ladder, one table
per shape in the order the run measured them. Standard library only.
"""

import math
import os
import re

import results_csv as rc

# common/ladder.h LADDER_CSV_HEADER; tests/bench/test_bench.py checks that the two stay equal.
LADDER_COLUMNS = (
    "stage", "ladder", "shape", "version", "name", "median_ms", "min_ms", "max_ms", "setup_ms", "rate", "unit",
    "ceiling", "ceiling_ms", "ceiling_rate", "repeats", "device", "cc", "cuda", "driver", "commit", "run",
)

NOT_COMPARED = "—"


def ladder_files(results_dir):
    """The ladder-row files of results_dir (sorted), told apart from the others by their header."""
    if not os.path.isdir(results_dir):
        return []
    paths = []
    for name in sorted(os.listdir(results_dir)):
        path = os.path.join(results_dir, name)
        if name.endswith(".csv") and os.path.isfile(path) and rc.read_header(path) == LADDER_COLUMNS:
            paths.append(path)
    return paths


def load(results_dir, root):
    """[(source, rows)] of every ladder file, source relative to root where it lies inside it."""
    datasets = []
    for path in ladder_files(results_dir):
        rel = os.path.relpath(path, root)
        datasets.append((path if rel.startswith("..") else rel, rc.read_csv(path, LADDER_COLUMNS)))
    return datasets


def source_names(root, stage_dir):
    """The ladders a stage folder holds: 'reduce' for reduce_ladder.cu, sorted."""
    folder = os.path.join(root, stage_dir)
    if not os.path.isdir(folder):
        return []
    return sorted(m.group(1) for m in (re.fullmatch(r"(\w+)_ladder\.cu", f) for f in os.listdir(folder)) if m)


def last_run(rows, stage, ladder):
    """The rows of the last run (in file order) that wrote rows of this stage and ladder."""
    mine = [r for r in rows if r["stage"] == stage and r["ladder"] == ladder]
    if not mine:
        return []
    run = mine[-1]["run"]
    return [r for r in mine if r["run"] == run]


def fmt_ms(value):
    """Three significant digits, never an exponent: 1,234 / 16.0 / 0.160 / 0.00523."""
    if value is None:
        return NOT_COMPARED
    if value >= 100:
        return f"{value:,.0f}"
    if value <= 0:
        return "0"
    return f"{value:.{max(1, 2 - math.floor(math.log10(value)))}f}"


def fmt_times(value):
    return NOT_COMPARED if value is None else f"{value:.2f}×"


def table_lines(rows):
    """The cells of one shape's table, version order, then the ceiling: version, name, ms (min–max),
    rate, % of ceiling, step, cumulative, setup ms. step: the row above ÷ this (naming the version it
    compares with when the one just below is missing); cumulative: the first row ÷ this."""
    rows = sorted(rows, key=lambda r: rc.integer(r, "version") or 0)
    lines, first, previous = [], None, None
    for row in rows:
        ms, rate, ceiling = rc.number(row, "median_ms"), rc.number(row, "rate"), rc.number(row, "ceiling_rate")
        version = rc.integer(row, "version")
        step = NOT_COMPARED
        if previous is not None:
            step = fmt_times(rc.ratio(rc.number(previous, "median_ms"), ms))
            if version - rc.integer(previous, "version") != 1:
                step += f" (vs {previous['version']})"
        cumulative = fmt_times(rc.ratio(rc.number(first, "median_ms"), ms)) if first is not None else "1.00×"
        share = rc.ratio(rate, ceiling)
        setup = rc.number(row, "setup_ms")
        lines.append([str(version), f"`{row['name']}`",
                      f"{fmt_ms(ms)} ({fmt_ms(rc.number(row, 'min_ms'))}–{fmt_ms(rc.number(row, 'max_ms'))})",
                      rc.three_digits(rate) if rate is not None else NOT_COMPARED,
                      f"{100 * share:.1f}%" if share is not None else NOT_COMPARED,
                      step, cumulative, fmt_ms(setup) if setup is not None else ""])
        first = first or row
        previous = row
    if rows:
        last = rows[-1]
        ceiling = rc.number(last, "ceiling_rate")
        lines.append(["", f"ceiling: {last['ceiling']}", fmt_ms(rc.number(last, "ceiling_ms")),
                      rc.three_digits(ceiling) if ceiling is not None else NOT_COMPARED, "100%", "", "", ""])
    return lines


FOOTNOTE = (
    "ms per call: median of the timed runs after 3 warm-ups, min–max in brackets (a GEMM run is 10 calls back "
    "to back). Rate at the median: GB/s of the bytes the kernel must read, or GFLOP/s = 2 m n k ÷ time. % of "
    "ceiling: this rate ÷ the ceiling's, measured in the same run. Step: the row above ÷ this row; cumulative: "
    "the first row ÷ this row. Setup: host time to plan the version before its first call (autotuning "
    "included). Generated by `bench/make_tables.py` from the CSV named above; do not edit by hand."
)
# The upload ladder (05-streams/upload_ladder.cu) times copies on the host clock, not kernels on events.
FOOTNOTES = {
    "upload": (
        "ms per upload: host clock from the call until the bytes are on the device, median of the timed runs "
        "after 3 warm-ups, min–max in brackets. Rate: GB/s of the bytes moved (x and y, 8 B a point). % of "
        "ceiling: this rate ÷ a pinned cudaMemcpy's of the same bytes, measured in the same run. Step: the row "
        "above ÷ this row; cumulative: the first row ÷ this row. Setup: host time before the version's first "
        "upload, once (pinned slots, copy threads: a trainer's setup_ms); for `host-register` the registration "
        "of the caller's array, which its time includes (every new array pays it again). Generated by "
        "`bench/make_tables.py` from the CSV named above; do not edit by hand."
    ),
    # 08-persistent-kernels/persistent_ladder.cu: a run is S SGD steps; its ceiling is its baseline.
    "persistent": (
        "ms per step: one run of S steps (one graph launch or one kernel launch) between CUDA events, ÷ S; "
        "median of the timed runs after 3 warm-ups, min–max in brackets, each run from the same initial weights "
        "(restored untimed). Rate: GFLOP/s of a step's GEMMs (forward and gradients). The ceiling row is version "
        "0, `step-graph` (three kernels a step, all S steps in one CUDA graph), the baseline the persistent "
        "versions must beat: % of ceiling above 100% is faster than it. Step: the row above ÷ this row; "
        "cumulative: the first row ÷ this row. Generated by `bench/make_tables.py` from the CSV named above; do "
        "not edit by hand."
    ),
}


def block(datasets, stage, ladder):
    """The text between the ladder:<ladder> markers of stage's README."""
    parts = []
    for source, rows in datasets:
        run = last_run(rows, stage, ladder)
        if not run:
            continue
        shapes = []
        for row in run:
            if row["shape"] not in shapes:
                shapes.append(row["shape"])
        first = run[0]
        commit = f" · commit {first['commit']}" if first["commit"] else ""
        for shape in shapes:
            rows_of_shape = [r for r in run if r["shape"] == shape]
            lines = table_lines(rows_of_shape)
            with_setup = any(cells[7] for cells in lines)
            header = ["#", "version", "ms (min–max)", first["unit"] or "rate", "% of ceiling", "step", "cumulative"]
            align = ["--:", ":--", "--:", "--:", "--:", "--:", "--:"]
            if with_setup:
                header.append("setup ms")
                align.append("--:")
            cells = [line if with_setup else line[:7] for line in lines]
            table = "\n".join(["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"] +
                              ["| " + " | ".join(c) + " |" for c in cells])
            parts.append(f"**Stage {stage} · {ladder} ladder · {shape}**  \n{first['device']} · `{source}`{commit}"
                         f" · run {first['run']}, {first['repeats']} timed runs a version\n\n{table}")
    if not parts:
        return (f"*Not measured yet: run `make stage {int(stage)} ladder RECORD=1` on a GPU machine, then "
                "`python3 bench/make_tables.py`.*")
    return "\n\n".join(parts + [f"<sub>{FOOTNOTES.get(ladder, FOOTNOTE)}</sub>"])


def readme_blocks(datasets, root, stage, stage_dir):
    """{'ladder:NAME': text} for every ladder the stage folder holds or the results name."""
    names = set(source_names(root, stage_dir))
    for _, rows in datasets:
        names.update(r["ladder"] for r in rows if r["stage"] == stage)
    return {f"ladder:{name}": block(datasets, stage, name) for name in sorted(names)}
