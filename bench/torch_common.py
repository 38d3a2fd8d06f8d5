"""bench/torch_common.py: what the two PyTorch baselines share: modes, command line, clock, warm-up and repeats,
the parameter update, and the rows they append (bench/results_csv.py).

Timing as docs/DESIGN.md, "Timing": e2e from the training data in plain CPU tensors to the trained parameters back
on the host, loop with the data on the device, both by CUDA events after an untimed warm-up. What the warm-up
prepares once per training is the row's setup_ms, as the C stages' setup: the capture (cuda-graph modes) or the
compilation (compile modes); eager modes and cpu prepare nothing (setup 0).
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

import provenance
import results_csv

MODES = results_csv.PYTORCH_MODES
EXIT_USAGE, EXIT_DATA, EXIT_CUDA = 2, 3, 4  # common/exit_codes.h


def fail(message, code):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def parse_args(trainer, modes):
    parser = argparse.ArgumentParser(
        description=f"PyTorch baseline of the {trainer} trainer, fed the bytes that "
                    f"build/NN/{trainer} --export DIR writes.")
    parser.add_argument("--export-json", required=True, metavar="PATH",
                        help=f"the JSON file written by build/NN/{trainer} --export DIR")
    parser.add_argument("--mode", default="eager",
                        help=f"one of {', '.join(modes)}; a comma-separated list; or all (default: eager)")
    parser.add_argument("--csv", metavar="FILE", help="append one result row per mode (common/report.h schema)")
    parser.add_argument("--curve", metavar="FILE", help="append the loss curves of each mode (long format)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="timed runs per mode; the row gives their medians (default: 1)")
    parser.add_argument("--epochs", type=int, metavar="N",
                        help="train N epochs instead of the export's (MNIST: at most the export's)")
    parser.add_argument("--cpu-epochs", type=int, metavar="N",
                        help="--mode cpu only: train N epochs (default: as the other modes); the CPU mode is "
                             "timed once, whatever --repeat says")
    args = parser.parse_args()
    args.modes = list(modes) if args.mode == "all" else [m.strip() for m in args.mode.split(",") if m.strip()]
    if not args.modes or not set(args.modes) <= set(modes):
        parser.error(f"--mode {args.mode}: valid modes are {', '.join(modes)}, a comma-separated list, or all")
    for flag, value in (("--repeat", args.repeat), ("--epochs", args.epochs), ("--cpu-epochs", args.cpu_epochs)):
        if value is not None and value < 1:
            parser.error(f"{flag} {value}: must be at least 1")
    if any(m != "cpu" for m in args.modes) and not torch.cuda.is_available():
        fail("no CUDA device visible to PyTorch; --mode cpu runs on the CPU", EXIT_CUDA)
    return args


def load_export(args, trainer):
    """The export JSON of args.export_json ("dir": its folder); args.epochs and args.cpu_epochs default to its."""
    path = args.export_json
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as err:
        fail(f"cannot read {path}: {err}; write it with build/NN/{trainer} --export DIR", EXIT_DATA)
    if spec.get("trainer") != trainer:
        fail(f"{path} describes trainer {spec.get('trainer')!r}, not {trainer!r}", EXIT_DATA)
    spec["dir"] = os.path.dirname(os.path.abspath(path))
    args.epochs = args.epochs or spec["epochs"]
    args.cpu_epochs = args.cpu_epochs or args.epochs
    return spec


def read_array(spec, key, dtype, count):
    """The raw little-endian array of the file spec[key], checked to hold count values."""
    path = os.path.join(spec["dir"], spec[key])
    try:
        array = np.fromfile(path, dtype=dtype)
    except OSError as err:
        fail(f"cannot read {path}: {err}; export again with --export", EXIT_DATA)
    if array.size != count:
        fail(f"{path} holds {array.size} values, expected {count}: export again with --export", EXIT_DATA)
    return torch.from_numpy(array)


# ----------------------------------------------------------------------------
# devices and rows

def describe_device(mode):
    """device, cc, cuda, driver columns: the GPU's, or the CPU's name for --mode cpu."""
    if mode == "cpu":
        try:
            with open("/proc/cpuinfo") as f:
                names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        except OSError:
            names = []
        return {"device": names[0] if names else "CPU", "cc": "", "cuda": "", "driver": ""}
    major, minor = torch.cuda.get_device_capability()
    # The driver's CUDA version ("13.0"), as cudaDriverGetVersion gives it to the C drivers.
    get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
    version = get_driver() if get_driver else 0
    return {"device": torch.cuda.get_device_name(), "cc": f"{major}.{minor}", "cuda": torch.version.cuda or "",
            "driver": f"{version // 1000}.{version % 1000 // 10}" if version else ""}


def fmt(value, spec):
    return "" if value is None else format(value, spec)


def report_row(args, row, points):
    """Prints the result row, then appends it and the loss curves' (series, index, value) points where asked."""
    fields = ("variant", "points", "hidden", "epochs", "setup_ms", "e2e_ms", "loop_ms", "ms_per_epoch", "h2d_ms",
              "train_loss", "test_loss", "test_acc", "w", "b", "graph_breaks", "recompiles")
    print("pytorch " + row["trainer"] + "  " + "  ".join(f"{k} {row[k]}" for k in fields if row.get(k)), flush=True)
    if args.csv:
        results_csv.append_csv(args.csv, results_csv.RESULT_COLUMNS, [row])
    if args.curve and points:  # each point names the trainer, mode, device, commit and run of its row
        named = {key: row.get(key) for key in ("stage", "trainer", "variant", "hidden", "device", "commit", "run_id")}
        results_csv.append_csv(args.curve, results_csv.CURVE_COLUMNS, [
            {"series": series, "index": index, "value": fmt(value, ".8g"), **named} for series, index, value in points])


