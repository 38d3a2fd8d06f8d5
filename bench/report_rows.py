"""bench/report_rows.py COMMAND ARGS: the reports the make verbs print from CSV rows (results_csv.read_rows).

    compare FILE                       make stage N compare: per trainer its runs, then the speedup
    profile FILE                       make stage N profile: per kernel, from ncu's raw CSV export (docs/PROFILING.md)
    try-speed NN STAGE_CSV CAND_CSV    make stage N try: both runs, the relative speed, "try: PASS"
    try-results NN FILE...             make stage N prompt: stage NN's newest rows per file and configuration
    sanitize TOOLS DIR FILE            make sanitize: FILE's runs (tools/sanitize_run.sh's lines, sorted), a row
                                       per stage x trainer (x variant), a column per tool; notes; totals (logs: DIR)
    column NAME FILE                   the NAME field of FILE's first row (tools/loop.sh: its rows' device)
    gpu-slug [NAME]                    NAME as results/ file names spell it (results_csv.gpu_slug), by default the
                                       visible GPU's (nvidia-smi; none: unknown-gpu): the Makefile's GPU_SLUG

Standard library only. An error is one "error:" line on stderr and exit 2 (try-speed without rows: 1).
"""

import collections
import functools
import math
import operator
import re
import signal
import statistics
import sys

import make_tables
import provenance
import results_csv as rc
from results_csv import as_float as number, report_ms as ms, report_num as num


def fail(message, status=2):
    print(f"error: {message}", file=sys.stderr)
    return status


def ratio(old, new, meaning=False):
    """old / new as "1.23x" ("n/a" without both); meaning: and "(faster)", "(slower)" or, within 3 %, "(the same
    within noise)"."""
    if old in ("", None) or new in ("", None) or number(new) <= 0:
        return "n/a"
    r = number(old) / number(new)
    if not meaning:
        return "%.2fx" % r
    return "%.2fx (%s)" % (r, "the same within noise" if 0.97 < r < 1.03 else "faster" if r > 1 else "slower")


def added(values):
    """The sum in order, one addition at a time, as the awk reports summed (sum() compensates from 3.12)."""
    return functools.reduce(operator.add, values, 0.0)


def outcome(row, trainer, regression="{} / {}", accuracy="%.2f%%"):
    """The last column: w and b of a regression, else the test accuracy."""
    if trainer == "regression":
        return regression.format(num(row["w"]), num(row["b"]))
    return "-" if row["test_acc"] == "" else accuracy % (100 * number(row["test_acc"]))


def compare(path):
    header, rows = rc.read_rows(path)
    if "trainer" not in header or "e2e_ms" not in header:
        return fail(f"{path} does not start with the result-row header (stage,trainer,...)")
    runs = {}
    for row in rows:
        runs.setdefault(row["trainer"], []).append(row)
    line = "  %-14s %-12s %9s %10s %10s %10s %10s %9s %11s  %s"
    for trainer, rows in runs.items():
        first, final = rows[0], rows[-1]
        problem = f"{first['epochs']} epochs, lr {first['lr']}"
        problem = (f"{first['points']} points, {problem}" if trainer == "regression" else
                   f"hidden {first['hidden']}, batch {first['batch']}, {problem}, {first['precision']}")
        print(f"\n{trainer}: {problem} on {first['device']}")
        print(line % ("stage", "variant", "setup ms", "e2e ms", "wall ms", "loop ms", "ms/epoch", "h2d ms",
                      "final loss", "w / b" if trainer == "regression" else "test acc"))
        for row in rows:
            print(line % (row["stage"], row["variant"], ms(row["setup_ms"]), ms(row["e2e_ms"]), ms(rc.wall_ms(row)),
                          ms(row["loop_ms"]), ms(row["ms_per_epoch"]), ms(row["h2d_ms"]), num(row["test_loss"]),
                          outcome(row, trainer)))
        if len(rows) > 1 and first["stage"] != final["stage"]:
            print(f"  stage {final['stage']} vs {first['stage']}: e2e {ratio(first['e2e_ms'], final['e2e_ms'])}, wall "
                  f"{ratio(rc.wall_ms(first), rc.wall_ms(final))}, loop {ratio(first['loop_ms'], final['loop_ms'])}")
    return 0


