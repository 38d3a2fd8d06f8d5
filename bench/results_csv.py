"""bench/results_csv.py: the one reader of the CSV files of results/, and the rules for choosing rows.

Standard library only. Per GPU (<slug>: gpu_slug), results/ holds <slug>.csv (RESULT_COLUMNS), <slug>-curves.csv.gz
(CURVE_COLUMNS) and <slug>-breakdown.csv (BREAKDOWN_COLUMNS); a file of another header is refused.
"""

import collections
import csv
import gzip
import math
import os
import re

SCHEMA_VERSION = 2  # common/report.h REPORT_CSV_SCHEMA

# common/report.h REPORT_CSV_HEADER; tests/bench/test_bench.py checks that the two stay equal.
RESULT_COLUMNS = (
    "stage", "trainer", "variant", "points", "hidden", "batch", "epochs", "lr", "precision",
    "device", "cc", "cuda", "driver", "threads", "torch", "setup_ms", "e2e_ms", "loop_ms", "ms_per_epoch",
    "h2d_ms", "repeats", "setup_min_ms", "setup_max_ms", "e2e_min_ms", "e2e_max_ms", "loop_min_ms",
    "loop_max_ms", "epoch_min_ms", "epoch_max_ms", "train_loss", "test_loss", "test_acc", "w", "b",
    "graph_breaks", "recompiles", "commit", "dirty", "run_id", "utc",
)
# common/report.h REPORT_CURVE_HEADER
CURVE_COLUMNS = ("stage", "trainer", "variant", "hidden", "series", "index", "value", "device", "commit", "run_id")
BREAKDOWN_COLUMNS = ("stage", "trainer", "hidden", "epochs", "phase", "ms", "pct", "device", "commit", "run_id")

# docs/DESIGN.md, "Canonical configurations": the ladder tables show exactly these.
REGRESSION_POINTS = 5_000_000
REGRESSION_EPOCHS = 200
MNIST_HIDDEN = ("0", "128", "1024,1024")
MNIST_EPOCHS = 10
MNIST_BATCH = 128
MNIST_TRAIN = 60_000  # images in the MNIST (and Fashion-MNIST) training set
MNIST_PIXELS = 784
MNIST_CLASSES = 10

# PyTorch baselines (stage "pytorch"), in the order the tables list them; bf16-*: under torch.autocast(bfloat16).
PYTORCH_MODES = ("eager", "compile-default", "compile-max-autotune", "cuda-graph", "bf16-autocast",
                 "bf16-cuda-graph", "bf16-compile-max-autotune", "cpu")

# PHASE_NAMES of common/timing.c: the phases of a --breakdown run, in order.
PHASES = ("h2d", "forward", "loss", "backward", "update", "eval", "d2h")

REFERENCE = "cpu-reference"
PYTORCH = "pytorch"

# The precisions a ladder table shows for a stage; others (tf32) appear in its variants table only.
LADDER_PRECISIONS = ("fp32", "bf16")


class SchemaError(Exception):
    """A CSV file whose header is not the one this module expects."""


def gpu_slug(name):
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': the file-name stem of a GPU's results."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "unknown-gpu"


def open_text(path):
    """path for reading as text: gzip-compressed when its name ends in .gz (the committed loss curves)."""
    if path.endswith(".gz"):
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return open(path, newline="", encoding="utf-8")


