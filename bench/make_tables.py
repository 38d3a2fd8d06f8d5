#!/usr/bin/env python3
"""bench/make_tables.py: writes the result tables of the READMEs from the CSV files in results/.

Every number in a table comes from one result row (common/report.h schema); each table names the CSV
file and the device it comes from. The tables go between markers, and nothing outside them changes:

  README.md        <!-- ladder:regression begin --> ... <!-- ladder:regression end -->
                   <!-- ladder:mnist begin --> ... <!-- ladder:mnist end -->     (one table per --hidden)
  NN-*/README.md   <!-- results:stageNN begin --> ... <!-- results:stageNN end -->  (stage NN vs the one before,
                   then its variants table where it has other variants or precisions; 01-vector-add: its
                   versions)
  07-*/README.md   <!-- targets:stage07 begin --> ... <!-- targets:stage07 end -->  (the issue's targets for
                   the last stage against its measured rows)
  README.md        <!-- sanitize:summary begin --> ... <!-- sanitize:summary end -->  (the compute-sanitizer
                   table of the last full `make sanitize`, results/<gpu>-sanitize.txt, as it printed it)
  NN-*/README.md   <!-- sanitize:stageNN begin --> ... <!-- sanitize:stageNN end -->  (that table's rows
                   of stage NN)
  NN-*/README.md   <!-- ladder:NAME begin --> ... <!-- ladder:NAME end -->  (kernel ladder NN-*/NAME_ladder.cu:
                   its last run in results/<gpu>-ladders.csv, one table per shape; bench/kernel_ladders.py)

A stage counts in the ladder and the stage-vs-stage tables in its default variant (the first name of
its REGRESSION_VARIANTS / MNIST_VARIANTS), at fp32 and bf16; its other variants and precisions (the
attribution rows make bench measures) fill its variants table.

A file without its markers is left untouched. Standard library only.

  python3 bench/make_tables.py                   update the READMEs from results/
  python3 bench/make_tables.py --print           print the tables, change nothing
  python3 bench/make_tables.py --check           exit 1 if a README is not what results/ gives
"""

import argparse
import os
import re
import sys

import kernel_ladders
import results_csv as rc

NOT_COMPARED = "—"


class MarkerError(Exception):
    """A begin marker without its end marker, or the other way round."""


# ----------------------------------------------------------------------------
# number formats

def fmt_3(value):
    return NOT_COMPARED if value is None else rc.three_digits(value)


def fmt_times(value):
    return NOT_COMPARED if value is None else f"{value:.2f}×"


def markdown_table(header, align, lines):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return "\n".join(out)


def source_line(rows, device, source):
    commits = []
    for row in rows:
        if row["commit"] and row["commit"] not in commits:
            commits.append(row["commit"])
    text = f"{device} · `{source}`"
    if commits:
        text += f" · commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}"
    return text


# ----------------------------------------------------------------------------
# the ladder: every stage of one configuration, then the PyTorch baselines

def ladder_lines(entries, stage_names=None):
    """The cells of a ladder table.

    step speedup: e2e of the stage above / this e2e (the stage it compares with is named when stages
    are missing); cumulative: e2e of the first stage / this e2e; ÷ best stage (PyTorch rows): this
    e2e / e2e of the fastest stage of the same precision (fp32 when there is none). Only rows that
    ran the configuration's epochs are compared.
    """
    rungs = [e for e in entries if e.is_ladder_stage and e.comparable and e.e2e]
    first = rungs[0] if rungs else None
    best = {}
    for e in entries:
        if e.kind == "stage" and e.comparable and e.e2e and (e.precision not in best or e.e2e < best[e.precision].e2e):
            best[e.precision] = e

    lines, previous = [], None
    for e in entries:
        step = cumulative = versus_best = ""
        if e.comparable and first is not None:
            cumulative = fmt_times(rc.ratio(first.e2e, e.e2e))
        if e in rungs:
            if previous is None:
                step = NOT_COMPARED
            else:
                step = fmt_times(rc.ratio(previous.e2e, e.e2e))
                if int(e.stage) - int(previous.stage) != 1:
                    step += f" (vs {previous.stage})"
            previous = e
        if e.kind == "pytorch" and e.comparable:
            target = best.get(e.precision) or best.get("fp32")
            versus_best = fmt_times(rc.ratio(e.e2e, target.e2e if target else None))
        rate, _ = rc.throughput(e.row)
        lines.append([e.label(stage_names), fmt_3(e.e2e), fmt_3(e.loop), fmt_3(e.ms_per_epoch),
                      fmt_3(rate), step, cumulative, versus_best])
    return lines