# make stage N profile: one line per kernel and launch shape (grid x block), by summed time, largest first

TIME = "gpu__time_duration.sum"
PERCENTS = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed")
US_PER = {"ns": 0.001, "nsecond": 0.001, "us": 1, "usecond": 1, "µs": 1, "ms": 1000, "msecond": 1000,
          "s": 1000000, "second": 1000000}
NCU_NUMBER = re.compile(r"-?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?")


def ncu_value(cell):
    """A cell as a number without its thousands separators ("3,907"), None when it holds none ("n/a")."""
    cell = cell.replace(",", "")
    return float(cell) if NCU_NUMBER.fullmatch(cell) else None


def short_name(name):
    """A kernel's name in one word: no "void ", template arguments or parameter list; cutlass::Kernel2<NAME> is
    NAME."""
    name, depth = name[5:] if name.startswith("void ") else name, 0
    for i in range(len(name) - 1, -1, -1) if name.endswith(")") else ():
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if name[i] == "(" and depth == 0:
            name = name[:i]
            break
    one = re.search(r"<([A-Za-z_][A-Za-z0-9_]*)>\Z", name)
    if one and name.index("<") == one.start():
        return one.group(1)
    while re.search(r"<[^<>]*>", name):  # innermost template arguments first
        name = re.sub(r"<[^<>]*>", "", name)
    return re.sub(r"[ \t]+", "_", name.split("<")[0])  # and all after a "<" never closed


def median(values):
    return statistics.median(values) if values else None


def fixed(x, *steps):
    """x with 2 decimals, one fewer for each step it reaches (µs: 10, 100; percent: 1); "-" for None."""
    return "-" if x is None else "%.*f" % (2 - sum(x >= step for step in steps), x)


def awk_string(x):
    return "-" if x is None else "%d" % x if x == int(x) else "%.6g" % x


def profile_groups(rows, to_us):
    """({(kernel, shape): {"n": launches, "time", "dram", "sm": values}}, every time in row order)."""
    groups, times = {}, []
    for row in rows:
        shape = f"{awk_string(ncu_value(row['launch__grid_size']))}x{awk_string(ncu_value(row['launch__block_size']))}"
        group = groups.setdefault((short_name(row["Kernel Name"]), shape), {"n": 0, "time": [], "dram": [], "sm": []})
        group["n"] += 1
        t = ncu_value(row[TIME])
        if t is not None:
            group["time"].append(t * to_us)
            times.append(t * to_us)
        for key, column in zip(("dram", "sm"), PERCENTS):
            if ncu_value(row[column]) is not None:
                group[key].append(ncu_value(row[column]))
    return groups, times


def profile(path):
    header, rows = rc.read_rows(path)
    if "Kernel Name" not in header:
        return fail(f'{path} is not an ncu raw CSV export (no "Kernel Name" column)')
    to_us = 0
    if TIME in header and rows:  # the first row gives the units
        to_us = US_PER.get(rows[0][TIME], 0)
        if to_us == 0:
            return fail(f"{path}: unknown time unit '{rows[0][TIME]}' of {TIME}")
    groups, times = profile_groups(rows[1:], to_us)
    all_time = added(times) if times else None
    print(" share  launches  median µs     min µs     max µs  grid x block    dram %    sm %  kernel")
    for (kernel, shape), g in sorted(groups.items(), key=lambda item: (-added(item[1]["time"]), -item[1]["n"])):
        share = "%.1f%%" % (100 * added(g["time"]) / all_time) if all_time else "-"
        low, high = (min(g["time"]), max(g["time"])) if g["time"] else (None, None)
        times = [fixed(x, 10, 100) for x in (median(g["time"]), low, high)]
        print("%6s  %8d  %9s  %9s  %9s  %-12s  %8s  %6s  %s" % (share, g["n"], *times, shape,
              fixed(median(g["dram"]), 1), fixed(median(g["sm"]), 1), kernel))
    print(f"{len(rows) - 1 if rows else 0} launches, {fixed(all_time, 10, 100)} µs in all")
    return 0