# ----------------------------------------------------------------------------
# modes

def compiled(mode, fn):
    """fn as the mode runs it; dynamic=False: one specialized graph per shape, as the C trainers have fixed sizes.
    A compiled function must see the same shapes, strides and offsets every call (a new one is a recompile)."""
    if not compiling(mode):
        return fn
    return torch.compile(fn, mode="max-autotune" if max_autotune(mode) else None, dynamic=False)


compiling = results_csv.mode_compiles
max_autotune = results_csv.mode_max_autotune
captured = results_csv.mode_captured
precision_of = results_csv.mode_precision


def keep_addresses(mode, tensors):
    """max-autotune's CUDA Graph Trees copy every input whose address may change: tensors marked static are not."""
    if max_autotune(mode):
        for t in tensors:
            torch._dynamo.mark_static_address(t)


def autocast(mode):
    """The bf16-* modes: matrix products in bf16 with fp32 parameters; no autocast cache in a captured graph (a
    cached cast would be a tensor of the capture that the next replay does not recompute)."""
    if precision_of(mode) == "bf16":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not captured(mode))
    return contextlib.nullcontext()


@torch.no_grad()
def sgd_update(params, lr):
    """p -= lr * grad: torch.optim.SGD(params, lr)'s multi-tensor step, written out so that every PyTorch version
    can capture it in a CUDA graph and compile it."""
    torch._foreach_add_(params, [p.grad for p in params], alpha=-lr)


def mark_step(mode):
    """max-autotune: tells CUDA Graph Trees that a new iteration begins (the last one's outputs may go)."""
    if max_autotune(mode):
        torch.compiler.cudagraph_mark_step_begin()


def reset_compiler(mode):
    """Drops compiled code and counters around a compile mode: no mode reuses or counts another's compilation."""
    if compiling(mode):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()


def compile_counts():
    """(graphs compiled, recompiles, graph breaks, {reason: count}) of torch._dynamo's counters, or None."""
    try:
        counters = torch._dynamo.utils.counters
        reasons = {f"recompile: {k}": v for k, v in counters["recompiles"].items()}
        reasons.update({f"graph break: {k}": v for k, v in counters["graph_break"].items()})
        return (int(counters["stats"]["unique_graphs"]), int(sum(counters["recompiles"].values())),
                int(sum(counters["graph_break"].values())), reasons)
    except Exception:  # a reporting aid: never the reason a run fails
        return None