def ladder_table(rows, config, device, source, stage_names=None, defaults=None):
    entries = rc.select_entries(rows, config, defaults)
    if not entries:
        return f"**{config.title()}**: no rows in `{source}` yet."
    unit = "GB/s" if config.trainer == "regression" else "GFLOP/s"
    header = ["", "e2e ms", "loop ms", "ms/epoch", unit, "step speedup", "cumulative speedup", "÷ best stage"]
    table = markdown_table(header, [":--"] + ["--:"] * 7, ladder_lines(entries, stage_names))
    return f"**{config.title()}**  \n{source_line([e.row for e in entries], device, source)}\n\n{table}"


FOOTNOTE_TIMES = (
    "e2e: from the training data in host memory to the trained parameters back in host memory; "
    "loop: the training loop alone, data already on the device; ms/epoch: median epoch "
    "(docs/DESIGN.md, \"Timing\"). Speedups are ratios of e2e times: step = the stage above ÷ this stage, "
    "cumulative = the first stage ÷ this row; ÷ best stage = a PyTorch row ÷ the fastest stage of the "
    "same precision (above 1: our stage is faster). Rows that ran other epoch counts are not compared."
)
FOOTNOTE_GBS = (
    "GB/s: the minimum traffic, epochs × n_train × 8 B (x and y read once per epoch) ÷ loop time; "
    "the real traffic is higher wherever a stage reads the data more than once."
)
FOOTNOTE_GFLOPS = (
    "GFLOP/s: 6 × parameters × samples per epoch × epochs ÷ loop time (2 FLOP per parameter and "
    "sample forward, 4 backward; samples per epoch = 60,000 // batch × batch); evaluation not counted."
)
FOOTNOTE_GENERATED = "Generated by `bench/make_tables.py` from the CSV named above; do not edit by hand."
NO_RESULTS = "*Not measured yet: run `make bench` on a GPU machine.*"


def ladder_block(datasets, trainer, stage_names=None, known=None):
    """The text between the ladder:<trainer> markers: every configuration of every results file.
    known: rc.source_default_variants of the repository (which variant is each stage's default)."""
    if not datasets:
        return NO_RESULTS
    parts = []
    for source, rows in datasets:
        device = rc.device_of(rows)
        defaults = rc.variant_defaults(rows, known)
        for config in rc.canonical_configs():
            if config.trainer == trainer:
                parts.append(ladder_table(rows, config, device, source, stage_names, defaults))
    notes = [FOOTNOTE_TIMES, FOOTNOTE_GBS if trainer == "regression" else FOOTNOTE_GFLOPS, FOOTNOTE_GENERATED]
    return "\n\n".join(parts + ["<sub>" + " ".join(notes) + "</sub>"])


# ----------------------------------------------------------------------------
# a stage README: this stage against the one before it

def short_name(config):
    if config.trainer == "regression":
        return f"regression {rc.REGRESSION_POINTS // 1_000_000}M"
    return f"MNIST --hidden {config.hidden}"


def stage_lines(rows, stage, stage_names=None, defaults=None):
    """(cells, rows shown) of a stage table: per configuration, the stage before and this stage (fp32,
    default variants)."""
    lines, shown = [], []
    for config in rc.canonical_configs():
        entries = rc.select_entries(rows, config, defaults)
        this = next((e for e in entries if e.is_ladder_stage and e.stage == stage), None)
        earlier = [e for e in entries if e.is_ladder_stage and e.stage < stage]
        reference = [e for e in entries if e.kind == "reference"]
        before = earlier[-1] if earlier else (reference[0] if reference else None)
        name = short_name(config)
        if this is None:
            lines.append([name, stage, "no result yet"] + [""] * 5)
            continue
        for e in ([before] if before else []) + [this]:
            speedup_e2e = speedup_epoch = ""
            if e is this and before is not None:
                same_epochs = before.epochs == this.epochs
                speedup_e2e = fmt_times(rc.ratio(before.e2e, this.e2e) if same_epochs else None)
                speedup_epoch = fmt_times(rc.ratio(before.ms_per_epoch, this.ms_per_epoch))
            rate, unit = rc.throughput(e.row)
            lines.append([name, e.label(stage_names), fmt_3(e.e2e), fmt_3(e.loop), fmt_3(e.ms_per_epoch),
                          f"{fmt_3(rate)} {unit}" if rate is not None else NOT_COMPARED,
                          speedup_e2e, speedup_epoch])
            shown.append(e.row)
    return lines, shown