def compress_curves(path):
    """Folds the plain curve file path into path + ".gz" (created, or extended without a second header)."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        lines = f.readlines()
    if os.path.exists(path + ".gz"):
        with gzip.open(path + ".gz", "rt", newline="") as f:
            older = f.readlines()
        if older and lines and older[0] != lines[0]:
            raise SchemaError(f"{path}.gz has another header than {path}: move it aside")
        lines = older + lines[1:]
    with gzip.open(path + ".gz", "wt", newline="") as f:
        f.writelines(lines)
    os.remove(path)


def read_header(path):
    with open_text(path) as f:
        return tuple(next(csv.reader(f), ()))


def read_rows(path, columns=None):
    """(header, rows) of a CSV file (plain or .gz), blank lines skipped, each row a defaultdict(str). With
    columns: SchemaError unless the header is columns' and every line has its fields."""
    with open_text(path) as f:
        reader = csv.reader(f)
        header = tuple(next(reader, ()))
        if columns is not None and schema_of(header, columns) is None:
            raise SchemaError(f"{path}: header {','.join(header)!r} is not {','.join(columns)!r}")
        rows = []
        for line, values in enumerate(reader, start=2):
            if not "".join(values).strip():
                continue
            if columns is not None and len(values) != len(header):
                raise SchemaError(f"{path}:{line}: {len(values)} fields, expected {len(header)}")
            rows.append(collections.defaultdict(str, zip(header, values)))
    return header, rows


def read_csv(path, columns):
    """Every row of path as a dict keyed by columns (read_rows, schema checked)."""
    return [{c: row[c] for c in columns} for row in read_rows(path, columns)[1]]


def as_float(value):
    """A field (or a number) as a float, 0 where it is no number (the reports' arithmetic, as awk's)."""
    try:
        return float(value)
    except ValueError:
        return 0.0


def report_ms(value):
    """Milliseconds as common/report.c prints them (4 significant digits, none below 1 from 1000 on), or "-"."""
    if value in ("", None):
        return "-"
    return "%.0f" % as_float(value) if as_float(value) >= 1000 else "%.4g" % as_float(value)


def report_num(text):
    return "-" if text == "" else "%.6g" % as_float(text)


def schema_of(header, columns):
    """SCHEMA_VERSION for columns' header, None for anything else."""
    return SCHEMA_VERSION if tuple(header) == tuple(columns) else None


def append_csv(path, columns, rows):
    """Appends rows (dicts; missing keys and None are empty fields), the header first in a new file."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    if not new and read_header(path) != tuple(columns):
        raise SchemaError(f"{path}: exists with another header; move it aside")
    with open(path, "a", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        if new:
            writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else row[c] for c in columns])


def result_files(results_dir, columns=RESULT_COLUMNS):
    """The files of results_dir (sorted) whose header is columns' (of any schema read_rows reads)."""
    names = sorted(os.listdir(results_dir)) if os.path.isdir(results_dir) else []
    paths = [os.path.join(results_dir, name) for name in names if name.endswith(".csv")]
    return [p for p in paths if os.path.isfile(p) and schema_of(read_header(p), columns)]


def load_datasets(results_dir, root, columns=RESULT_COLUMNS):
    """[(source, rows)] of every file result_files lists, source relative to root where it lies inside it."""
    datasets = []
    for path in result_files(results_dir, columns):
        rel = os.path.relpath(path, root)
        datasets.append((path if rel.startswith("..") else rel, read_csv(path, columns)))
    return datasets


def number(row, column):
    """A numeric field as a float, or None when it is empty or not a finite number."""
    try:
        value = float(row.get(column, ""))
    except ValueError:  # empty too
        return None
    return value if math.isfinite(value) else None


def three_digits(value):
    """Three significant digits, thousands separated, never an exponent: 12,345 / 80.0 / 0.400 / 0.00523."""
    if value >= 100:
        return f"{value:,.0f}"
    return "0" if value <= 0 else f"{value:.{max(1, 2 - math.floor(math.log10(value)))}f}"


def integer(row, column):
    value = number(row, column)
    return None if value is None else int(value)


# ----------------------------------------------------------------------------
# model sizes and throughput

def mnist_sizes(hidden):
    """'1024,1024' -> [784, 1024, 1024, 10]; '0' -> [784, 10]."""
    layers = [int(h) for h in hidden.split(",") if h.strip() and int(h) > 0]
    return [MNIST_PIXELS] + layers + [MNIST_CLASSES]


def mnist_params(hidden):
    sizes = mnist_sizes(hidden)
    return sum(a * b + b for a, b in zip(sizes, sizes[1:]))


