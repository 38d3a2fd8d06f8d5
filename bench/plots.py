#!/usr/bin/env python3
"""bench/plots.py: the PNG figures of results/, drawn only from the CSV files next to them.

For every results/<slug>.csv (and its -curves.csv.gz and -breakdown.csv) <slug>-NAME.png for each of FIGURES, and
for every results/loop/<slug>.csv <slug>-loop.png beside it. A figure without rows is not drawn and an old PNG of
its name is removed: no figure outlives its data. Selecting needs the standard library only; drawing, matplotlib.

  python3 bench/plots.py [--results DIR] [--loop-only]
"""

import argparse
import functools
import itertools
import math
import os
import sys

import results_csv as rc
from provenance import REPO_ROOT

# ----------------------------------------------------------------------------
# selecting what to draw (standard library only)


def ladder_data(rows, config, defaults=None):
    """(bars, lines) of a ladder figure: (label, e2e, loop) of the reference and the stages (the ladder table's
    entries), (label, e2e) of the PyTorch modes; only runs of the configuration's epochs."""
    bars, lines = [], []
    for e in rc.select_entries(rows, config, defaults):
        if not e.comparable or e.e2e is None:
            continue
        if e.kind == "pytorch":
            lines.append((rc.row_label(e.row), e.e2e))
        else:
            bars.append((rc.row_label(e.row), e.e2e, e.loop))
    return bars, lines


def _sweep(rows, keep, x_of, defaults=None):
    """{label: [(x, ms/epoch, throughput)]} sorted by x, newest row per (label, x), default variants only, series
    of one point dropped."""
    if defaults is None:
        defaults = rc.variant_defaults(rows)
    newest = {}
    for row in rows:
        if not keep(row) or not rc.is_default_variant(row, defaults) or not rc.compile_audit(row)[0]:
            continue
        x, ms = x_of(row), rc.number(row, "ms_per_epoch")
        if x is None or ms is None:
            continue
        newest[(rc.row_label(row), x)] = (x, ms, rc.throughput(row)[0])
    series = {}
    for (label, _), point in newest.items():
        series.setdefault(label, []).append(point)
    return {label: sorted(points) for label, points in sorted(series.items()) if len(points) >= 2}


def size_sweep_data(rows, defaults=None):
    """Regression runs of the canonical epochs at any number of points."""
    return _sweep(rows,
                  lambda r: r["trainer"] == "regression" and rc.integer(r, "epochs") == rc.REGRESSION_EPOCHS,
                  lambda r: rc.integer(r, "points"), defaults)


def square_width(hidden):
    """'512,512' -> 512; None unless two equal hidden layers."""
    parts = hidden.split(",")
    return int(parts[0]) if len(parts) == 2 and parts[0] == parts[1] and parts[0].isdigit() else None


def width_sweep_data(rows, defaults=None):
    """MNIST runs with two hidden layers of equal width, batch 128, any epochs (ms/epoch compares)."""
    return _sweep(rows,
                  lambda r: r["trainer"] == "mnist" and rc.integer(r, "batch") == rc.MNIST_BATCH
                  and (r["precision"] or "fp32") in rc.LADDER_PRECISIONS,
                  lambda r: square_width(r["hidden"]), defaults)


def persistent_sweep_data(rows, defaults=None):
    """{stage: [(width, ms/epoch)]} of rc.persistent_sweep, sorted by width, stages of one point dropped."""
    series = {}
    for width, by_stage in rc.persistent_sweep(rows, defaults).items():
        for stage, row in by_stage.items():
            series.setdefault(stage, []).append((width, rc.number(row, "ms_per_epoch")))
    return {stage: points for stage, points in sorted(series.items()) if len(points) >= 2}