# make stage N try and prompt

def row_file(path):
    """The rows of a result-row file (one with stage, trainer and loop_ms columns); [] for another."""
    header, rows = rc.read_rows(path)
    return rows if {"stage", "trainer", "loop_ms"} <= set(header) else []


def trainer_table(stage, own, candidate):
    """One row each: the two runs, then the relative speed."""
    trainer, line = own["trainer"], "    %-16s %-12s %10s %10s %10s %12s  %s"
    print(f"  speed on {own['device']}, medians of the timed runs:")
    print(line % ("run", "variant", "e2e ms", "loop ms", "ms/epoch", "test loss",
                  "w / b" if trainer == "regression" else "test acc"))
    for who, row in ((f"stage {stage}", own), ("candidate", candidate)):
        print(line % (who, row["variant"], ms(row["e2e_ms"]), ms(row["loop_ms"]), ms(row["ms_per_epoch"]),
                      num(row["test_loss"]), outcome(row, trainer)))
    loop = ratio(own["loop_ms"], candidate["loop_ms"], True)
    print(f"  candidate vs stage {stage}: loop {loop}, e2e {ratio(own['e2e_ms'], candidate['e2e_ms'], True)}")
    print(f"try: PASS, relative loop speed {loop}")


def vector_add_table(own_rows, candidate_rows):
    """Stage 01: a row per version, matched by name, kernel only (loop_ms) and with transfers (e2e_ms)."""
    line = "    %-20s %10s %10s %-30s %10s %10s %s"
    print(f"  speed on {own_rows[0]['device']}, medians; speed = the candidate's relative to the stage's:")
    print(line % ("version", "kernel ms", "candidate", "speed", "total ms", "candidate", "speed"))
    print(line[:-3] % ("", "(stage)", "", "", "(stage)", ""))
    own = {row["variant"]: row for row in own_rows}
    logs = []  # log(stage / candidate) per version with both kernel times, the CPU aside
    for row in candidate_rows:
        mine = own.get(row["variant"], collections.defaultdict(str))
        s, c, e2e = mine["loop_ms"], row["loop_ms"], mine["e2e_ms"]
        print(line % (row["variant"], ms(s), ms(c), ratio(s, c, True), ms(e2e), ms(row["e2e_ms"]),
                      ratio(e2e, row["e2e_ms"], True)))
        if row["variant"] != "cpu" and s != "" and c != "" and number(c) > 0 and number(s) > 0:
            logs.append(math.log(number(s) / number(c)))
    if not logs:
        print("try: PASS (no GPU kernel time to compare)")
        return
    mean = math.exp(added(logs) / len(logs))
    print("try: PASS, relative GPU kernel speed %.2fx (geometric mean over %d versions)" % (mean, len(logs)))


def try_speed(stage, stage_csv, candidate_csv):
    own, candidate = row_file(stage_csv), row_file(candidate_csv)
    if not own or not candidate:
        fail("no result rows to compare (the stage's or the candidate's run wrote none)")
        print("try: FAIL")
        return 1
    if own[0]["trainer"] == "vector-add":
        vector_add_table(own, candidate)
    else:
        trainer_table(stage, own[0], candidate[0])
    return 0