def print_compile_counts(mode, after_warmup):
    """Prints what torch._dynamo compiled for a compile mode; returns the row's audit columns (a graph compiled
    during the timed runs counts as a recompile; empty without counters, which makes the row not clean)."""
    if not compiling(mode):
        return {}
    now = compile_counts()
    if now is None:
        print(f"  {mode}: torch._dynamo counters not available in torch {torch.__version__}: the row is "
              "not audited, so not shown as a result", flush=True)
        return {"graph_breaks": "", "recompiles": ""}
    graphs, recompiles, breaks, reasons = now
    during = max(graphs - after_warmup[0], 0) if after_warmup else 0
    verdict = "clean" if recompiles == 0 and breaks == 0 and during == 0 else "NOT CLEAN"
    print(f"  {mode}: torch._dynamo: {graphs} graphs compiled, {recompiles} recompiles, {breaks} graph breaks, "
          f"{during} graphs compiled during the timed runs: {verdict}", flush=True)
    for reason, count in list(reasons.items())[:5]:
        print(f"    {count} x {reason}", flush=True)
    return {"graph_breaks": str(breaks), "recompiles": str(recompiles + during)}


# ----------------------------------------------------------------------------
# clocks

class Clock:
    """The marks of a timed run: e2e start, loop start, each epoch's end, e2e stop. CUDA events on the current
    stream; for --mode cpu the host clock (no upload: e2e is the loop, h2d empty)."""

    def __init__(self, epochs, cuda):
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(epochs + 3)] if cuda else None
        self.marks = [None] * (epochs + 3)

    def mark(self, index):
        if self.events:
            self.events[index].record()
        else:
            self.marks[index] = time.perf_counter()

    def start(self):
        self.mark(0)

    def loop_start(self):
        self.mark(1)

    def epoch_end(self, epoch):
        self.mark(2 + epoch)

    def stop(self):
        self.mark(-1)

    def result(self):
        """(e2e, loop, h2d, [per-epoch]) in ms, as common/timing.c computes them."""
        if self.events:
            self.events[-1].synchronize()
            ms = lambda a, b: self.events[a].elapsed_time(self.events[b])  # noqa: E731
        else:
            ms = lambda a, b: 1e3 * self.marks[b] - 1e3 * self.marks[a]  # noqa: E731
        last = len(self.marks) - 1
        epochs = [ms(i, i + 1) for i in range(1, last - 1)]
        return ms(0, last), ms(1, last - 1), ms(0, 1) if self.events else None, epochs


# ----------------------------------------------------------------------------
# one mode of one trainer

