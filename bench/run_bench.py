#!/usr/bin/env python3
"""bench/run_bench.py: every measurement of `make bench`, appended to the CSV files of one GPU (tools/bench.mk).

The phases: ESSENTIAL, then OPTIONAL while the budget (--budget-s, BENCH_BUDGET_S, else the plan's) lasts; an
optional run that would pass it is skipped, saying why, and one still going at the budget plus GRACE_S is stopped.
What each phase runs: PLANS and the Bench method of its name. The ladder passes no --variant: its rows are each
stage's default's. Output: RESULTS/<slug>.csv, -curves.csv(.gz), -breakdown.csv, an earlier run's moved to
build/bench/previous/ first; every row carries the run's one run id, commit and dirty flag (run_provenance).
Exit status 1 when any run failed (skipped and stopped runs are not failures). Standard library only.
"""

import argparse
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import plots
import provenance
import results_csv as rc

EXIT_USAGE = 2  # common/exit_codes.h: a stage that does not offer a flag value answers with it
GRACE_S = 10  # an optional run still going this long past the budget is stopped

# Stages whose naive MNIST GEMMs take seconds an epoch at --hidden 1024,1024: the ladder times them naive_repeat times.
NAIVE_GEMM_STAGES = ("02", "03")

# The stage READMEs' variants tables: (stage, trainer, flag, names, MNIST --hidden values); names None: every
# name the stage offers but its default (the ladder's). A name or stage not offered is skipped, saying so.
VARIANT_RUNS = (
    ("04", "regression", "variant", None, ("",)),            # shared (default), atomic, shuffle
    ("06", "regression", "variant", None, ("",)),            # fused (default), cublas
    ("07", "regression", "variant", None, ("",)),            # fused (default) alone: nothing to run
    ("08", "regression", "variant", None, ("",)),            # persistent (default), graphs
    ("04", "mnist", "variant", None, ("128", "1024,1024")),  # every tile shape
    ("07", "mnist", "variant", None, rc.MNIST_HIDDEN),       # epoch-graph (default), step-graph
    ("08", "mnist", "variant", None, rc.MNIST_HIDDEN),       # persistent (default), epoch-graph, step-graph
    ("06", "mnist", "precision", ("tf32", "bf16"), ("1024,1024",)),
)


ESSENTIAL = ("vector add", "ladder", "variants", "reference", "pytorch")
# The sweeps before compile: the READMEs quote them, and torch.compile's minutes must not crowd them out.
OPTIONAL = ("breakdown", "persistent sweep", "size sweep", "width sweep", "compile")


# What each kind of run measures, and each phase's estimated seconds on an H200 with inductor's caches cold (the
# summary at the end prints the real times beside them).
PLANS = {
    # every kind of measurement once, at one MNIST width, no torch.compile (10-100 s a model)
    "quick": SimpleNamespace(
        budget_s=100,
        repeat=1, pytorch_repeat={"regression": 1, "mnist": 1},
        mnist_hidden=("128",), bf16_hidden=("128",), naive_repeat=1,
        reference_mnist={"128": 1},
        regression_modes=("eager", "cuda-graph"), mnist_modes=("eager", "cuda-graph"), cpu_epochs={},
        compile_modes=(), compile_configs={}, bf16_compile_modes=(), bf16_compile_configs={},
        breakdown_epochs={"regression": 20, "mnist": 1},
        sizes=(50_000, 500_000), size_limit_s=4, size_pytorch=(), size_modes=(),
        widths=(512, 2048), width_epochs=1, width_modes=("eager",), width_bf16=False,
        persistent_widths=(), persistent_epochs=1,  # the ladder's --hidden 128 rows put 08 against 07 once
        estimate_s={"vector add": 3, "ladder": 22, "variants": 10, "reference": 5, "pytorch": 21,
                    "breakdown": 14, "persistent sweep": 0, "compile": 0, "size sweep": 9, "width sweep": 15},
    ),
    # About 8 minutes: torch.compile on regression and --hidden 128 only (bf16 at 1024,1024), the CPU at 1 MNIST
    # epoch (rows marked "(1 epoch)"); the sweeps time once, and a size sweep stops before passing size_limit_s.
    "full": SimpleNamespace(
        budget_s=480,
        repeat=3, pytorch_repeat={"regression": 3, "mnist": 2},
        mnist_hidden=rc.MNIST_HIDDEN, bf16_hidden=("1024,1024",), naive_repeat=1,
        reference_mnist={"0": 1, "128": 1},
        regression_modes=("eager", "cuda-graph"), mnist_modes=("eager", "cuda-graph"),
        cpu_epochs={"regression": rc.REGRESSION_EPOCHS, "0": 1, "128": 1, "1024,1024": 1},
        compile_modes=("compile-default", "compile-max-autotune"),
        compile_configs={"regression": 35, "128": 95},  # config -> estimated seconds (both modes)
        bf16_compile_modes=("bf16-compile-max-autotune",), bf16_compile_configs={"1024,1024": 80},
        breakdown_epochs={"regression": rc.REGRESSION_EPOCHS, "mnist": 2},
        sizes=(5_000, 50_000, 500_000, 50_000_000), size_limit_s=15,
        size_pytorch=(50_000_000,), size_modes=("eager", "cuda-graph"),
        widths=(2048, 4096), width_epochs=2, width_modes=("eager", "cuda-graph", "bf16-autocast"),
        width_bf16=True,  # with the ladder's --hidden 1024,1024 rows: widths 1024, 2048, 4096
        persistent_widths=rc.PERSISTENT_SWEEP_WIDTHS, persistent_epochs=3,
        estimate_s={"vector add": 3, "ladder": 70, "variants": 35, "reference": 12, "pytorch": 60,
                    "breakdown": 20, "persistent sweep": 9, "compile": 210, "size sweep": 37, "width sweep": 24},
    ),
}