def results_cells(row):
    trainer = row["trainer"]
    config = (f"{row['points']} points" if trainer == "regression" else
              f"hidden {row['hidden']}, batch {row['batch']}" if trainer == "mnist" else f"n {row['points']}")
    epochs = f", {row['epochs']} epochs" if row["epochs"] else ""
    return (row["device"], trainer, row["variant"], config + epochs, row["precision"], ms(row["e2e_ms"]),
            ms(row["loop_ms"]), ms(row["ms_per_epoch"]), num(row["test_loss"]),
            outcome(row, trainer, "w {}, b {}", "acc %.2f%%"))


CONFIGURATION = ("trainer", "variant", "points", "hidden", "batch", "epochs", "precision")


def try_results(stage, *paths):
    newest = {}
    for path in paths:
        for row in row_file(path):
            if row["stage"] == stage:
                key = (path,) + tuple(row[c] for c in CONFIGURATION)
                newest[key] = results_cells(row)  # a key keeps its first place
    if not newest:
        print(f"None for stage {stage} yet (`make bench` on a GPU machine writes them).")
        return 0
    print(make_tables.markdown_table(("device", "trainer", "variant", "configuration", "precision", "e2e ms",
                                      "loop ms", "ms/epoch", "test loss", "result"), "lllllrrrrl", newest.values()))
    return 0


# make sanitize: its summary, which results/<gpu>-sanitize.txt records and bench/make_tables.py reads back
SANITIZE_NOTES = {r"\(library\)": "(library): every report of that run is inside a closed library kernel (cuBLASLt, "
                  "cuDNN), none in this repository's kernels", "^KILLED": "KILLED: most often the host's out-of-memory "
                  "killer (dmesg says): racecheck of the bf16 GEMMs takes tens of GB each; lower SAN_JOBS"}


def sanitize(tools, logs, path):
    tools, cells, verdicts = tools.split(), {}, []
    with open(path) as f:
        for fields in map(str.split, f):  # STAGE LABEL TOOL SECONDS VERDICT...
            stage, label, tool, secs = (fields + [""] * 4)[:4]
            verdicts.append(" ".join(fields[4:]))
            cells.setdefault("%-5s  %-24s" % (stage, label), {})[tool] = f"{verdicts[-1]} {secs}s"
    for row, cell in [("%-5s  %-24s" % ("stage", "trainer"), dict(zip(tools, tools)))] + list(cells.items()):
        print(row + "".join("  %-24s" % cell.get(t, "-") for t in tools))  # the header first: each tool's name
    for mark, note in SANITIZE_NOTES.items():
        if any(re.search(mark, v) for v in verdicts):
            print(note)
    bad = sum(v != "clean" for v in verdicts)
    print(f"sanitize: {bad} of {len(verdicts)} runs not clean: logs in {logs}/logs/" if bad else
          f"sanitize: all {len(verdicts)} runs clean")
    return 0


def column(name, path):
    header, rows = rc.read_rows(path)
    if name in header and rows:
        print(rows[0][name])
    return 0


def gpu_slug(name=None):
    # nvidia-smi's first GPU (output_of: none where it fails, as its complaint goes to stdout)
    print(rc.gpu_slug((provenance.output_of(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]) or ""
                       if name is None else name).split("\n")[0]))
    return 0


COMMANDS = {"compare": (compare, 1, 1), "profile": (profile, 1, 1), "try-speed": (try_speed, 3, 3),
            "try-results": (try_results, 2, None), "sanitize": (sanitize, 3, 3), "column": (column, 2, 2),
            "gpu-slug": (gpu_slug, 0, 1)}  # (report, fewest, most arguments)


def main(argv):
    run, fewest, most = COMMANDS.get(argv[0] if argv else "", (None, 0, 0))
    if run is None or not fewest <= len(argv) - 1 <= (most or len(argv)):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return run(*argv[1:])
    except OSError as error:  # a file that cannot be read
        return fail(error)


if __name__ == "__main__":
    sys.stdout.reconfigure(encoding="utf-8")
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a reader that stops early (head) ends it quietly
    sys.exit(main(sys.argv[1:]))