def variant_lines(rows, stage, defaults=None):
    """(cells, rows shown) of a stage's variants table: for each configuration where the stage has
    more than one variant or precision, every one of them, the default (fp32) first. vs default: the
    default's e2e ÷ this e2e (above 1: faster than the default), when both ran the same epochs."""
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
            versus = ""
            if base is not None and e is not base:
                versus = fmt_times(rc.ratio(base.e2e, e.e2e) if base.epochs == e.epochs else None)
            rate, unit = rc.throughput(e.row)
            lines.append([short_name(config), name, e.precision, fmt_3(e.e2e), fmt_3(e.loop),
                          fmt_3(e.ms_per_epoch), f"{fmt_3(rate)} {unit}" if rate is not None else NOT_COMPARED,
                          versus])
            shown.append(e.row)
    return lines, shown


def stage_block(datasets, stage, stage_names=None, known=None):
    if not datasets:
        return NO_RESULTS
    parts = []
    header = ["configuration", "run", "e2e ms", "loop ms", "ms/epoch", "throughput", "speedup (e2e)",
              "speedup (ms/epoch)"]
    variant_header = ["configuration", "variant", "precision", "e2e ms", "loop ms", "ms/epoch", "throughput",
                      "vs default (e2e)"]
    any_variants = False
    for source, rows in datasets:
        defaults = rc.variant_defaults(rows, known)
        lines, shown = stage_lines(rows, stage, stage_names, defaults)
        table = markdown_table(header, [":--", ":--"] + ["--:"] * 6, lines)
        parts.append(f"{source_line(shown, rc.device_of(rows), source)}\n\n{table}")
        variants, variant_rows = variant_lines(rows, stage, defaults)
        if variants:
            any_variants = True
            table = markdown_table(variant_header, [":--", ":--", ":--"] + ["--:"] * 5, variants)
            parts.append(f"**Variants of stage {stage}** (`--variant`, `--precision`)  \n"
                         f"{source_line(variant_rows, rc.device_of(rows), source)}\n\n{table}")
    notes = [
        f"Stage {stage} against the stage before it (stage 02: against the CPU reference), each in its "
        "default variant at fp32. Speedups: the earlier run ÷ this one; e2e only when both ran the same epochs.",
    ]
    if any_variants:
        notes.append("Variants: the same configurations with `--variant` or `--precision`; vs default = the "
                     "default variant's fp32 e2e ÷ this e2e (above 1: faster than the default).")
    notes += [FOOTNOTE_GBS, FOOTNOTE_GFLOPS, FOOTNOTE_GENERATED]
    return "\n\n".join(parts + ["<sub>" + " ".join(notes) + "</sub>"])


# ----------------------------------------------------------------------------
# 01-vector-add/README.md: the versions of the warm-up (rows of trainer "vector-add")

def vector_add_lines(rows):
    """(cells, rows shown): the newest row of each version at the size of the newest run, in the
    order the program writes them. Speedups: the row above ÷ this row, with transfers and kernel only."""
    mine = [r for r in rows if r["trainer"] == "vector-add"]
    if not mine:
        return [], []
    n = rc.integer(mine[-1], "points")
    newest = {}
    for row in mine:
        if rc.integer(row, "points") == n:
            newest[row["variant"]] = row
    lines, previous = [], None
    for row in newest.values():
        e2e, kernel = rc.number(row, "e2e_ms"), rc.number(row, "loop_ms")
        gbps = [None if ms is None or ms <= 0 else 12 * n / ms / 1e6 for ms in (e2e, kernel)]
        speedups = ["", ""] if previous is None else [
            fmt_times(rc.ratio(rc.number(previous, c), rc.number(row, c))) for c in ("e2e_ms", "loop_ms")]
        lines.append([row["variant"], fmt_3(e2e), fmt_3(gbps[0]), speedups[0], fmt_3(kernel), fmt_3(gbps[1]),
                      speedups[1]])
        previous = row
    return lines, list(newest.values())