def loop_data(rows):
    """[(trainer, {mode: [(round, candidate, stage 02 of its run)]} of passing rounds, [(stage, figure)] of the
    hand-written stages)]."""
    rounds, stages, panels = rc.loop_rounds(rows), rc.loop_stages(rows), []
    for trainer in rc.LOOP_FIGURE:
        series = {}
        for (t, mode, k), run in sorted(rounds.items()):
            this = rc.loop_figure(run.get(rc.LOOP_CANDIDATE))
            if t == trainer and this is not None:
                series.setdefault(mode, []).append((k, this, rc.loop_figure(run.get("02"))))
        hand = sorted((nn, rc.loop_figure(row)) for nn, row in stages.get(trainer, {}).items()
                      if rc.loop_figure(row) is not None)
        if series or hand:
            panels.append((trainer, series, hand))
    return panels


def width_label(width):
    return "none" if width == 0 else str(width)


def curve_panels(curve_rows):
    """[(title, series, {label: [(index, value)]})]: regression train loss, then MNIST step loss per --hidden; in
    each the highest stage, PyTorch (eager, else another fp32 mode) and the CPU reference."""
    curves = rc.last_blocks(curve_rows)
    panels = []
    wanted = [("regression", "", "train_loss", "regression: train MSE by epoch")]
    for hidden in sorted({k[3] for k in curves if k[1] == "mnist"}, key=lambda h: rc.mnist_params(h)):
        wanted.append(("mnist", hidden, "step_loss", f"MNIST --hidden {hidden}: step loss"))
    for trainer, hidden, series, title in wanted:
        found = {k: v for k, v in curves.items() if k[1] == trainer and k[3] == hidden and k[4] == series}
        stages = sorted(k for k in found if k[0] not in (rc.PYTORCH, rc.REFERENCE))
        chosen = {}
        if stages:
            chosen[f"stage {stages[-1][0]}"] = found[stages[-1]]
        # PyTorch: eager, or the first fp32 mode that wrote a curve when eager did not.
        pytorch = [k for mode in rc.PYTORCH_MODES if rc.mode_precision(mode) == "fp32"
                   for k in found if k[0] == rc.PYTORCH and k[2] == mode]
        if pytorch:
            chosen[f"PyTorch {pytorch[0][2]}"] = found[pytorch[0]]
        reference = next((k for k in found if k[0] == rc.REFERENCE), None)
        if reference:
            chosen["CPU reference"] = found[reference]
        if chosen:
            panels.append((title, series, chosen))
    return panels


def breakdown_data(rows):
    """{(trainer, hidden): {stage: {phase: ms}}} of each stage's newest run (a phase seen again starts one)."""
    runs = {}
    for row in rows:
        ms = rc.number(row, "ms")
        if ms is None:
            continue
        key = (row["trainer"], row["hidden"])
        phases = runs.setdefault(key, {}).setdefault(row["stage"], {})
        if row["phase"] in phases:
            phases.clear()
        phases[row["phase"]] = ms

    def regression_first(key):
        return key[0] != "regression", rc.mnist_params(key[1]) if key[1] else 0

    return {k: dict(sorted(runs[k].items())) for k in sorted(runs, key=regression_first)}


# ----------------------------------------------------------------------------
# drawing (matplotlib)

FIGURES = ("ladder-regression", "ladder-mnist", "size-sweep", "width-sweep", "persistent-sweep", "loss-curves",
           "breakdown")


# One color per stage, PyTorch mode and the reference, the same in every figure.
COLORS = {
    "CPU reference": "#999999", "02": "#1f77b4", "03": "#ff7f0e", "04": "#2ca02c", "05": "#d62728",
    "06": "#9467bd", "07": "#8c564b", "08": "#7b4173", "PyTorch eager": "#e377c2", "PyTorch compile-default": "#7f7f7f",
    "PyTorch compile-max-autotune": "#bcbd22", "PyTorch cuda-graph": "#17becf", "PyTorch bf16-autocast": "#393b79",
    "PyTorch bf16-cuda-graph": "#637939", "PyTorch bf16-compile-max-autotune": "#843c39", "PyTorch cpu": "#000000",
}
SMOOTH_STEPS = 50  # MNIST step losses are drawn as the mean of this many steps


def color_for(label):
    base = label.split(" · ")[0]
    return COLORS.get(base[len("stage "):] if base.startswith("stage ") else base, "#333333")