class Budget:
    """Wall-clock seconds since the start, against a budget."""

    def __init__(self, seconds, clock=time.perf_counter):
        self.seconds = seconds
        self.clock = clock
        self.start = clock()

    def elapsed(self):
        return self.clock() - self.start

    def remaining(self):
        return self.seconds - self.elapsed()

    def allows(self, estimate_s=0.0):
        """Whether something expected to take estimate_s seconds ends within the budget."""
        return self.elapsed() + estimate_s <= self.seconds


def budget_seconds(plan, argument=None, environ=os.environ):
    """--budget-s, else BENCH_BUDGET_S, else the plan's; ValueError on anything but a positive number."""
    text = argument if argument is not None else environ.get("BENCH_BUDGET_S", "").strip()
    if text in ("", None):
        return float(plan.budget_s)
    value = float(text)
    if not value > 0:
        raise ValueError(f"the budget must be a positive number of seconds, not {text!r}")
    return value


def parse_listed_names(text, flag):
    """The NAMEs of the "FLAG NAME" lines of --list-variants, the default first; None when there are none."""
    names = [line.split(None, 1)[1].strip() for line in text.splitlines()
             if line.startswith(flag + " ") and line.split(None, 1)[1].strip()]
    return names or None


def predict_seconds(first_seconds, last_points, last_seconds, next_points):
    """The next size's wall time from wall(n) = overhead + k n, the smallest size's time all overhead."""
    work = max(last_seconds - first_seconds, 0.0)
    return first_seconds + work * next_points / last_points


BREAKDOWN_LINE = re.compile(r"^\s+(%s)\s+([0-9.]+)(?:\s*ms)?\s+([0-9.]+)\s*%%\s*$" % "|".join(rc.PHASES))


def parse_breakdown(text):
    """[(phase, ms, pct)] of the --breakdown table's lines (common/report.c), '  forward   123.456 [ms]  45.6%'."""
    matches = (BREAKDOWN_LINE.match(line) for line in text.splitlines())
    return [(m.group(1), float(m.group(2)), float(m.group(3))) for m in matches if m]