def vector_add_block(datasets):
    parts = []
    header = ["version", "with transfers ms", "GB/s", "speedup", "kernel only ms", "GB/s", "speedup"]
    for source, rows in datasets:
        lines, shown = vector_add_lines(rows)
        if not lines:
            parts.append(f"No vector-add rows in `{source}` yet.")
            continue
        n = rc.integer(shown[-1], "points")
        table = markdown_table(header, [":--"] + ["--:"] * 6, lines)
        parts.append(f"c = a + b on n = {n:,} floats  \n{source_line(shown, rc.device_of(rows), source)}\n\n{table}")
    if not parts:
        return NO_RESULTS
    notes = ("GB/s: the bytes the add must move, 3 × 4 B × n (a and b read, c written) ÷ time. Speedup: the "
             "row above ÷ this row. " + FOOTNOTE_GENERATED)
    return "\n\n".join(parts + [f"<sub>{notes}</sub>"])


# ----------------------------------------------------------------------------
# markers

# ----------------------------------------------------------------------------
# the last stage's targets: the benchmark figures it is asked to reach (fp32, default variants)

# (configuration label, trainer, hidden, measured figure, column, target in ms)
STAGE07_TARGETS = [
    ("regression 5M points, 200 epochs", "regression", None, "loop ms", "loop", 3.0),
    ("MNIST --hidden 0", "mnist", "0", "loop ms per epoch", "ms_per_epoch", 2.5),
    ("MNIST --hidden 128", "mnist", "128", "loop ms per epoch", "ms_per_epoch", 6.0),
]


def targets_block(datasets, known=None):
    """The text between the targets:stage07 markers: each target against the newest stage-07 row."""
    blocks = []
    for source, rows in datasets:
        defaults = rc.variant_defaults(rows, known)
        lines, shown = [], []
        for label, trainer, hidden, figure, column, target in STAGE07_TARGETS:
            config = next(c for c in rc.canonical_configs()
                          if c.trainer == trainer and (hidden is None or c.hidden == hidden))
            this = next((e for e in rc.select_entries(rows, config, defaults)
                         if e.is_ladder_stage and e.stage == "07" and e.precision == "fp32"), None)
            if this is None:
                lines.append([label, figure, f"≤ {target:g}", "no result yet", ""])
                continue
            measured = getattr(this, column)
            verdict = "met" if measured <= target else f"missed: {rc.ratio(measured, target):.1f}× the target"
            lines.append([label, figure, f"≤ {target:g}", fmt_3(measured), verdict])
            shown.append(this.row)
        if not shown:
            continue
        blocks.append(source_line(shown, rc.device_of(shown), source) + "\n\n" + markdown_table(
            ["", "figure", "target", "measured", ""], [":--", ":--", "--:", "--:", ":--"], lines))
    return "\n\n".join(blocks) if blocks else "*Not measured yet: run `make bench` on a GPU machine.*"


# ----------------------------------------------------------------------------
# compute-sanitizer: the summaries `make sanitize` records, shown as printed

SANITIZE_SUFFIX = "-sanitize.txt"
ALL_VARIANTS_SUFFIX = "-sanitize-all-variants.txt"


def sanitize_summaries(results_dir):
    """[(file name, lines)] of the full-matrix summaries in results_dir (sorted by name)."""
    if not os.path.isdir(results_dir):
        return []
    found = []
    for name in sorted(os.listdir(results_dir)):
        if name.endswith(SANITIZE_SUFFIX):
            with open(os.path.join(results_dir, name), encoding="utf-8") as f:
                found.append((name, [line.rstrip() for line in f.read().rstrip("\n").split("\n")]))
    return found


def sanitize_block(summaries, results_dir, stage=None):
    """The text between the sanitize markers: each summary's source line (its first line: tool version,
    device, time), then its table as a code block, all of it or only stage's rows and the verdict."""
    blocks = []
    for name, lines in summaries:
        if len(lines) < 3:
            continue
        header, table = lines[1], lines[2:]
        if stage is not None:
            table = [line for line in table if line.split()[:1] == [stage]]
            if not table:
                continue
        text = f"`results/{name}`: {lines[0]}\n\n```\n" + "\n".join([header] + table) + "\n```"
        if stage is None:
            variants = name[:-len(SANITIZE_SUFFIX)] + ALL_VARIANTS_SUFFIX
            path = os.path.join(results_dir, variants)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    last = f.read().rstrip("\n").split("\n")[-1]
                text += f"\n\nEvery variant and precision (`SAN_VARIANTS=all`): `results/{variants}`, which ends: *{last}*"
        blocks.append(text)
    return "\n\n".join(blocks) if blocks else "*Not run yet: run `make sanitize` on a GPU machine.*"