def line_style(label):
    """PyTorch dashed, a stage at another precision dotted, the rest solid."""
    return "--" if label.startswith("PyTorch") else ":" if " · " in label else "-"


def moving_mean(values, window):
    sums = [0.0, *itertools.accumulate(values)]
    return [(sums[i + 1] - sums[max(0, i + 1 - window)]) / min(i + 1, window) for i in range(len(values))]


def save(plt, fig, title, path, bottom=0.0):
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def log_axes(ax, xlabel, ylabel, title=None, legend=7, grid="both"):
    """Log y, labels, a grid at every tick and the legend, as every figure but the breakdown has them."""
    ax.set_yscale("log")
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    if legend:
        ax.legend(fontsize=legend)
    ax.grid(axis=grid, which="both", alpha=0.3)


def draw_ladder(plt, panels, title, path):
    """panels: [(subtitle, bars, lines)]."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    for ax, (subtitle, bars, lines) in zip(axes[0], panels):
        x = range(len(bars))
        ax.bar([i - 0.2 for i in x], [b[1] for b in bars], 0.4, label="e2e", color="#4c72b0")
        ax.bar([i + 0.2 for i in x], [b[2] or 0 for b in bars], 0.4, label="loop", color="#a1c4e8")
        for i, bar in enumerate(bars):
            ax.annotate(rc.three_digits(bar[1]), (i - 0.2, bar[1]), ha="center", va="bottom", fontsize=7)
        for label, e2e in lines:
            ax.axhline(e2e, linestyle="--", linewidth=1.2, color=color_for(label), label=f"{label} (e2e)")
        ax.set_xticks(list(x))
        ax.set_xticklabels([b[0] for b in bars], rotation=30, ha="right")
        log_axes(ax, None, "ms (log scale)", subtitle, grid="y")
    save(plt, fig, title, path)


def draw_sweep(plt, series, title, path, xlabel, unit, log2_x=False):
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    for label, points in series.items():
        style = dict(linestyle=line_style(label), marker="o", label=label, color=color_for(label))
        left.plot([p[0] for p in points], [p[1] for p in points], **style)
        rates = [(p[0], p[2]) for p in points if p[2] is not None]
        right.plot([r[0] for r in rates], [r[1] for r in rates], **style)
    for ax, ylabel in ((left, "ms per epoch"), (right, unit)):
        ax.set_xscale("log", base=2 if log2_x else 10)
        log_axes(ax, xlabel, ylabel, legend=7 if ax is left else None)
    save(plt, fig, title, path)


def draw_persistent_sweep(plt, series, title, path):
    """ms/epoch against the width, a line per stage; widths as categories (0 has no place on a log axis)."""
    widths = sorted({w for points in series.values() for w, _ in points})
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for stage, points in series.items():
        ax.plot([widths.index(w) for w, _ in points], [ms for _, ms in points], marker="o", label=f"stage {stage}",
                color=color_for(stage))
    ax.set_xticks(range(len(widths)))
    ax.set_xticklabels([width_label(w) for w in widths])
    log_axes(ax, "hidden units (784-W-10; none: 784-10)", "ms per epoch (log scale)", legend=8)
    save(plt, fig, title, path)


def draw_curves(plt, panels, title, path):
    cols = min(2, len(panels))  # at most two panels a row
    rows = (len(panels) + cols - 1) // cols
    fig, grid = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    # Drawn widest first, so that lines lying on top of each other all stay visible.
    def style(label):
        if label == "CPU reference":
            return dict(linewidth=4.0, alpha=0.5)
        return dict(linewidth=2.0, linestyle="--") if label.startswith("PyTorch") else dict(linewidth=1.0)

    for ax, (subtitle, series, chosen) in zip(axes, panels):
        for label in sorted(chosen, key=lambda lab: -style(lab)["linewidth"]):
            xs = [p[0] for p in chosen[label]]
            ys = [p[1] for p in chosen[label]]
            if series == "step_loss":
                ys = moving_mean(ys, SMOOTH_STEPS)
            ax.plot(xs, ys, label=label, color=color_for(label), **style(label))
        log_axes(ax, "epoch" if series == "train_loss" else f"step (mean of the last {SMOOTH_STEPS} steps)",
                 "loss (log scale)", subtitle)
    save(plt, fig, title, path)


def draw_breakdown(plt, data, title, path):
    fig, axes = plt.subplots(1, len(data), figsize=(6.5 * len(data), 1.4 + 0.5 * max(map(len, data.values()))),
                             squeeze=False)
    colors = dict(zip(rc.PHASES, plt.get_cmap("Set2").colors))
    handles = {}
    for ax, ((trainer, hidden), stages) in zip(axes[0], data.items()):
        names = list(stages)
        for y, stage in enumerate(names):
            phases = stages[stage]
            total = sum(phases.values())
            left = 0.0
            for phase in [p for p in rc.PHASES if p in phases] + [p for p in phases if p not in rc.PHASES]:
                share = 100 * phases[phase] / total if total > 0 else 0
                handles[phase] = ax.barh(y, share, 0.6, left=left, color=colors.get(phase, "#999999"))
                left += share
            ax.annotate(f"{rc.three_digits(total)} ms", (101, y), va="center", fontsize=8)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names)
        ax.invert_yaxis()
        ax.set_xlim(0, 118)
        ax.set_xlabel("% of the phases' sum (timing each phase synchronizes after it)")
        ax.set_title(trainer if trainer == "regression" else f"{trainer} --hidden {hidden}", fontsize=10)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=len(handles), fontsize=8)
    save(plt, fig, title, path, bottom=0.08)


def draw_loop(plt, panels, title, path):
    """A panel a trainer: each mode's passing rounds as a line, the hand-written stages as dashed levels."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    for ax, (trainer, series, hand) in zip(axes[0], panels):
        for mode, points in series.items():
            open_mode = mode == "open"  # black, so that no stage's color is mistaken for a round
            found = {p[0]: p[1] for p in points}  # a failed round is a gap in its line
            rounds = range(min(found), max(found) + 1)
            ax.plot(list(rounds), [found.get(k, float("nan")) for k in rounds], label=f"{mode} rounds", color="black",
                    marker="o" if open_mode else "s", markersize=7 if open_mode else 10, fillstyle="full" if
                    open_mode else "none", linestyle="-" if open_mode else ":")
        # a stage far above every round is named in the legend, not drawn: it would crush the rounds' scale
        top = 3 * max((p[1] for points in series.values() for p in points), default=math.inf)
        for nn, value in hand:
            if value <= top:
                ax.axhline(value, linestyle="--", linewidth=1, color=color_for(nn), label=f"stage {nn}")
            else:
                ax.plot([], [], linestyle="none", label=f"stage {nn}: {rc.three_digits(value)} (above)")
        ax.set_xticks(sorted({p[0] for points in series.values() for p in points}) or [1])
        figure = "e2e ms, 5M points, 200 epochs" if trainer == "regression" else "ms per epoch, --hidden 128"
        log_axes(ax, "round (a gap: the round failed the suite)", f"{figure} (log scale)", trainer, legend=None,
                 grid="y")
        lowest = ax.get_ylim()[0]
        decade = 10 ** math.floor(math.log10(lowest))
        if lowest < 2 * decade:  # no labelled tick below the lowest round: show the decade's
            ax.set_ylim(bottom=decade)
        ax.legend(fontsize=7, loc="upper right")  # the rounds fall to the lower left
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):  # 2, 3, 4 ms, not 2 × 10^0
            axis(plt.FuncFormatter(lambda value, _: f"{value:g}"))
    save(plt, fig, title, path)


