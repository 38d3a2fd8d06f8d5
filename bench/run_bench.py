#!/usr/bin/env python3
"""bench/run_bench.py: every measurement of `make bench`, appended to the CSV files of one GPU.

Run by bench/bench.mk after the build and `make data`; standard library only (the PyTorch scripts it
starts need PyTorch). In order:

  vector add  stage 01's versions (build/01/vector_add --version all)
  size sweep  regression at every size of the plan, each stage until a run would take too long
  ladder      every stage 02-07 on the canonical configs (regression 5M points / 200 epochs; MNIST
              --hidden 0, 128, 1024,1024 / 10 epochs), --precision bf16 where a stage offers it
  reference   the CPU reference (common/reference.c) on the canonical configs it can afford
  pytorch     every PyTorch mode of the plan on the canonical configs
  breakdown   each stage with --breakdown (per-phase times, parsed from its output)
  width sweep MNIST with two hidden layers of width W: the last stage against PyTorch

The size sweep runs before the ladder so that the ladder's runs (more repeats) are the newest rows of
the canonical configuration. Output: RESULTS/<slug>.csv, <slug>-curves.csv, <slug>-breakdown.csv
(<slug> from the GPU's name); files of an earlier run for the same GPU are moved to
build/bench/previous/<time>/ first. Exit status 1 when any run failed (the others still ran).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import plots
import results_csv as rc

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXIT_USAGE = 2  # common/exit_codes.h: a stage that does not offer a flag value answers with it


# What each kind of run measures. The time budgets (quick: about 2 minutes, full: under 10 on an H100)
# are estimates made before any measurement; the summary at the end of a run prints the real times.
PLANS = {
    # About 2 minutes: everything once, timed once, no torch.compile (it compiles for 10-60 s per model).
    "quick": SimpleNamespace(
        repeat=1,
        sizes=(50_000, 5_000_000, 50_000_000), size_limit_s=4, size_modes=(),
        reference_mnist=("0",), reference_epochs=10,
        regression_modes=("eager", "cuda-graph"), mnist_modes=("eager", "cuda-graph", "bf16-autocast"),
        cpu_epochs={}, breakdown_epochs={"regression": 20, "mnist": 1},
        widths=(256, 4096), width_epochs=1, width_modes=("eager", "cuda-graph"),
    ),
    # Under 10 minutes: 3 timed runs per canonical configuration, every PyTorch mode there; the sweeps
    # leave out the compile modes (compiling for every size and width alone would take minutes) and the
    # CPU (seconds per epoch at the large sizes).
    "full": SimpleNamespace(
        repeat=3,
        sizes=(5_000, 50_000, 500_000, 5_000_000, 50_000_000, 100_000_000), size_limit_s=20,
        size_modes=("eager", "cuda-graph"),
        reference_mnist=("0", "128"), reference_epochs=10,
        regression_modes=("eager", "compile-default", "compile-max-autotune", "cuda-graph"),
        mnist_modes=("eager", "compile-default", "compile-max-autotune", "cuda-graph", "bf16-autocast"),
        cpu_epochs={"regression": rc.REGRESSION_EPOCHS, "0": rc.MNIST_EPOCHS, "128": rc.MNIST_EPOCHS,
                    "1024,1024": 1},
        breakdown_epochs={"regression": rc.REGRESSION_EPOCHS, "mnist": 2},
        widths=(128, 256, 512, 1024, 2048, 4096), width_epochs=2,
        width_modes=("eager", "cuda-graph", "bf16-autocast"),
    ),
}


def predict_seconds(first_seconds, last_points, last_seconds, next_points):
    """Wall time of the next size of a sweep, from wall(n) = overhead + k * n: the smallest size is
    almost all overhead (process start, data generation, CUDA context), the rest scales with n."""
    work = max(last_seconds - first_seconds, 0.0)
    return first_seconds + work * next_points / last_points


BREAKDOWN_LINE = re.compile(r"^\s+(%s)\s+([0-9.]+)(?:\s*ms)?\s+([0-9.]+)\s*%%\s*$" % "|".join(rc.PHASES))


def parse_breakdown(text):
    """[(phase, ms, pct)] from the --breakdown table the drivers print (common/report.c):
    '  forward        123.456   45.6%' (a ' ms' after the number is accepted too)."""
    found = []
    for line in text.splitlines():
        match = BREAKDOWN_LINE.match(line)
        if match:
            found.append((match.group(1), float(match.group(2)), float(match.group(3))))
    return found


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    names = out.stdout.strip().splitlines()
    return names[0].strip() if out.returncode == 0 and names else None


class Bench:
    def __init__(self, plan, results_dir, stages, slug):
        self.plan = plan
        self.stages = stages  # ["02", "03", ...], those built
        self.csv = os.path.join(results_dir, f"{slug}.csv")
        self.curves = os.path.join(results_dir, f"{slug}-curves.csv")
        self.breakdown = os.path.join(results_dir, f"{slug}-breakdown.csv")
        self.export_dir = os.path.join("build", "bench", "export")
        self.failures = []
        self.phase_seconds = []

    # ---- running things

    def run(self, command, capture=False, allowed=(0,)):
        """Runs command (printed first); returns (exit status, stdout if captured, wall seconds).
        A status outside allowed is recorded as a failure."""
        print("$ " + " ".join(command), flush=True)
        start = time.perf_counter()
        out = subprocess.run(command, stdout=subprocess.PIPE if capture else None, text=True)
        seconds = time.perf_counter() - start
        if capture and out.stdout:
            print(out.stdout, end="", flush=True)
        if out.returncode not in allowed:
            self.failures.append(f"exit {out.returncode}: {' '.join(command)}")
        return out.returncode, out.stdout, seconds

    def c_run(self, stage, trainer, flags, repeat, curve=False, allowed=(0,)):
        command = [f"build/{stage}/{trainer}", "--quiet", "--repeat", str(repeat), "--csv", self.csv] + flags
        if curve:
            command += ["--curve", self.curves]
        return self.run(command, allowed=allowed)

    def pytorch(self, trainer, export_json, modes, repeat, epochs=None, curve=False):
        command = [sys.executable, f"bench/pytorch_{trainer}.py", "--export-json", export_json,
                   "--mode", ",".join(modes), "--repeat", str(repeat), "--csv", self.csv]
        if epochs is not None:
            command += ["--epochs", str(epochs)]
        if curve:
            command += ["--curve", self.curves]
        return self.run(command)

    def export(self, subdir, trainer, flags):
        """Exports with the first stage's driver (every driver writes the same files); returns the JSON path."""
        directory = os.path.join(self.export_dir, subdir)
        self.run([f"build/{self.stages[0]}/{trainer}", "--quiet", "--export", directory] + flags)
        if trainer == "regression":
            points = flags[flags.index("--points") + 1]
            return os.path.join(directory, f"regression-{points}.json")
        hidden = flags[flags.index("--hidden") + 1]
        return os.path.join(directory, f"mnist-h{hidden.replace(',', '-')}.json")

    def phase(self, name, work):
        print(f"\n== {name}", flush=True)
        start = time.perf_counter()
        work()
        self.phase_seconds.append((name, time.perf_counter() - start))

    # ---- the phases (exports happen where PyTorch needs them)

    def vector_add(self):
        if os.access("build/01/vector_add", os.X_OK):
            self.run(["build/01/vector_add", "--version", "all", "--csv", self.csv])
        else:
            print("-- build/01/vector_add is not built: no stage 01 rows", flush=True)

    def size_sweep(self):
        plan = self.plan
        for stage in self.stages:
            self.sweep(f"stage {stage}", lambda n, s=stage: self.c_run(
                s, "regression", ["--points", str(n), "--epochs", str(rc.REGRESSION_EPOCHS)],
                plan.repeat if n <= rc.REGRESSION_POINTS else 1))
        if plan.size_modes:
            self.sweep("PyTorch " + ",".join(plan.size_modes), lambda n: self.pytorch(
                "regression", self.export("size", "regression", ["--points", str(n)]), plan.size_modes,
                plan.repeat if n <= rc.REGRESSION_POINTS else 1))

    def sweep(self, who, run_size):
        """Runs run_size(n) for the plan's sizes, smallest first, and stops (saying why) before a size
        whose predicted wall time passes the plan's limit, or after a failed run."""
        first = last = None
        for n in self.plan.sizes:
            if last is not None:
                predicted = predict_seconds(first[1], last[0], last[1], n)
                if predicted > self.plan.size_limit_s:
                    print(f"-- {who}: size sweep stops before {n:,} points: {last[0]:,} points took "
                          f"{last[1]:.1f} s, so {n:,} would take about {predicted:.0f} s "
                          f"(limit {self.plan.size_limit_s} s per run)", flush=True)
                    return
            status, _, seconds = run_size(n)
            if status != 0:
                print(f"-- {who}: size sweep stops at {n:,} points: the run failed (exit {status})", flush=True)
                return
            first = first or (n, seconds)
            last = (n, seconds)

    def ladder(self):
        plan = self.plan
        for stage in self.stages:
            self.c_run(stage, "regression", ["--points", str(rc.REGRESSION_POINTS),
                                             "--epochs", str(rc.REGRESSION_EPOCHS)], plan.repeat, curve=True)
            for hidden in rc.MNIST_HIDDEN:
                self.c_run(stage, "mnist", ["--hidden", hidden, "--epochs", str(rc.MNIST_EPOCHS)], plan.repeat,
                           curve=True)
        # No --curve for bf16: a curve row has no precision column, so it would mix with the fp32 curve.
        for stage in self.stages:
            for hidden in rc.MNIST_HIDDEN:
                status, _, _ = self.c_run(stage, "mnist", ["--hidden", hidden, "--epochs", str(rc.MNIST_EPOCHS),
                                                           "--precision", "bf16"], plan.repeat,
                                          allowed=(0, EXIT_USAGE))
                if status == EXIT_USAGE:
                    print(f"-- stage {stage} does not offer --precision bf16: no bf16 rows for it", flush=True)
                    break

    def reference(self):
        plan, stage = self.plan, self.stages[0]
        self.run([f"build/{stage}/regression", "--reference", "--quiet", "--csv", self.csv, "--curve", self.curves,
                  "--points", str(rc.REGRESSION_POINTS), "--epochs", str(rc.REGRESSION_EPOCHS)])
        for hidden in plan.reference_mnist:
            self.run([f"build/{stage}/mnist", "--reference", "--quiet", "--csv", self.csv, "--curve", self.curves,
                      "--hidden", hidden, "--epochs", str(plan.reference_epochs)])
        skipped = [h for h in rc.MNIST_HIDDEN if h not in plan.reference_mnist]
        if skipped:
            print(f"-- CPU reference: not run for MNIST --hidden {' '.join(skipped)} (minutes per epoch in "
                  "double precision); PyTorch --mode cpu gives the CPU figure there", flush=True)

    def pytorch_canonical(self):
        plan = self.plan
        regression = self.export("canonical", "regression", ["--points", str(rc.REGRESSION_POINTS)])
        self.pytorch("regression", regression, plan.regression_modes, plan.repeat, curve=True)
        if "regression" in plan.cpu_epochs:
            self.pytorch("regression", regression, ("cpu",), 1, epochs=plan.cpu_epochs["regression"], curve=True)
        for hidden in rc.MNIST_HIDDEN:
            export = self.export("canonical", "mnist", ["--hidden", hidden, "--epochs", str(rc.MNIST_EPOCHS)])
            self.pytorch("mnist", export, plan.mnist_modes, plan.repeat, curve=True)
            if hidden in plan.cpu_epochs:
                self.pytorch("mnist", export, ("cpu",), 1, epochs=plan.cpu_epochs[hidden], curve=True)
        if not plan.cpu_epochs:
            print("-- PyTorch --mode cpu: not in this plan", flush=True)

    def breakdowns(self):
        epochs = self.plan.breakdown_epochs
        runs = [("regression", "", ["--points", str(rc.REGRESSION_POINTS)]), ("mnist", "128", ["--hidden", "128"])]
        for stage in self.stages:
            for trainer, hidden, flags in runs:
                # No --csv: timing each phase synchronizes, so these times are not the stage's.
                status, stdout, _ = self.run([f"build/{stage}/{trainer}", "--breakdown", "--epochs",
                                              str(epochs[trainer])] + flags, capture=True)
                phases = parse_breakdown(stdout or "")
                if status == 0 and not phases:
                    self.failures.append(f"stage {stage} {trainer} --breakdown: no phase lines in its output")
                rc.append_csv(self.breakdown, rc.BREAKDOWN_COLUMNS, [
                    {"stage": stage, "trainer": trainer, "hidden": hidden, "epochs": epochs[trainer],
                     "phase": phase, "ms": ms, "pct": pct} for phase, ms, pct in phases])

    def width_sweep(self):
        plan, stage = self.plan, self.stages[-1]
        offers_bf16 = True
        for width in plan.widths:
            hidden = f"{width},{width}"
            flags = ["--hidden", hidden, "--epochs", str(plan.width_epochs)]
            self.c_run(stage, "mnist", flags, plan.repeat)
            if offers_bf16:
                status, _, _ = self.c_run(stage, "mnist", flags + ["--precision", "bf16"], plan.repeat,
                                          allowed=(0, EXIT_USAGE))
                offers_bf16 = status != EXIT_USAGE
            export = self.export("width", "mnist", flags)
            self.pytorch("mnist", export, plan.width_modes, plan.repeat)