def replace_between(text, name, content):
    """text with the part between <!-- name begin --> and <!-- name end --> replaced by content, or
    None when the file has neither marker."""
    begin, end = f"<!-- {name} begin -->", f"<!-- {name} end -->"
    b, e = text.find(begin), text.find(end)
    if b < 0 and e < 0:
        return None
    if b < 0 or e < 0 or e < b:
        raise MarkerError(f"'{begin}' and '{end}' must both appear, in that order")
    return text[:b + len(begin)] + "\n" + content.strip("\n") + "\n" + text[e:]


def render_file(path, blocks):
    """(old text, new text) of path with every block whose markers it has replaced."""
    with open(path, encoding="utf-8") as f:
        old = f.read()
    new = old
    for name, content in blocks.items():
        try:
            replaced = replace_between(new, name, content)
        except MarkerError as err:
            raise MarkerError(f"{path}: {err}") from None
        if replaced is not None:
            new = replaced
    return old, new


def stage_dirs(root):
    """{'01': '01-vector-add', '02': '02-llm-baseline', ...}: the stage folders of the repository."""
    found = {}
    for name in sorted(os.listdir(root)):
        match = re.fullmatch(r"(0[1-7])-[\w-]+", name)
        if match and os.path.isdir(os.path.join(root, name)):
            found[match.group(1)] = name
    return found


def load_datasets(results_dir, root):
    datasets = []
    for path in rc.result_files(results_dir):
        rows = rc.read_csv(path, rc.RESULT_COLUMNS)
        rel = os.path.relpath(path, root)
        datasets.append((path if rel.startswith("..") else rel, rows))
    return datasets


def all_blocks(datasets, root, results_dir):
    """{file: {marker name: content}} for the top README and every stage README."""
    dirs = stage_dirs(root)
    names = {nn: f"{nn} {d[3:]}" for nn, d in dirs.items()}
    known = rc.source_default_variants(root)
    summaries = sanitize_summaries(results_dir)
    ladder_sets = kernel_ladders.load(results_dir, root)
    files = {os.path.join(root, "README.md"): {
        "ladder:regression": ladder_block(datasets, "regression", names, known),
        "ladder:mnist": ladder_block(datasets, "mnist", names, known),
        "sanitize:summary": sanitize_block(summaries, results_dir),
    }}
    for nn, d in dirs.items():
        block = vector_add_block(datasets) if nn == "01" else stage_block(datasets, nn, names, known)
        files[os.path.join(root, d, "README.md")] = {f"results:stage{nn}": block,
                                                     f"sanitize:stage{nn}": sanitize_block(summaries, results_dir, nn)}
        if nn == "07":
            files[os.path.join(root, d, "README.md")]["targets:stage07"] = targets_block(datasets, known)
        files[os.path.join(root, d, "README.md")].update(kernel_ladders.readme_blocks(ladder_sets, root, nn, d))
    return files


def main(argv=None):
    parser = argparse.ArgumentParser(description="Write the README result tables from results/.")
    parser.add_argument("--root", default=".", help="repository root (default: .)")
    parser.add_argument("--results", help="folder of result CSV files (default: ROOT/results)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--print", action="store_true", help="print the tables, change nothing")
    mode.add_argument("--check", action="store_true", help="exit 1 if a README differs from what results/ gives")
    args = parser.parse_args(argv)
    results_dir = args.results or os.path.join(args.root, "results")

    try:
        datasets = load_datasets(results_dir, args.root)
        files = all_blocks(datasets, args.root, results_dir)
        if args.print:
            for blocks in files.values():
                for name, content in blocks.items():
                    print(f"<!-- {name} -->\n{content}\n")
            return 0
        stale = []
        for path, blocks in files.items():
            if not os.path.exists(path):
                continue
            old, new = render_file(path, blocks)
            if new == old:
                continue
            stale.append(path)
            if not args.check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
                print(f"make_tables: updated {path}")
    except (OSError, rc.SchemaError, MarkerError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.check and stale:
        print("error: tables out of date in " + ", ".join(stale) + ": run python3 bench/make_tables.py",
              file=sys.stderr)
        return 1
    if not stale:
        print("make_tables: every table is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