class Bench:
    def __init__(self, plan, results_dir, stages, slug, budget, device="", commit="", run_id=""):
        self.plan = plan
        self.stages = stages  # ["02", "03", ...], those built
        self.budget = budget
        self.csv = os.path.join(results_dir, f"{slug}.csv")
        self.curves = os.path.join(results_dir, f"{slug}-curves.csv")
        self.breakdown = os.path.join(results_dir, f"{slug}-breakdown.csv")
        self.failures = []
        self.skipped = []  # what the budget left out, and why
        self.phase_seconds = []
        self.done = set()  # (stage, trainer, hidden, variant, precision) of the C runs made
        self.optional = False  # inside an optional phase: runs are checked against the budget
        self.device, self.commit, self.run_id = device, commit, run_id  # for the breakdown rows

    # ---- the budget

    def skip(self, what, why):
        self.skipped.append(f"{what}: {why}")
        print(f"-- skipped: {what}: {why}", flush=True)

    def fits(self, what, estimate_s):
        """Inside an optional phase: whether a run of about estimate_s fits the budget (saying so if not)."""
        if not self.optional or self.budget.allows(estimate_s):
            return True
        self.skip(what, f"{self.budget.elapsed():.0f} s elapsed + about {estimate_s:.0f} s would pass the "
                        f"budget of {self.budget.seconds:.0f} s (BENCH_BUDGET_S)")
        return False

    def timeout(self):
        """An optional run may last until the budget plus GRACE_S; an essential one has no limit."""
        return max(self.budget.remaining() + GRACE_S, 1.0) if self.optional else None

    def phase(self, name, work, optional=False):
        estimate = self.plan.estimate_s.get(name)
        print(f"\n== {name} (about {estimate} s planned; {self.budget.elapsed():.0f} s elapsed)", flush=True)
        if optional and not self.budget.allows():
            self.skip(f"phase {name}", f"{self.budget.elapsed():.0f} s elapsed, past the budget of "
                                       f"{self.budget.seconds:.0f} s (BENCH_BUDGET_S)")
            self.phase_seconds.append((name, estimate, None))
            return
        self.optional = optional
        start = time.perf_counter()
        work()
        self.optional = False
        seconds = time.perf_counter() - start
        self.phase_seconds.append((name, estimate, seconds))
        print(f"== {name}: {seconds:.1f} s (total {self.budget.elapsed():.0f} s)", flush=True)

    # ---- running things

    def run(self, command, capture=False, allowed=(0,)):
        """(exit status, stdout if captured, wall seconds) of command; a status not allowed is a failure, and an
        optional run stopped at the budget returns status None, skipped."""
        print("$ " + " ".join(command), flush=True)
        start = time.perf_counter()
        timeout = self.timeout()
        # a run that may be stopped gets a process group of its own: stopping it stops its helpers too
        try:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE if capture else None, text=True,
                                    start_new_session=timeout is not None)
        except OSError as err:
            self.failures.append(f"cannot run {' '.join(command)}: {err}")
            return 127, "", 0.0
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            seconds = time.perf_counter() - start
            self.skip(" ".join(command), f"stopped after {seconds:.0f} s: past the budget of "
                                         f"{self.budget.seconds:.0f} s plus {GRACE_S} s")
            return None, "", seconds
        seconds = time.perf_counter() - start
        if capture and stdout:
            print(stdout, end="", flush=True)
        if proc.returncode not in allowed:
            self.failures.append(f"exit {proc.returncode}: {' '.join(command)}")
        return proc.returncode, stdout, seconds

    @functools.cache
    def offered(self, stage, trainer, flag):
        """The names a stage offers for --variant or --precision, the default first (--list-variants); None: none."""
        names = parse_listed_names(provenance.output_of([f"build/{stage}/{trainer}", "--list-variants"]) or "", flag)
        if names is None:
            print(f"-- build/{stage}/{trainer} --list-variants: no {flag} names in its answer", flush=True)
        return names

    def c_run(self, stage, trainer, flags, repeat, curve=False, variant=None, precision=None):
        """The exit status of a run of build/<stage>/<trainer> (EXIT_USAGE: not offered, not a failure)."""
        command = [f"build/{stage}/{trainer}", "--quiet", "--repeat", str(repeat), "--csv", self.csv] + flags
        if variant is not None:
            command += ["--variant", variant]
        if precision is not None:
            command += ["--precision", precision]
        if curve:
            command += ["--curve", self.curves]
        status, _, _ = self.run(command, allowed=(0, EXIT_USAGE) if variant or precision else (0,))
        hidden = flags[flags.index("--hidden") + 1] if "--hidden" in flags else ""
        self.done.add((stage, trainer, hidden, variant, precision))
        return status

    def canonical_flags(self, trainer, hidden=""):
        if trainer == "regression":
            return ["--points", str(rc.REGRESSION_POINTS), "--epochs", str(rc.REGRESSION_EPOCHS)]
        return ["--hidden", hidden, "--epochs", str(rc.MNIST_EPOCHS)]

    def pytorch(self, trainer, export_json, modes, repeat, cpu_epochs=None, curve=False):
        """Runs bench/pytorch_<trainer>.py on export_json; nothing when the export failed (None)."""
        if export_json is None:
            return
        command = [sys.executable, f"bench/pytorch_{trainer}.py", "--export-json", export_json,
                   "--mode", ",".join(modes), "--repeat", str(repeat), "--csv", self.csv]
        if cpu_epochs is not None:
            command += ["--cpu-epochs", str(cpu_epochs)]
        if curve:
            command += ["--curve", self.curves]
        self.run(command)

    def export(self, subdir, trainer, flags):
        """The JSON path of an export by the first stage's driver (all write the same files); None if it failed."""
        directory = os.path.join("build", "bench", "export", subdir)
        status, _, _ = self.run([f"build/{self.stages[0]}/{trainer}", "--quiet", "--export", directory] + flags)
        if status != 0:
            return None
        if trainer == "regression":
            points = flags[flags.index("--points") + 1]
            return os.path.join(directory, f"regression-{points}.json")
        hidden = flags[flags.index("--hidden") + 1]
        return os.path.join(directory, f"mnist-h{hidden.replace(',', '-')}.json")

    @functools.cache
    def canonical_export(self, config):
        """The canonical export of "regression" (its points) or of an MNIST --hidden (and epochs), made once."""
        trainer = "regression" if config == "regression" else "mnist"
        flags = self.canonical_flags(trainer, config)
        return self.export("canonical", trainer, flags[:2] if trainer == "regression" else flags)

    # ---- the essential phases

    def vector_add(self):
        if os.access("build/01/vector_add", os.X_OK):
            self.run(["build/01/vector_add", "--version", "all", "--csv", self.csv])
        else:
            print("-- build/01/vector_add is not built: no stage 01 rows", flush=True)

    def ladder(self):
        plan = self.plan
        for stage in self.stages:
            self.c_run(stage, "regression", self.canonical_flags("regression"), plan.repeat, curve=True)
            for hidden in plan.mnist_hidden:
                naive = stage in NAIVE_GEMM_STAGES and hidden == "1024,1024"
                self.c_run(stage, "mnist", self.canonical_flags("mnist", hidden),
                           plan.naive_repeat if naive else plan.repeat, curve=True)
        # no --curve for bf16: a curve row has no precision column
        for stage in self.stages:
            if "bf16" not in (self.offered(stage, "mnist", "precision") or []):
                continue
            for hidden in plan.bf16_hidden:
                self.c_run(stage, "mnist", self.canonical_flags("mnist", hidden), plan.repeat, precision="bf16")

    def variants(self):
        plan = self.plan
        for stage, trainer, flag, wanted, hiddens in VARIANT_RUNS:
            if stage not in self.stages:
                print(f"-- variants: stage {stage} is not built", flush=True)
                continue
            offered = self.offered(stage, trainer, flag)
            # wanted None: every name offered but the first, the default (the ladder's rows)
            names = (offered or [])[1:] if wanted is None else [n for n in wanted if offered is None or n in offered]
            for name in [n for n in wanted or () if n not in names]:
                print(f"-- variants: stage {stage} {trainer} does not offer --{flag} {name}", flush=True)
            for hidden in hiddens:
                if trainer == "mnist" and hidden not in plan.mnist_hidden:
                    continue
                for name in names:
                    variant, precision = (name, None) if flag == "variant" else (None, name)
                    if (stage, trainer, hidden, variant, precision) in self.done:
                        continue  # the ladder ran it
                    self.c_run(stage, trainer, self.canonical_flags(trainer, hidden), plan.repeat,
                               variant=variant, precision=precision)

    def reference(self):
        plan, stage = self.plan, self.stages[0]
        self.run([f"build/{stage}/regression", "--reference", "--quiet", "--csv", self.csv, "--curve", self.curves]
                 + self.canonical_flags("regression"))
        for hidden, epochs in plan.reference_mnist.items():
            self.run([f"build/{stage}/mnist", "--reference", "--quiet", "--csv", self.csv, "--curve", self.curves,
                      "--hidden", hidden, "--epochs", str(epochs)])
        shortened = [f"--hidden {h}: {e} epoch{'s' if e != 1 else ''}" for h, e in plan.reference_mnist.items()
                     if e != rc.MNIST_EPOCHS]
        skipped = [h for h in rc.MNIST_HIDDEN if h not in plan.reference_mnist]
        if shortened:
            print(f"-- CPU reference, MNIST {'; '.join(shortened)} (seconds per epoch in double precision): "
                  "the tables mark those rows and compare ms/epoch only", flush=True)
        if skipped:
            print(f"-- CPU reference: not run for MNIST --hidden {' '.join(skipped)}; PyTorch --mode cpu gives "
                  "a CPU figure there", flush=True)

    def pytorch_canonical(self):
        plan = self.plan
        configs = [("regression", "regression")] + [("mnist", h) for h in plan.mnist_hidden]
        for trainer, config in configs:
            export = self.canonical_export(config)
            modes = list(plan.regression_modes if trainer == "regression" else plan.mnist_modes)
            if config in plan.bf16_hidden:
                modes += ["bf16-autocast", "bf16-cuda-graph"]
            cpu_epochs = plan.cpu_epochs.get(config)
            if cpu_epochs:
                modes.append("cpu")
            self.pytorch(trainer, export, modes, plan.pytorch_repeat[trainer], cpu_epochs=cpu_epochs, curve=True)
        if not plan.cpu_epochs:
            print("-- PyTorch --mode cpu: not in this plan", flush=True)

    # ---- the optional phases

    def breakdowns(self):
        epochs = self.plan.breakdown_epochs
        hidden = "128" if "128" in self.plan.mnist_hidden else self.plan.mnist_hidden[0]
        runs = [("regression", "", ["--points", str(rc.REGRESSION_POINTS)]), ("mnist", hidden, ["--hidden", hidden])]
        for stage in self.stages:
            for trainer, hidden, flags in runs:
                if not self.fits(f"stage {stage} {trainer} --breakdown", 3):
                    return
                # No --csv: timing each phase synchronizes, so these times are not the stage's.
                status, stdout, _ = self.run([f"build/{stage}/{trainer}", "--breakdown", "--epochs",
                                              str(epochs[trainer])] + flags, capture=True)
                phases = parse_breakdown(stdout or "")
                if status == 0 and not phases:
                    self.failures.append(f"stage {stage} {trainer} --breakdown: no phase lines in its output")
                rc.append_csv(self.breakdown, rc.BREAKDOWN_COLUMNS, [
                    {"stage": stage, "trainer": trainer, "hidden": hidden, "epochs": epochs[trainer],
                     "phase": phase, "ms": ms, "pct": pct, "device": self.device, "commit": self.commit,
                     "run_id": self.run_id} for phase, ms, pct in phases])

    def pytorch_compile(self):
        plan = self.plan
        if not plan.compile_modes and not plan.bf16_compile_modes:
            print("-- PyTorch torch.compile modes: not in this plan", flush=True)
            return
        runs = [(config, plan.compile_modes, estimate) for config, estimate in plan.compile_configs.items()]
        runs += [(config, plan.bf16_compile_modes, estimate) for config, estimate in plan.bf16_compile_configs.items()]
        for config, modes, estimate in runs:
            if not modes:
                continue
            trainer = "regression" if config == "regression" else "mnist"
            what = f"PyTorch {', '.join(modes)} on {trainer}" + (f" --hidden {config}" if trainer == "mnist" else "")
            if not self.fits(what, estimate):
                continue
            self.pytorch(trainer, self.canonical_export(config), modes, plan.pytorch_repeat[trainer])

    def size_sweep(self):
        plan = self.plan
        for stage in self.stages:
            self.sweep(f"stage {stage}", lambda n, s=stage: self.c_run(
                s, "regression", ["--points", str(n), "--epochs", str(rc.REGRESSION_EPOCHS)], 1))
        for n in plan.size_pytorch:
            if not plan.size_modes or not self.fits(f"PyTorch {','.join(plan.size_modes)} at {n:,} points",
                                                    8 + n / 10_000_000):
                continue
            self.pytorch("regression", self.export("size", "regression", ["--points", str(n)]), plan.size_modes, 1)

    def sweep(self, who, run_size):
        """run_size(n) for the plan's sizes but the canonical one, smallest first, until a failed run or a size
        predicted to pass the plan's limit or the budget."""
        first = last = None
        for n in self.plan.sizes:
            if n == rc.REGRESSION_POINTS:
                continue
            predicted = 2.0
            if last is not None:
                predicted = predict_seconds(first[1], last[0], last[1], n)
                if predicted > self.plan.size_limit_s:
                    print(f"-- {who}: size sweep stops before {n:,} points: {last[0]:,} points took "
                          f"{last[1]:.1f} s, so {n:,} would take about {predicted:.0f} s "
                          f"(limit {self.plan.size_limit_s} s per run)", flush=True)
                    return
            if not self.fits(f"{who} at {n:,} points", predicted):
                return
            start = self.budget.clock()
            status = run_size(n)
            seconds = self.budget.clock() - start
            if status != 0:
                print(f"-- {who}: size sweep stops at {n:,} points: the run failed (exit {status})", flush=True)
                return
            first = first or (n, seconds)
            last = (n, seconds)

    def persistent_sweep(self):
        """Stages 07 and 08 once at each persistent width the ladder did not run; a canonical width at the
        canonical epochs (the ladder tables must never meet a shorter run of their configuration)."""
        plan = self.plan
        stages = [s for s in rc.PERSISTENT_SWEEP_STAGES if s in self.stages]
        if not plan.persistent_widths or not stages:
            print("-- persistent sweep: " + ("not in this plan" if stages else "stages 07 and 08 are not built"),
                  flush=True)
            return
        for width in plan.persistent_widths:
            hidden = str(width)
            epochs = rc.MNIST_EPOCHS if hidden in rc.MNIST_HIDDEN else plan.persistent_epochs
            for stage in stages:
                if (stage, "mnist", hidden, None, None) in self.done:
                    continue
                if not self.fits(f"persistent sweep: stage {stage} at --hidden {hidden}", 2):
                    return
                self.c_run(stage, "mnist", ["--hidden", hidden, "--epochs", str(epochs)], 1)

    def width_sweep(self):
        plan, stage = self.plan, self.stages[-1]
        offers_bf16 = plan.width_bf16 and "bf16" in (self.offered(stage, "mnist", "precision") or [])
        for width in plan.widths:
            if not self.fits(f"width sweep at {width},{width}", 4 + 8 * bool(plan.width_modes)):
                return
            hidden = f"{width},{width}"
            flags = ["--hidden", hidden, "--epochs", str(plan.width_epochs)]
            self.c_run(stage, "mnist", flags, 1)
            if offers_bf16:
                self.c_run(stage, "mnist", flags, 1, precision="bf16")
            if plan.width_modes:
                self.pytorch("mnist", self.export("width", "mnist", flags), plan.width_modes, 1)