def mnist_flops_per_sample(hidden):
    """The training GEMMs' FLOPs for one sample: 2 a parameter forward, 2 for its gradient and 2 for the
    gradient of its input, except the first layer's weights, whose input (the image) needs no gradient."""
    sizes = mnist_sizes(hidden)
    return 6 * mnist_params(hidden) - 2 * sizes[0] * sizes[1]


def regression_train_points(points):
    return points * 4 // 5  # the first 80% train (common/data.h)


def throughput(row):
    """(value or None, unit) over the loop time: regression GB/s of x and y read once an epoch; MNIST GFLOP/s of
    the training GEMMs, samples per epoch = (60,000 // batch) * batch."""
    epochs, loop_ms = integer(row, "epochs"), number(row, "loop_ms")
    if row["trainer"] == "regression":
        points = integer(row, "points")
        if None in (epochs, loop_ms, points) or loop_ms <= 0:
            return None, "GB/s"
        return epochs * regression_train_points(points) * 8 / (loop_ms * 1e-3) / 1e9, "GB/s"
    batch = integer(row, "batch")
    if None in (epochs, loop_ms, batch) or loop_ms <= 0 or batch <= 0:
        return None, "GFLOP/s"
    samples = MNIST_TRAIN // batch * batch
    return mnist_flops_per_sample(row["hidden"]) * samples * epochs / (loop_ms * 1e-3) / 1e9, "GFLOP/s"


# ----------------------------------------------------------------------------
# variants: a stage's rows in its default variant are the ladder's; the others are attribution rows

VARIANT_LIST = re.compile(r"const\s+char\s*\*\s*const\s+(REGRESSION|MNIST)_VARIANTS\s*\[\s*\]\s*=\s*\{\s*\"([^\"]+)\"")
STAGE_DIR = re.compile(r"\d\d-[\w-]+")  # a stage folder: NN-name


def stage_dirs(root):
    """{'01': '01-vector-add', ...}: the stage folders of root, in order."""
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    return {name[:2]: name for name in names if STAGE_DIR.fullmatch(name) and os.path.isdir(os.path.join(root, name))}