def plot_loop(plt, csv_path, out_dir):
    """<slug>-loop.png of results/loop/<slug>.csv in out_dir, where a round has rows."""
    rows = rc.read_csv(csv_path, rc.RESULT_COLUMNS)
    out = os.path.join(out_dir, f"{os.path.splitext(os.path.basename(csv_path))[0]}-loop.png")
    panels = loop_data(rows)
    if panels:
        draw_loop(plt, panels, f"The assistant loop against the hand-written stages — {rc.device_of(rows)}", out)
        print(f"plots: wrote {out}")


def plot_file(plt, csv_path, out_dir):
    """Every figure of one results file, each path written printed."""
    stem = os.path.splitext(os.path.basename(csv_path))[0]
    base = os.path.dirname(csv_path)
    rows = rc.read_csv(csv_path, rc.RESULT_COLUMNS)
    defaults = rc.variant_defaults(rows, rc.source_default_variants(REPO_ROOT))
    source = f"{rc.device_of(rows)} · {os.path.basename(csv_path)}"
    curves_path = os.path.join(base, f"{stem}-curves.csv.gz")
    breakdown_path = os.path.join(base, f"{stem}-breakdown.csv")
    curve_rows = rc.read_csv(curves_path, rc.CURVE_COLUMNS) if os.path.exists(curves_path) else []
    breakdown_rows = rc.read_csv(breakdown_path, rc.BREAKDOWN_COLUMNS) if os.path.exists(breakdown_path) else []

    def ladder_panels(trainer):
        panels = []
        for config in rc.canonical_configs():
            if config.trainer == trainer:
                bars, lines = ladder_data(rows, config, defaults)
                if bars or lines:
                    subtitle = "regression 5M points" if trainer == "regression" else f"--hidden {config.hidden}"
                    panels.append((f"{subtitle}, {config.epochs} epochs", bars, lines))
        return panels

    figures = {  # name: (data, draw(plt, data, title, path), title)
        "ladder-regression": (ladder_panels("regression"), draw_ladder, "Regression stage ladder"),
        "ladder-mnist": (ladder_panels("mnist"), draw_ladder, "MNIST stage ladder"),
        "size-sweep": (size_sweep_data(rows, defaults), functools.partial(
            draw_sweep, xlabel="points", unit="GB/s (minimum traffic)"),
            f"Regression size sweep, {rc.REGRESSION_EPOCHS} epochs"),
        "width-sweep": (width_sweep_data(rows, defaults), functools.partial(
            draw_sweep, xlabel="hidden width W (784-W-W-10)", unit="GFLOP/s", log2_x=True), "MNIST width sweep"),
        "persistent-sweep": (persistent_sweep_data(rows, defaults), draw_persistent_sweep,
                             f"MNIST persistent sweep: one hidden layer, batch {rc.MNIST_BATCH}, fp32"),
        "loss-curves": (curve_panels(curve_rows), draw_curves, "Loss curves, same data, init and batch order"),
        "breakdown": (breakdown_data(breakdown_rows), draw_breakdown, "Per-phase breakdown"),
    }
    for name in FIGURES:
        data, draw, title = figures[name]
        out = os.path.join(out_dir, f"{stem}-{name}.png")
        if data:
            draw(plt, data, f"{title} — {source}", out)
            print(f"plots: wrote {out}")
        elif os.path.exists(out):
            os.remove(out)
            print(f"plots: no rows for {name}: removed the old {out}")
        else:
            print(f"plots: no rows for {name} in {csv_path}: not drawn")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Draw the PNG figures of results/ from its CSV files.")
    parser.add_argument("--results", default="results", help="folder of result CSV files (default: results)")
    parser.add_argument("--loop-only", action="store_true", help="draw only the loop figure of RESULTS/loop/")
    args = parser.parse_args(argv)

    # Imported here: the selection functions above must work without matplotlib.
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(args.results, exist_ok=True)
    try:
        files = [] if args.loop_only else rc.result_files(args.results)
        if not files and not args.loop_only:
            print(f"plots: no result files in {args.results}: nothing to draw")
        for path in files:
            plot_file(plt, path, args.results)
        loop_dir = os.path.join(args.results, "loop")  # make loop's rows: their figure beside them
        for path in rc.result_files(loop_dir):
            plot_loop(plt, path, loop_dir)
    except (OSError, rc.SchemaError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