class Baseline:
    """A trainer in one mode, with self.params and self.lr; subclasses provide upload() (host data and initial
    parameters to the device), train(n, clock or None), download() and graph_loss_of() (the captured step's loss)."""

    warmup_epochs = 1

    def __init__(self, mode, epochs):
        self.mode = mode
        self.epochs = epochs
        self.device = torch.device("cpu" if mode == "cpu" else "cuda")

    def synchronize(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def capture(self, warmup_steps=3):
        """Records the training step into self.graph (loss: self.graph_loss), the whole-network capture of PyTorch's
        CUDA-graph documentation: eager steps on a side stream first, gradients None so that the captured backward
        allocates them in the graph's pool. Every tensor graph_loss_of() reads must outlive the graph (an
        attribute, never a local); the warm-up steps change the parameters: upload them again."""
        def step():
            with autocast(self.mode):
                loss = self.graph_loss_of()
            loss.backward()
            sgd_update(self.params, self.lr)
            return loss.detach()

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup_steps):
                for p in self.params:
                    p.grad = None
                step()
        torch.cuda.current_stream().wait_stream(stream)
        for p in self.params:
            p.grad = None
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=stream):
            self.graph_loss = step()
        torch.cuda.synchronize()

    def warm_up(self):
        """Untimed capture or compilation and warmup_epochs epochs (none for cpu); returns (capture ms, warm-up
        training ms, warm-up epochs) for the row's setup_ms."""
        if self.mode == "cpu":
            return 0.0, 0.0, 0
        self.upload()
        capture_ms = 0.0
        if captured(self.mode):
            self.synchronize()
            t0 = time.perf_counter()
            self.capture()
            self.synchronize()
            capture_ms = 1e3 * (time.perf_counter() - t0)
            self.upload()  # capturing ran a few steps: start from the initial parameters again
        self.synchronize()
        epochs = min(self.warmup_epochs, self.epochs)
        t0 = time.perf_counter()
        self.train(epochs, None)
        self.synchronize()
        train_ms = 1e3 * (time.perf_counter() - t0)
        self.upload()  # and leave them reset (each timed run uploads them again too)
        self.synchronize()
        return capture_ms, train_ms, epochs

    def timed_run(self):
        clock = Clock(self.epochs, cuda=self.mode != "cpu")
        clock.start()
        self.upload()
        clock.loop_start()
        self.train(self.epochs, clock)
        self.download()
        clock.stop()
        return clock.result()


def measure(baseline, repeat):
    """Warm-up, then repeat timed runs (one for cpu): the row's timing columns, formatted (medians, min / max,
    repeats, setup_ms) and a compile mode's audit."""
    t0 = time.perf_counter()
    capture_ms, warmup_train_ms, warmup_epochs = baseline.warm_up()
    what = {"cuda-graph": " (capture)", "bf16-cuda-graph": " (capture)", "cpu": " (none)"}.get(
        baseline.mode, " (compilation and autotuning)" if max_autotune(baseline.mode) else
        " (compilation)" if compiling(baseline.mode) else "")
    print(f"  {baseline.mode}: warm-up{what} {time.perf_counter() - t0:.1f} s, not timed", flush=True)
    after_warmup = compile_counts() if compiling(baseline.mode) else None
    t0 = time.perf_counter()
    runs = [baseline.timed_run() for _ in range(1 if baseline.mode == "cpu" else repeat)]
    print(f"  {baseline.mode}: {len(runs)} timed run(s) {time.perf_counter() - t0:.1f} s", flush=True)
    audit = print_compile_counts(baseline.mode, after_warmup)
    h2d = [r[2] for r in runs if r[2] is not None]
    e2e, loop, epoch = ([r[0] for r in runs], [r[1] for r in runs], [statistics.median(r[3]) for r in runs])
    per_epoch = statistics.median(epoch)
    setup = results_csv.pytorch_setup_ms(baseline.mode, capture_ms, warmup_train_ms, warmup_epochs, per_epoch)
    if setup:
        print(f"  {baseline.mode}: setup {setup:.1f} ms (the row's setup_ms)", flush=True)
    timing = {"setup_ms": setup, "e2e_ms": statistics.median(e2e), "loop_ms": statistics.median(loop),
              "ms_per_epoch": per_epoch, "h2d_ms": statistics.median(h2d) if h2d else None}
    for name, values in (("e2e", e2e), ("loop", loop), ("epoch", epoch)):
        timing.update({f"{name}_min_ms": min(values), f"{name}_max_ms": max(values)})
    return {**{key: fmt(value, ".4f") for key, value in timing.items()}, "repeats": str(len(runs)), **audit}


def result_row(trainer, baseline, timing, **columns):
    """A result row of stage pytorch; columns holds the trainer's own fields (already formatted)."""
    mode = baseline.mode
    return {"stage": results_csv.PYTORCH, "trainer": trainer, "variant": mode, "precision": precision_of(mode),
            "epochs": str(baseline.epochs), "lr": fmt(baseline.lr, "g"),
            "torch": torch.__version__, "threads": str(torch.get_num_threads()) if mode == "cpu" else "",
            **describe_device(mode), **provenance.columns(), **timing, **columns}