def move_aside(results_dir, slug):
    """Moves an earlier run's files for this GPU to build/bench/previous/<time>/."""
    names = [f"{slug}.csv", f"{slug}-curves.csv", f"{slug}-curves.csv.gz", f"{slug}-breakdown.csv"]
    names += [f"{slug}-{figure}.png" for figure in plots.FIGURES]
    old = [n for n in names if os.path.exists(os.path.join(results_dir, n))]
    if not old:
        return
    target = os.path.join("build", "bench", "previous", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(target, exist_ok=True)
    for name in old:
        shutil.move(os.path.join(results_dir, name), os.path.join(target, name))
    print(f"run_bench: moved the last run's {len(old)} files for this GPU to {target}/")


def run_provenance(root, commit=None, dirty=None, environ=None):
    """(commit, dirty, run id, problem), set in environ for every program the run starts; problem: a commit
    given that is not the one the C programs were built at (build/.commit), else None."""
    environ = os.environ if environ is None else environ
    commit, dirty, source = provenance.resolve_commit(root, commit, dirty, environ)
    built, _ = provenance.build_record(root)
    if source == "given" and built and built != commit:
        return commit, dirty, "", (f"told commit {commit}, but the C programs were built at {built} (build/.commit): "
                                   f"run make all GIT_COMMIT_ID={commit} first (make bench does)")
    run_id = provenance.new_run_id("bench-")
    environ[provenance.RUN_ID_ENV] = run_id
    environ[provenance.COMMIT_ENV] = commit
    environ[provenance.DIRTY_ENV] = dirty
    return commit, dirty, run_id, None


def built_stages():
    """The stages (NN) of the working folder with both trainers built (01-vector-add builds none)."""
    return [nn for nn in rc.stage_dirs(".")
            if all(os.access(f"build/{nn}/{t}", os.X_OK) for t in ("regression", "mnist"))]


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run every measurement of make bench (see tools/bench.mk).")
    parser.add_argument("--bench", choices=sorted(PLANS), default="full", help="which plan (default: full)")
    parser.add_argument("--results", default="results", help="folder of the CSV files (default: results)")
    parser.add_argument("--budget-s", metavar="S", help="wall-clock budget in seconds (default: BENCH_BUDGET_S, "
                        + ", ".join(f"else {p.budget_s} s for {n}" for n, p in sorted(PLANS.items())) + ")")
    parser.add_argument("--commit", help="the commit every row names (default: GIT_COMMIT_ID, else build/.commit, "
                        "else what make commit-info says); give it on a copy of the tree without .git")
    parser.add_argument("--dirty", choices=("0", "1"), help="whether that tree had uncommitted changes "
                        "(default: GIT_DIRTY, else build/.dirty, else make commit-info)")
    args = parser.parse_args(argv)
    plan = PLANS[args.bench]
    try:
        seconds = budget_seconds(plan, args.budget_s)
    except ValueError as err:
        parser.error(f"--budget-s / BENCH_BUDGET_S: {err}")
    os.chdir(provenance.REPO_ROOT)

    names = (provenance.output_of(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]) or "").splitlines()
    if not names:
        print("error: no GPU found (nvidia-smi failed): make bench needs a GPU machine", file=sys.stderr)
        return 4
    name = names[0].strip()
    stages = built_stages()
    if not stages:
        print("error: no built stage: run make all first", file=sys.stderr)
        return 2
    slug = rc.gpu_slug(name)
    commit, dirty, run_id, problem = run_provenance(provenance.REPO_ROOT, args.commit, args.dirty)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    os.makedirs(args.results, exist_ok=True)
    move_aside(args.results, slug)
    bench = Bench(plan, args.results, stages, slug, Budget(seconds), name, commit, run_id)
    print(f"run_bench: run {run_id}, commit {commit}{' (dirty)' if dirty == '1' else ''}", flush=True)
    planned = sum(plan.estimate_s.values())
    print(f"run_bench: {args.bench} plan on {name}, stages {' '.join(stages)}, into {bench.csv}; budget "
          f"{seconds:.0f} s, planned about {planned} s (H200 estimates: "
          + ", ".join(f"{k} {v}" for k, v in plan.estimate_s.items()) + ")", flush=True)

    phases = {"vector add": bench.vector_add, "ladder": bench.ladder, "variants": bench.variants,
              "reference": bench.reference, "pytorch": bench.pytorch_canonical, "breakdown": bench.breakdowns,
              "persistent sweep": bench.persistent_sweep, "compile": bench.pytorch_compile,
              "size sweep": bench.size_sweep, "width sweep": bench.width_sweep}
    for phase in ESSENTIAL + OPTIONAL:
        bench.phase(phase, phases[phase], optional=phase in OPTIONAL)

    rc.compress_curves(bench.curves)
    print(f"\n== run_bench: {args.bench} plan, {bench.budget.elapsed():.0f} s of a {seconds:.0f} s budget")
    print("  measured  planned  phase")
    for phase, estimate, took in bench.phase_seconds:
        print(f"  {'skipped' if took is None else f'{took:7.1f} s'}  {estimate:5} s  {phase}")
    if bench.skipped:
        print(f"{len(bench.skipped)} left out for the budget (raise BENCH_BUDGET_S to run them):")
        for what in bench.skipped:
            print(f"  {what}")
    if bench.failures:
        print(f"{len(bench.failures)} run(s) failed:", file=sys.stderr)
        for failure in bench.failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