def source_default_variants(root):
    """{(stage, trainer): the first name of the VARIANT_LIST in root/NN-*/<trainer>.cu}, the default
    (common/trainer.h)."""
    found = {}
    for stage, name in stage_dirs(root).items():
        for trainer in ("regression", "mnist"):
            try:
                with open(os.path.join(root, name, f"{trainer}.cu"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            listed = VARIANT_LIST.search(text)
            if listed and listed.group(1).lower() == trainer:
                found[(stage, trainer)] = listed.group(2)
    return found


def variant_defaults(rows, known=None):
    """{(stage, trainer): default variant} of the GPU stages in rows: known's (source_default_variants) where its
    name has rows, else the first row's (make bench runs every stage's default before its other variants)."""
    known, seen = known or {}, {}
    for row in rows:
        if row["stage"] not in (PYTORCH, REFERENCE):
            seen.setdefault((row["stage"], row["trainer"]), []).append(row["variant"])
    return {key: known[key] if known.get(key) in names else names[0] for key, names in seen.items()}


def is_default_variant(row, defaults):
    """True for the reference, PyTorch and a stage's default variant (a stage not in defaults: any)."""
    if row["stage"] in (PYTORCH, REFERENCE):
        return True
    key = (row["stage"], row["trainer"])
    return key not in defaults or row["variant"] == defaults[key]


# ----------------------------------------------------------------------------
# the persistent sweep (bench/run_bench.py): MNIST with one hidden layer of each width, stage 07 against 08

PERSISTENT_SWEEP_WIDTHS = (0, 32, 64, 128, 256, 512, 1024)  # 0: --hidden 0, no hidden layer
PERSISTENT_SWEEP_STAGES = ("07", "08")


def one_layer_width(hidden):
    """'256' -> 256, '0' -> 0 (no hidden layer); None for two or more hidden layers."""
    return int(hidden) if hidden.strip().isdigit() else None


def persistent_sweep(rows, defaults=None):
    """{width: {stage: newest row}}: MNIST rows of the PERSISTENT_SWEEP_STAGES with at most one hidden layer, batch
    128, fp32, default variants, any epochs, of the newest run that measured stage 08 ({} when none did)."""
    if defaults is None:
        defaults = variant_defaults(rows)
    kept = [row for row in rows
            if row["stage"] in PERSISTENT_SWEEP_STAGES and row["trainer"] == "mnist"
            and integer(row, "batch") == MNIST_BATCH and (row["precision"] or "fp32") == "fp32"
            and one_layer_width(row["hidden"]) is not None and is_default_variant(row, defaults)
            and number(row, "ms_per_epoch") is not None]
    eights = [row for row in kept if row["stage"] == "08"]
    if not eights:
        return {}
    newest_run = eights[-1].get("run_id", "")
    sweep = {}
    for row in kept:
        if row.get("run_id", "") == newest_run:
            sweep.setdefault(one_layer_width(row["hidden"]), {})[row["stage"]] = row
    return dict(sorted(sweep.items()))


# ----------------------------------------------------------------------------
# choosing rows: one per "entry" (a stage at a precision, the reference, a PyTorch mode)

class Config:
    """One canonical configuration: the rows of one ladder table."""

    def __init__(self, trainer, hidden=None):
        self.trainer = trainer
        self.hidden = hidden
        self.epochs = REGRESSION_EPOCHS if trainer == "regression" else MNIST_EPOCHS

    def matches(self, row):
        """Same problem, whatever the number of epochs (entries prefer the canonical epochs)."""
        if row["trainer"] != self.trainer:
            return False
        if self.trainer == "regression":
            return integer(row, "points") == REGRESSION_POINTS
        return row["hidden"] == self.hidden and integer(row, "batch") == MNIST_BATCH

    def title(self):
        if self.trainer == "regression":
            return (f"Regression: {REGRESSION_POINTS:,} points ({regression_train_points(REGRESSION_POINTS):,} "
                    f"train), full-batch gradient descent, {self.epochs} epochs")
        sizes = "-".join(str(s) for s in mnist_sizes(self.hidden))
        return (f"MNIST, --hidden {self.hidden}: MLP {sizes} ({mnist_params(self.hidden):,} parameters), "
                f"batch {MNIST_BATCH}, {self.epochs} epochs")


def canonical_configs():
    return [Config("regression")] + [Config("mnist", h) for h in MNIST_HIDDEN]


class Entry:
    """One line of a table: which run it is (kind, stage, precision or PyTorch mode) and its row."""

    def __init__(self, row, canonical_epochs):
        self.row = row
        self.stage = row["stage"]
        self.kind = {PYTORCH: "pytorch", REFERENCE: "reference"}.get(self.stage, "stage")
        self.precision = row["precision"] or "fp32"
        self.epochs = integer(row, "epochs")
        self.comparable = self.epochs == canonical_epochs  # ran the configuration's epochs
        self.e2e = number(row, "e2e_ms")
        self.loop = number(row, "loop_ms")
        self.ms_per_epoch = number(row, "ms_per_epoch")
        self.setup = number(row, "setup_ms")
        self.wall = wall_ms(row)

    @property
    def is_ladder_stage(self):
        """An fp32 GPU stage: a rung of the ladder."""
        return self.kind == "stage" and self.precision == "fp32"

    def label(self, stage_names=None):
        text = row_label(self.row, stage_names)
        if not self.comparable and self.epochs is not None:
            text += f" ({self.epochs} epoch{'s' if self.epochs != 1 else ''})"
        return text


def row_label(row, stage_names=None):
    """A row in a few words: 'CPU reference', 'PyTorch eager', '05' (or its name in stage_names), '06 · bf16'."""
    if row["stage"] == PYTORCH:
        return f"PyTorch {row['variant']}"
    if row["stage"] == REFERENCE:
        return "CPU reference"
    precision = row["precision"] or "fp32"
    text = (stage_names or {}).get(row["stage"], row["stage"])
    return text if precision == "fp32" else f"{text} · {precision}"


def _order(entry):
    if entry.kind == "reference":
        return (0,)
    if entry.kind == "stage":
        return (1, entry.precision != "fp32", entry.precision, entry.stage)
    variant = entry.row["variant"]
    rank = PYTORCH_MODES.index(variant) if variant in PYTORCH_MODES else len(PYTORCH_MODES)
    return (2, rank, variant)


def _newest(rows, config, key_of):
    """{key: Entry}: per key the newest (last) row, a row that ran the configuration's epochs winning
    over any that did not (e.g. a 1-epoch CPU reference, or a shorter sweep run of the same model)."""
    chosen = {}
    for row in rows:
        key = key_of(row) if config.matches(row) else None
        if key is None:
            continue
        entry = Entry(row, config.epochs)
        if entry.comparable or key not in chosen or not chosen[key].comparable:
            chosen[key] = entry
    return chosen


def select_entries(rows, config, defaults=None):
    """The entries of config's ladder table: CPU reference, fp32 stages, bf16 stages, PyTorch. Stages in their
    default variant at the LADDER_PRECISIONS, torch.compile rows only when clean; the newest row each (_newest)."""
    if defaults is None:
        defaults = variant_defaults(rows)

    def key_of(row):
        if row["stage"] not in (PYTORCH, REFERENCE) and (
                not is_default_variant(row, defaults) or (row["precision"] or "fp32") not in LADDER_PRECISIONS):
            return None
        if not compile_audit(row)[0]:
            return None  # a torch.compile row that is not clean is no result (compile_audit)
        # rows of one identity are repeats of one entry: a PyTorch mode, the reference, a stage at a precision
        return (row["stage"], row["variant"] if row["stage"] == PYTORCH else "",
                "" if row["stage"] in (PYTORCH, REFERENCE) else row["precision"] or "fp32")

    return sorted(_newest(rows, config, key_of).values(), key=_order)


def variant_entries(rows, config, stage, defaults=None):
    """A stage's entries of every variant and precision for config (_newest), the default's fp32 entry first,
    then in the order the rows were first written."""
    if defaults is None:
        defaults = variant_defaults(rows)
    chosen = _newest(rows, config, lambda row: (row["variant"], row["precision"] or "fp32")
                     if row["stage"] == stage else None)
    default = defaults.get((stage, config.trainer))
    # a stable sort: _newest keeps its keys in the order their first rows were written
    return sorted(chosen.values(), key=lambda e: ((e.row["variant"], e.precision) != (default, "fp32"),
                                                  e.row["variant"] != default))


def ratio(numerator, denominator):
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def device_of(rows):
    """The GPU of a results file: the device of its first GPU row (CPU rows name the CPU)."""
    for row in rows:
        if row["stage"] != REFERENCE and row["variant"] != "cpu" and row["device"]:
            return row["device"]
    return rows[0]["device"] if rows else "unknown device"


def last_blocks(curve_rows):
    """{(stage, trainer, variant, hidden, series): [(index, value)]} of each key's last run (an index that does
    not increase starts a new run)."""
    curves = {}
    for row in curve_rows:
        key = (row["stage"], row["trainer"], row["variant"], row["hidden"], row["series"])
        try:
            point = (int(row["index"]), float(row["value"]))
        except ValueError:
            continue
        points = curves.get(key)
        if points is None or point[0] <= points[-1][0]:
            curves[key] = [point]
        else:
            points.append(point)
    return curves


# ----------------------------------------------------------------------------
# setup, wall time, spread, the torch.compile audit and runs (schema 2)

def wall_ms(row):
    """setup + e2e: what a user waits for one training run; None unless the row records both."""
    setup, e2e = number(row, "setup_ms"), number(row, "e2e_ms")
    return None if setup is None or e2e is None else setup + e2e


def spread(row):
    """(n, min, max) of e2e over the row's repeats, None when the row does not record them."""
    n = integer(row, "repeats")
    return None if n is None or n < 1 else (n, number(row, "e2e_min_ms"), number(row, "e2e_max_ms"))


def is_compile_mode(row):
    return row["stage"] == PYTORCH and mode_compiles(row["variant"])


def compile_audit(row):
    """(clean, why not): a torch.compile row is clean with an audit of 0 graph breaks and 0 recompiles; any
    other row is clean."""
    if not is_compile_mode(row):
        return True, ""
    breaks, recompiles = integer(row, "graph_breaks"), integer(row, "recompiles")
    if breaks is None or recompiles is None:
        return False, "not audited (no graph-break and recompile counts)"
    problems = [f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((breaks, "graph break"), (recompiles, "recompile"))
                if n]
    return not problems, ", ".join(problems)


def run_ids(rows):
    """The distinct run ids of rows in order of first appearance ("": none recorded)."""
    return list(dict.fromkeys(row.get("run_id", "") for row in rows))


# ----------------------------------------------------------------------------
# PyTorch modes (bench/torch_common.py runs them; here so that they are tested without PyTorch)

def mode_precision(mode):
    return "bf16" if mode.startswith("bf16-") else "fp32"


def mode_compiles(mode):
    return "compile-" in mode


def mode_max_autotune(mode):
    return mode.endswith("compile-max-autotune")


def mode_captured(mode):
    """The whole training step captured in a CUDA graph once, replayed every step."""
    return mode in ("cuda-graph", "bf16-cuda-graph")


def pytorch_setup_ms(mode, capture_ms, warmup_train_ms, warmup_epochs, ms_per_epoch):
    """A PyTorch row's setup_ms: the capture (captured modes); the warm-up training less warmup_epochs timed
    epochs, never below 0 (compile modes: compilation and autotuning); 0 for the others, which prepare nothing."""
    if mode_captured(mode):
        return capture_ms
    if mode_compiles(mode):
        return max(warmup_train_ms - warmup_epochs * ms_per_epoch, 0.0)
    return 0.0


# ----------------------------------------------------------------------------
# the assistant loop (make loop, tools/loop.sh): its rows in results/loop/<gpu>.csv

# a round's timed runs (stage 02, the candidate as 02-try, stage 08) share a run id; the hand-written stages one
# loop-stages id
LOOP_ROUND_RUN = re.compile(r"loop-(?P<trainer>regression|mnist)-(?P<mode>open|guided)-r(?P<round>\d+)-\d{8}T\d{6}Z")
LOOP_STAGES_RUN = re.compile(r"loop-stages-\d{8}T\d{6}Z")
LOOP_CANDIDATE = "02-try"
LOOP_FIGURE = {"regression": "e2e_ms", "mnist": "ms_per_epoch"}  # what the loop is judged by, a trainer


def _newest_runs(rows, key_of):
    """{key_of(row): {stage: row}} of each key's newest run (the largest run id: they end in their UTC start)."""
    newest, runs = {}, {}
    for row in rows:
        key = key_of(row)
        if key is not None and row["run_id"] > newest.get(key, ""):
            newest[key] = row["run_id"]
    for row in rows:
        key = key_of(row)
        if key is not None and row["run_id"] == newest[key] and row["trainer"] in LOOP_FIGURE:
            runs.setdefault(key, {})[row["stage"]] = row
    return runs


def loop_figure(row):
    """What the loop judges a row by (LOOP_FIGURE), None for no row."""
    return None if row is None else number(row, LOOP_FIGURE[row["trainer"]])


def loop_rounds(rows):
    """{(trainer, mode, round): {stage: row}} of each round's newest run; a failed round has no rows."""
    def key_of(row):
        match = LOOP_ROUND_RUN.fullmatch(row["run_id"])
        return match and (match["trainer"], match["mode"], int(match["round"]))
    return _newest_runs(rows, key_of)


def loop_stages(rows):
    """{trainer: {stage: row}} of the newest loop-stages run."""
    return _newest_runs(rows, lambda row: row["trainer"] if LOOP_STAGES_RUN.fullmatch(row["run_id"]) else None)