def move_aside(results_dir, slug):
    """Moves an earlier run's files for this GPU to build/bench/previous/<time>/: each run starts fresh."""
    names = [f"{slug}.csv", f"{slug}-curves.csv", f"{slug}-breakdown.csv"]
    names += [f"{slug}-{figure}.png" for figure in plots.FIGURES]
    old = [n for n in names if os.path.exists(os.path.join(results_dir, n))]
    if not old:
        return
    target = os.path.join("build", "bench", "previous", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(target, exist_ok=True)
    for name in old:
        shutil.move(os.path.join(results_dir, name), os.path.join(target, name))
    print(f"run_bench: moved the last run's {len(old)} files for this GPU to {target}/")


def built_stages():
    stages = []
    for name in sorted(os.listdir(".")):
        match = re.fullmatch(r"(0[2-7])-[\w-]+", name)
        if match and all(os.access(f"build/{match.group(1)}/{t}", os.X_OK) for t in ("regression", "mnist")):
            stages.append(match.group(1))
    return stages


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run every measurement of make bench (see bench/bench.mk).")
    parser.add_argument("--bench", choices=sorted(PLANS), default="full", help="which plan (default: full)")
    parser.add_argument("--results", default="results", help="folder of the CSV files (default: results)")
    args = parser.parse_args(argv)
    os.chdir(REPO_ROOT)

    name = gpu_name()
    if name is None:
        print("error: no GPU found (nvidia-smi failed): make bench needs a GPU machine", file=sys.stderr)
        return 4
    stages = built_stages()
    if not stages:
        print("error: no built stage: run make all first", file=sys.stderr)
        return 2
    slug = rc.gpu_slug(name)
    os.makedirs(args.results, exist_ok=True)
    move_aside(args.results, slug)
    bench = Bench(PLANS[args.bench], args.results, stages, slug)
    print(f"run_bench: {args.bench} plan on {name}, stages {' '.join(stages)}, into {bench.csv}", flush=True)

    start = time.perf_counter()
    bench.phase("vector add: stage 01", bench.vector_add)
    bench.phase("size sweep: regression, stages and PyTorch", bench.size_sweep)
    bench.phase("ladder: every stage on the canonical configurations", bench.ladder)
    bench.phase("CPU reference", bench.reference)
    bench.phase("PyTorch on the canonical configurations", bench.pytorch_canonical)
    bench.phase("per-phase breakdown", bench.breakdowns)
    bench.phase(f"width sweep: stage {stages[-1]} and PyTorch", bench.width_sweep)

    print(f"\n== run_bench: {args.bench} plan, {time.perf_counter() - start:.0f} s")
    for phase, seconds in bench.phase_seconds:
        print(f"  {seconds:7.1f} s  {phase}")
    if bench.failures:
        print(f"{len(bench.failures)} run(s) failed:", file=sys.stderr)
        for failure in bench.failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
