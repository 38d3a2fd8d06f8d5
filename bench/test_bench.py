"""bench/test_bench.py: the CSV schema, the table generator and the plots' data selection, on the CPU.

Standard library only. The fixture bench/fixtures/fixture-gpu.csv holds made-up rows of a made-up
device, FIXTURE-GPU, with round numbers so that every expected figure can be checked by hand.

  python3 -m unittest discover -s bench -p 'test_*.py'
"""

import contextlib
import io
import os
import re
import shutil
import subprocess
import tempfile
import unittest
from types import SimpleNamespace

import make_tables
import plots
import provenance
import results_csv as rc
import run_bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURES = os.path.join(HERE, "fixtures")
FIXTURE_CSV = os.path.join(FIXTURES, "fixture-gpu.csv")


def c_string_macro(path, name):
    """The value of '#define NAME "..." "..."' (adjacent literals, backslash continuations) in a C file."""
    with open(path) as f:
        text = f.read()
    match = re.search(r"#define\s+%s\b((?:[^\n]*\\\n)*[^\n]*)" % name, text)
    if not match:
        raise AssertionError(f"{name} not found in {path}")
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1)))


def fixture_rows():
    return rc.read_csv(FIXTURE_CSV, rc.RESULT_COLUMNS)


def table_lines(rows, config):
    """{label: cells} of a ladder table: label, setup, e2e, wall, e2e spread, loop, ms/epoch,
    throughput, step (e2e), step (wall), cumulative, ÷ best."""
    return {cells[0]: cells for cells in make_tables.ladder_lines(rc.select_entries(rows, config))}


# Columns of the ladder cells (make_tables.ladder_lines).
SETUP, E2E, WALL, SPREAD, LOOP, EPOCH, RATE, STEP, STEP_WALL, CUMULATIVE, BEST = range(1, 12)


class SchemaTest(unittest.TestCase):
    def test_result_columns_are_report_h_header(self):
        header = c_string_macro(os.path.join(ROOT, "common", "report.h"), "REPORT_CSV_HEADER")
        self.assertEqual(",".join(rc.RESULT_COLUMNS), header)

    def test_curve_columns_are_report_h_curve_header(self):
        header = c_string_macro(os.path.join(ROOT, "common", "report.h"), "REPORT_CURVE_HEADER")
        self.assertEqual(",".join(rc.CURVE_COLUMNS), header)

    def test_phases_are_timing_c_phase_names(self):
        with open(os.path.join(ROOT, "common", "timing.c")) as f:
            match = re.search(r"PHASE_NAMES\[PHASE_COUNT\]\s*=\s*\{([^}]*)\}", f.read())
        self.assertEqual(tuple(re.findall(r'"(\w+)"', match.group(1))), rc.PHASES)

    def test_fixture_follows_the_schema(self):
        self.assertEqual(rc.read_header(FIXTURE_CSV), rc.RESULT_COLUMNS)
        rows = fixture_rows()
        self.assertEqual(rc.device_of(rows), "FIXTURE-GPU")
        self.assertEqual(rc.result_files(FIXTURES), [FIXTURE_CSV])  # curves and breakdown told apart

    def test_quoted_hidden_is_one_field(self):
        wide = [r for r in fixture_rows() if r["hidden"] == "1024,1024"]
        self.assertTrue(wide)
        self.assertTrue(all(r["batch"] == "128" and r["commit"] == "fix0001" for r in wide))
        self.assertEqual(rc.mnist_sizes("1024,1024"), [784, 1024, 1024, 10])
        self.assertEqual(rc.mnist_params("1024,1024"), 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10)
        self.assertEqual(rc.mnist_sizes("0"), [784, 10])

    def test_append_writes_the_header_once_and_quotes(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.csv")
            row = {"stage": "pytorch", "trainer": "mnist", "hidden": "64,64", "e2e_ms": "1.5"}
            rc.append_csv(path, rc.RESULT_COLUMNS, [row])
            rc.append_csv(path, rc.RESULT_COLUMNS, [row])
            with open(path) as f:
                lines = f.read().splitlines()
            self.assertEqual(lines[0], ",".join(rc.RESULT_COLUMNS))
            self.assertEqual(len(lines), 3)
            self.assertIn('"64,64"', lines[1])
            self.assertEqual(rc.read_csv(path, rc.RESULT_COLUMNS)[1]["hidden"], "64,64")
            with self.assertRaises(rc.SchemaError):
                rc.append_csv(path, rc.CURVE_COLUMNS, [{}])

    def test_a_changed_header_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "old.csv")
            with open(path, "w") as f:
                f.write("stage,trainer,e2e_ms\n02,regression,1\n")
            with self.assertRaises(rc.SchemaError):
                rc.read_csv(path, rc.RESULT_COLUMNS)
            self.assertEqual(rc.result_files(tmp), [])


class LadderTest(unittest.TestCase):
    def setUp(self):
        self.rows = fixture_rows()

    def test_regression_speedups(self):
        lines = table_lines(self.rows, rc.Config("regression"))
        self.assertEqual([lines["02"][c] for c in (E2E, LOOP, EPOCH, RATE, STEP, CUMULATIVE, BEST)],
                         ["1,000", "900", "4.50", "7.11", "—", "1.00×", ""])
        self.assertEqual([lines["03"][c] for c in (STEP, CUMULATIVE)], ["2.00×", "2.00×"])
        self.assertEqual([lines["05"][c] for c in (STEP, CUMULATIVE)], ["5.00× (vs 03)", "10.00×"])  # 04 missing
        self.assertEqual([lines["CPU reference"][c] for c in (STEP, CUMULATIVE)], ["", "0.05×"])
        self.assertEqual([lines["PyTorch eager"][c] for c in (STEP, CUMULATIVE, BEST)], ["", "2.50×", "4.00×"])
        self.assertEqual(lines["PyTorch cuda-graph"][BEST], "1.50×")

    def test_newest_row_wins(self):
        lines = table_lines(self.rows, rc.Config("regression"))
        self.assertEqual(lines["02"][E2E], "1,000")  # the older 02 row says 2,000
        newer = dict(self.rows[0], e2e_ms="250", commit="new0001")
        lines = table_lines(self.rows + [newer], rc.Config("regression"))
        self.assertEqual(lines["02"][E2E], "250")
        self.assertEqual(lines["03"][STEP], "0.50×")

    def test_row_order(self):
        labels = [e.label() for e in rc.select_entries(self.rows, rc.Config("mnist", "1024,1024"))]
        self.assertEqual(labels, ["02", "03", "05", "05 · bf16", "PyTorch eager", "PyTorch bf16-autocast",
                                  "PyTorch cpu (1 epoch)"])

    def test_other_epochs_are_shown_not_compared(self):
        lines = table_lines(self.rows, rc.Config("mnist", "1024,1024"))
        self.assertEqual(lines["05"][E2E], "1,000")  # the canonical run, not the newer 2-epoch sweep run
        self.assertEqual([lines["PyTorch cpu (1 epoch)"][c] for c in (STEP, CUMULATIVE, BEST)], ["", "", ""])
        reference = table_lines(self.rows, rc.Config("mnist", "0"))["CPU reference (1 epoch)"]
        self.assertEqual(reference[CUMULATIVE], "")

    def test_bf16_compares_with_the_bf16_stage(self):
        lines = table_lines(self.rows, rc.Config("mnist", "1024,1024"))
        self.assertEqual([lines["05 · bf16"][c] for c in (STEP, CUMULATIVE)], ["", "20.00×"])
        self.assertEqual(lines["PyTorch bf16-autocast"][BEST], "2.00×")  # 1000 / 500, not 1000 / 1000
        self.assertEqual(lines["PyTorch eager"][BEST], "2.00×")  # 2000 / 1000

    def test_throughput(self):
        regression = next(r for r in self.rows if r["stage"] == "03" and r["trainer"] == "regression")
        self.assertAlmostEqual(rc.throughput(regression)[0], 200 * 4_000_000 * 8 / 0.4 / 1e9)
        wide = next(r for r in self.rows if r["stage"] == "02" and r["hidden"] == "1024,1024")
        value, unit = rc.throughput(wide)
        self.assertEqual(unit, "GFLOP/s")
        self.assertAlmostEqual(value, 6 * 1_863_690 * 59_904 * 10 / 9.8 / 1e9)

    def test_missing_configuration_and_no_results(self):
        text = make_tables.ladder_table(self.rows, rc.Config("mnist", "128"), "FIXTURE-GPU", "x.csv")
        self.assertIn("no rows in `x.csv` yet", text)
        self.assertEqual(make_tables.ladder_block([], "mnist"), make_tables.NO_RESULTS)

    def test_block_names_source_and_device(self):
        block = make_tables.ladder_block([("results/fixture-gpu.csv", self.rows)], "regression")
        self.assertIn("FIXTURE-GPU · `results/fixture-gpu.csv` · commit fix0001", block)
        self.assertIn("GB/s: the minimum traffic", block)
        self.assertNotIn("MNIST", block)


class StageTableTest(unittest.TestCase):
    def setUp(self):
        self.rows = fixture_rows()

    def test_against_the_previous_stage_present(self):
        lines, shown = make_tables.stage_lines(self.rows, "05")
        regression = [cells for cells in lines if cells[0] == "regression 5M"]
        self.assertEqual([cells[1] for cells in regression], ["03", "05"])
        # configuration, run, setup, e2e, wall, spread, loop, ms/epoch, throughput, speedup e2e, wall, ms/epoch
        self.assertEqual([regression[1][c] for c in (9, 11)], ["5.00×", "5.00×"])
        self.assertEqual([regression[1][c] for c in (2, 3, 4, 10)], ["50.0", "100", "150", "3.40×"])  # 510 / 150
        self.assertNotIn("old0001", {r["commit"] for r in shown})

    def test_stage_02_against_the_reference(self):
        lines, _ = make_tables.stage_lines(self.rows, "02")
        mnist0 = [cells for cells in lines if cells[0] == "MNIST --hidden 0"]
        self.assertEqual(mnist0[0][1], "CPU reference (1 epoch)")
        self.assertEqual([mnist0[1][c] for c in (9, 10, 11)], ["—", "—", "42.86×"])  # e2e: other epochs; 3000 / 70
        missing = [cells for cells in lines if cells[0] == "MNIST --hidden 128"]
        self.assertEqual(missing, [["MNIST --hidden 128", "02", "no result yet"] + [""] * 9])


class CurveFileTest(unittest.TestCase):
    """The curves are committed gzip-compressed: compressing keeps every row, a second run's rows are
    added without a second header, and read_csv reads the .gz as it reads plain CSV."""

    def test_compress_and_extend(self):
        header = ",".join(rc.CURVE_COLUMNS_V1)  # a schema 1 file: read with the new columns empty
        with tempfile.TemporaryDirectory() as tmp:
            plain = os.path.join(tmp, "fixture-gpu-curves.csv")
            with open(plain, "w") as f:
                f.write(header + "\n07,regression,fused,,train_loss,0,1.5\n")
            rc.compress_curves(plain)
            self.assertFalse(os.path.exists(plain))
            with open(plain, "w") as f:
                f.write(header + '\n07,mnist,epoch-graph,"1024,1024",step_loss,3,0.25\n')
            rc.compress_curves(plain)
            rows = rc.read_csv(plain + ".gz", rc.CURVE_COLUMNS)
        self.assertEqual([r["value"] for r in rows], ["1.5", "0.25"])
        self.assertEqual(rows[1]["hidden"], "1024,1024")

    def test_nothing_to_compress(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc.compress_curves(os.path.join(tmp, "absent-curves.csv"))
            self.assertEqual(os.listdir(tmp), [])


class TargetsTableTest(unittest.TestCase):
    """The stage-07 targets: a figure at or under its target is met, one above says by how much."""

    def test_met_and_missed(self):
        header = ",".join(rc.RESULT_COLUMNS_V1)  # rows of schema 1, as results/ held them
        rows_text = [header,
                     "07,regression,default,5000000,,,200,0.01,fp32,FIXTURE-GPU,9.0,13.0,13.0,5,2,0.01,3,"
                     "0.01,0.02,,0.7,0.3,fix0002",
                     '07,mnist,default,,128,128,10,0.1,fp32,FIXTURE-GPU,9.0,13.0,13.0,200,120,12,20,'
                     '0.1,0.1,0.97,,,fix0002']
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "fixture-gpu.csv")
            with open(path, "w") as f:
                f.write("\n".join(rows_text) + "\n")
            rows = rc.read_csv(path, rc.RESULT_COLUMNS)
        block = make_tables.targets_block([("fixture-gpu.csv", rows)])
        self.assertRegex(block, r"regression 5M points, 200 epochs \| loop ms \| ≤ 3 \| 2\.00? \| met")
        self.assertIn("missed: 2.0× the target", block)
        self.assertIn("MNIST --hidden 0 | loop ms per epoch | ≤ 2.5 | no result yet", block)

    def test_no_rows(self):
        self.assertIn("Not measured yet", make_tables.targets_block([]))


class VectorAddTableTest(unittest.TestCase):
    def test_versions_at_the_newest_size(self):
        lines, shown = make_tables.vector_add_lines(fixture_rows())
        self.assertEqual([cells[0] for cells in lines], ["cpu", "thread-per-element", "float4"])
        self.assertEqual({r["commit"] for r in shown}, {"fix0001"})  # the n = 1000 run is older
        # version, with transfers ms, GB/s, speedup, kernel only ms, GB/s, speedup
        self.assertEqual(lines[1], ["thread-per-element", "100", "8.05", "0.80×", "0.400", "2,013", "200.00×"])
        self.assertEqual(lines[0][3], "")

    def test_block(self):
        block = make_tables.vector_add_block([("results/fixture-gpu.csv", fixture_rows())])
        self.assertIn("n = 67,108,864 floats", block)
        self.assertIn("3 × 4 B × n", block)


class MarkerTest(unittest.TestCase):
    def test_replace_only_between_markers_and_idempotently(self):
        text = "intro\n<!-- x begin -->\nold\n<!-- x end -->\noutro\n"
        once = make_tables.replace_between(text, "x", "new table")
        self.assertEqual(once, "intro\n<!-- x begin -->\nnew table\n<!-- x end -->\noutro\n")
        self.assertEqual(make_tables.replace_between(once, "x", "new table"), once)

    def test_absent_or_broken_markers(self):
        self.assertIsNone(make_tables.replace_between("no markers\n", "x", "table"))
        for broken in ("<!-- x begin -->\n", "<!-- x end -->\n", "<!-- x end -->\n<!-- x begin -->\n"):
            with self.assertRaises(make_tables.MarkerError):
                make_tables.replace_between(broken, "x", "table")

    @staticmethod
    def run_main(*args):
        """make_tables.main(args), its messages swallowed."""
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return make_tables.main(list(args))

    def test_main_on_a_repository(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "results"))
            shutil.copy(FIXTURE_CSV, os.path.join(root, "results"))
            readme = ("# title\n\nprose\n<!-- ladder:regression begin -->\nstale\n<!-- ladder:regression end -->\n"
                      "middle\n<!-- ladder:mnist begin -->\n<!-- ladder:mnist end -->\nend\n")
            files = {"README.md": readme, "05-streams/README.md": "# 05\n<!-- results:stage05 begin -->\n"
                     "<!-- results:stage05 end -->\n", "03-fused-kernels/README.md": "# 03, no markers\n"}
            for name, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
                with open(os.path.join(root, name), "w") as f:
                    f.write(text)
            untouched = os.path.join(root, "03-fused-kernels", "README.md")
            before = os.stat(untouched).st_mtime_ns

            self.assertEqual(self.run_main("--root", root), 0)
            with open(os.path.join(root, "README.md")) as f:
                first = f.read()
            self.assertTrue(first.startswith("# title\n\nprose\n<!-- ladder:regression begin -->\n**Regression"))
            self.assertIn("<!-- ladder:regression end -->\nmiddle\n<!-- ladder:mnist begin -->\n**MNIST", first)
            self.assertTrue(first.endswith("<!-- ladder:mnist end -->\nend\n"))
            self.assertNotIn("stale", first)
            self.assertIn("`results/fixture-gpu.csv`", first)
            with open(os.path.join(root, "05-streams", "README.md")) as f:
                self.assertIn("| regression 5M | 05 streams |", f.read())
            self.assertEqual(os.stat(untouched).st_mtime_ns, before)

            self.assertEqual(self.run_main("--root", root, "--check"), 0)
            self.assertEqual(self.run_main("--root", root), 0)
            with open(os.path.join(root, "README.md")) as f:
                self.assertEqual(f.read(), first)
            with open(os.path.join(root, "README.md"), "w") as f:
                f.write(first.replace("10.00×", "11.00×"))
            self.assertEqual(self.run_main("--root", root, "--check"), 1)


class PlotDataTest(unittest.TestCase):
    def setUp(self):
        self.rows = fixture_rows()

    def test_size_sweep(self):
        series = plots.size_sweep_data(self.rows)
        self.assertEqual(sorted(series), ["02", "05"])  # one-point series are dropped
        self.assertEqual([p[:2] for p in series["05"]], [(50_000, 0.02), (5_000_000, 0.4)])

    def test_width_sweep(self):
        series = plots.width_sweep_data(self.rows)
        self.assertEqual(sorted(series), ["05", "PyTorch eager"])
        self.assertEqual([p[:2] for p in series["PyTorch eager"]], [(128, 40.0), (1024, 190.0)])
        self.assertIsNone(plots.square_width("1024,512"))

    def test_ladder_bars_and_lines(self):
        bars, lines = plots.ladder_data(self.rows, rc.Config("mnist", "1024,1024"))
        self.assertEqual([b[0] for b in bars], ["02", "03", "05", "05 · bf16"])
        self.assertEqual(lines, [("PyTorch eager", 2000.0), ("PyTorch bf16-autocast", 1000.0)])

    def test_loss_curves_keep_the_last_run(self):
        curve_rows = rc.read_csv(os.path.join(FIXTURES, "fixture-gpu-curves.csv"), rc.CURVE_COLUMNS)
        panels = plots.curve_panels(curve_rows)
        self.assertEqual([p[0] for p in panels], ["regression: train MSE by epoch", "MNIST --hidden 0: step loss"])
        regression = panels[0][2]
        self.assertEqual(sorted(regression), ["CPU reference", "PyTorch eager", "stage 05"])
        self.assertEqual(regression["stage 05"], [(0, 1.4), (10, 0.4), (199, 0.01)])

    def test_breakdown_keeps_the_last_run(self):
        rows = rc.read_csv(os.path.join(FIXTURES, "fixture-gpu-breakdown.csv"), rc.BREAKDOWN_COLUMNS)
        data = plots.breakdown_data(rows)
        self.assertEqual(list(data), [("regression", ""), ("mnist", "128")])
        self.assertEqual(data[("regression", "")]["02"], {"h2d": 25.0, "forward": 500.0, "update": 480.0})


class RunBenchTest(unittest.TestCase):
    def test_parse_breakdown(self):
        text = ("breakdown (last run; timing each phase adds a synchronization after it, so e2e and loop grow):\n"
                "  phase                ms   share\n"
                "  h2d              12.500    2.5%\n"
                "  forward         250.000   50.0%\n"
                "  backward  237.5 ms 47.5%\n"
                "  sum             500.000  100.0%\n")
        self.assertEqual(run_bench.parse_breakdown(text),
                         [("h2d", 12.5, 2.5), ("forward", 250.0, 50.0), ("backward", 237.5, 47.5)])

    def test_predicted_sweep_time(self):
        # 0.5 s of overhead at the smallest size; 2.5 s at 5M points, so 2 s of work: 20 s at 50M.
        self.assertAlmostEqual(run_bench.predict_seconds(0.5, 5_000_000, 2.5, 50_000_000), 20.5)
        self.assertAlmostEqual(run_bench.predict_seconds(0.5, 5_000, 0.4, 50_000), 0.5)

    def test_gpu_slug(self):
        self.assertEqual(rc.gpu_slug("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3")
        self.assertEqual(rc.gpu_slug("FIXTURE-GPU"), "fixture-gpu")

    def test_plans_name_only_known_modes(self):
        for plan in run_bench.PLANS.values():
            for modes in (plan.size_modes, plan.regression_modes, plan.mnist_modes, plan.width_modes,
                          plan.compile_modes):
                self.assertTrue(set(modes) <= set(rc.PYTORCH_MODES) - {"cpu"})
            self.assertNotIn("bf16-autocast", plan.regression_modes)
            self.assertTrue(all(m.startswith("compile-") for m in plan.compile_modes))
            self.assertFalse(any(m.startswith("compile-") for m in plan.mnist_modes + plan.regression_modes))
            self.assertTrue(set(plan.compile_configs) <= {"regression"} | set(plan.mnist_hidden))
            # bf16 compiled: autocast modes, on MNIST configs the plan runs in bf16
            self.assertTrue(set(plan.bf16_compile_modes) <= set(rc.PYTORCH_MODES))
            self.assertTrue(all(m.startswith("bf16-") and "compile-" in m for m in plan.bf16_compile_modes))
            self.assertTrue(set(plan.bf16_compile_configs) <= set(plan.bf16_hidden))
            self.assertTrue(set(plan.mnist_hidden) <= set(rc.MNIST_HIDDEN))

    def test_plans_are_sized_to_their_budgets(self):
        self.assertEqual(run_bench.PLANS["full"].budget_s, 480)
        for name, plan in run_bench.PLANS.items():
            self.assertEqual(set(plan.estimate_s), set(run_bench.ESSENTIAL + run_bench.OPTIONAL), name)
            self.assertLessEqual(sum(plan.estimate_s.values()), plan.budget_s, name)
            essential = sum(plan.estimate_s[p] for p in run_bench.ESSENTIAL)
            self.assertLess(essential, 0.7 * plan.budget_s, name)  # room left: the budget cuts optional phases
        self.assertLessEqual(run_bench.PLANS["quick"].budget_s, 100)
        full = run_bench.PLANS["full"]
        self.assertEqual(sum(full.compile_configs.values()) + sum(full.bf16_compile_configs.values()),
                         full.estimate_s["compile"])

    def test_budget_seconds(self):
        plan = run_bench.PLANS["full"]
        self.assertEqual(run_bench.budget_seconds(plan, None, {}), 480)
        self.assertEqual(run_bench.budget_seconds(plan, None, {"BENCH_BUDGET_S": "250"}), 250)
        self.assertEqual(run_bench.budget_seconds(plan, "90", {"BENCH_BUDGET_S": "250"}), 90)
        for bad in ("0", "-5", "soon"):
            with self.assertRaises(ValueError):
                run_bench.budget_seconds(plan, bad, {})

    def test_parse_listed_names(self):
        text = "variant epoch-graph\nvariant step-graph\nprecision fp32\nprecision bf16\n"
        self.assertEqual(run_bench.parse_listed_names(text, "variant"), ["epoch-graph", "step-graph"])
        self.assertEqual(run_bench.parse_listed_names(text, "precision"), ["fp32", "bf16"])
        self.assertIsNone(run_bench.parse_listed_names("variant shared\n", "precision"))
        self.assertIsNone(run_bench.parse_listed_names("", "variant"))

    def test_variant_runs_cover_the_attribution_rows(self):
        runs = {(stage, trainer, flag): (names, hiddens) for stage, trainer, flag, names, hiddens
                in run_bench.VARIANT_RUNS}
        for stage in ("04", "06", "07"):
            self.assertEqual(runs[(stage, "regression", "variant")], (None, ("",)))  # every variant
        self.assertIsNone(runs[("04", "mnist", "variant")][0])  # every tile shape
        self.assertIsNone(runs[("07", "mnist", "variant")][0])  # epoch-graph and step-graph
        self.assertEqual(runs[("06", "mnist", "precision")], (("tf32", "bf16"), ("1024,1024",)))
        for _, _, _, _, hiddens in run_bench.VARIANT_RUNS:
            self.assertTrue(set(hiddens) <= set(rc.MNIST_HIDDEN) | {""})


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class BudgetTest(unittest.TestCase):
    def setUp(self):
        self.clock = FakeClock()
        self.tmp = tempfile.TemporaryDirectory()
        self.bench = run_bench.Bench(run_bench.PLANS["full"], self.tmp.name, ["02", "07"], "fixture-gpu",
                                     run_bench.Budget(100, self.clock))

    def tearDown(self):
        self.tmp.cleanup()

    def quietly(self, fn, *args, **kwargs):
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(*args, **kwargs)

    def test_budget(self):
        budget = run_bench.Budget(100, self.clock)
        self.clock.now = 60
        self.assertEqual((budget.elapsed(), budget.remaining()), (60, 40))
        self.assertTrue(budget.allows(40))
        self.assertFalse(budget.allows(41))

    def test_optional_phase_past_the_budget_is_skipped_essential_runs(self):
        ran = []
        self.clock.now = 101
        self.quietly(self.bench.phase, "width sweep", lambda: ran.append("width"), optional=True)
        self.quietly(self.bench.phase, "ladder", lambda: ran.append("ladder"))
        self.assertEqual(ran, ["ladder"])
        self.assertEqual(len(self.bench.skipped), 1)
        self.assertIn("phase width sweep", self.bench.skipped[0])
        self.assertIn("past the budget of 100 s", self.bench.skipped[0])
        self.assertEqual([(name, took is None) for name, _, took in self.bench.phase_seconds],
                         [("width sweep", True), ("ladder", False)])

    def test_runs_inside_an_optional_phase_must_fit(self):
        self.clock.now = 50
        self.assertTrue(self.bench.fits("anything", 500))  # outside an optional phase
        self.assertIsNone(self.bench.timeout())
        self.bench.optional = True
        self.assertTrue(self.bench.fits("a short run", 50))
        self.assertFalse(self.quietly(self.bench.fits, "compile", 51))
        self.assertIn("compile: 50 s elapsed + about 51 s would pass the budget", self.bench.skipped[-1])
        self.assertEqual(self.bench.timeout(), 50 + run_bench.GRACE_S)

    def test_an_optional_run_past_the_budget_is_stopped(self):
        self.bench.optional = True
        self.clock.now = 100 + run_bench.GRACE_S  # the budget and its grace are spent: 1 s left
        status, _, seconds = self.quietly(self.bench.run, ["sleep", "20"])
        self.assertIsNone(status)
        self.assertLess(seconds, 10)
        self.assertIn("sleep 20: stopped after", self.bench.skipped[-1])
        self.assertEqual(self.bench.failures, [])

    def test_size_sweep_skips_the_canonical_size_and_stops_at_the_limit(self):
        plan = SimpleNamespace(sizes=(5_000, rc.REGRESSION_POINTS, 500_000, 50_000_000), size_limit_s=15)
        self.bench.plan = plan
        took = {5_000: 1.0, 500_000: 1.5}  # 0.5 s of work at 500k: about 51 s at 50M
        ran = []

        def run_size(n):
            ran.append(n)
            self.clock.now += took[n]
            return 0

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.bench.sweep("stage 07", run_size)
        self.assertEqual(ran, [5_000, 500_000])
        self.assertIn("stops before 50,000,000 points", out.getvalue())


def result_row(**columns):
    row = {c: "" for c in rc.RESULT_COLUMNS}
    row.update(precision="fp32", device="FIXTURE-GPU", commit="var0001")
    row.update({k: str(v) for k, v in columns.items()})
    return row


def regression_row(stage, variant, e2e, points=rc.REGRESSION_POINTS):
    return result_row(stage=stage, trainer="regression", variant=variant, points=points, epochs=200, lr=0.01,
                      e2e_ms=e2e, loop_ms=e2e - 10, ms_per_epoch=e2e / 200)


def mnist_row(stage, variant, precision, e2e, hidden="1024,1024"):
    return result_row(stage=stage, trainer="mnist", variant=variant, precision=precision, hidden=hidden,
                      batch=128, epochs=10, lr=0.1, e2e_ms=e2e, loop_ms=e2e - 10, ms_per_epoch=e2e / 10)


class VariantTest(unittest.TestCase):
    """A stage's default variant makes the ladder; its other variants and precisions its variants table."""

    def setUp(self):
        self.rows = [
            regression_row("03", "fused", 500),
            regression_row("04", "shared", 100),   # the ladder's run: the default, written first
            regression_row("04", "shared", 100, points=50_000),
            mnist_row("06", "cublaslt", "fp32", 300),
            mnist_row("06", "cublaslt", "bf16", 150),
            regression_row("04", "atomic", 400),
            regression_row("04", "atomic", 40, points=50_000),
            regression_row("04", "shuffle", 110),  # the newest 04 row: still not the ladder's
            mnist_row("06", "cublaslt", "tf32", 200),
        ]

    def test_defaults_from_rows_and_from_sources(self):
        self.assertEqual(rc.variant_defaults(self.rows),
                         {("03", "regression"): "fused", ("04", "regression"): "shared",
                          ("06", "mnist"): "cublaslt"})
        known = {("04", "regression"): "shuffle", ("05", "regression"): "shared", ("03", "regression"): "renamed"}
        defaults = rc.variant_defaults(self.rows, known)
        self.assertEqual(defaults[("04", "regression")], "shuffle")  # the source says so, and it has rows
        self.assertEqual(defaults[("03", "regression")], "fused")  # no row of the source's name: the rows'
        self.assertTrue(rc.is_default_variant(regression_row("05", "anything", 1), {}))

    def test_ladder_uses_the_default_variant_at_fp32_and_bf16(self):
        lines = table_lines(self.rows, rc.Config("regression"))
        self.assertEqual(lines["04"][E2E], "100")  # shared, not the newer shuffle or atomic rows
        self.assertEqual(lines["04"][STEP], "5.00×")
        labels = [e.label() for e in rc.select_entries(self.rows, rc.Config("mnist", "1024,1024"))]
        self.assertEqual(labels, ["06", "06 · bf16"])  # tf32: the variants table only
        known = rc.variant_defaults(self.rows, {("04", "regression"): "shuffle"})
        entries = rc.select_entries(self.rows, rc.Config("regression"), known)
        self.assertEqual([e.e2e for e in entries if e.stage == "04"], [110.0])

    def test_variant_entries_default_first_then_first_written(self):
        names = [(e.row["variant"], e.precision)
                 for e in rc.variant_entries(self.rows, rc.Config("regression"), "04")]
        self.assertEqual(names, [("shared", "fp32"), ("atomic", "fp32"), ("shuffle", "fp32")])
        precisions = [e.precision for e in rc.variant_entries(self.rows, rc.Config("mnist", "1024,1024"), "06")]
        self.assertEqual(precisions, ["fp32", "bf16", "tf32"])

    def test_variant_lines(self):
        lines, shown = make_tables.variant_lines(self.rows, "04")
        # configuration, variant, precision, setup, e2e, wall, spread, loop, ms/epoch, throughput, vs default
        # (e2e), vs default (wall)
        self.assertEqual([cells[1] for cells in lines], ["`shared` (default)", "`atomic`", "`shuffle`"])
        self.assertEqual(lines[0][10], "")
        self.assertEqual(lines[1][4], "400")
        self.assertEqual(lines[1][10], "0.25×")
        self.assertEqual(lines[2][10], "0.91×")
        self.assertEqual(lines[2][11], "—")  # these rows record no setup: no wall
        self.assertEqual(len(shown), 3)
        lines, _ = make_tables.variant_lines(self.rows, "06")
        self.assertEqual([(c[0], c[2], c[10]) for c in lines], [("MNIST --hidden 1024,1024", "fp32", ""),
                                                               ("MNIST --hidden 1024,1024", "bf16", "2.00×"),
                                                               ("MNIST --hidden 1024,1024", "tf32", "1.50×")])
        self.assertEqual(make_tables.variant_lines(self.rows, "03"), ([], []))  # one variant: no table

    def test_stage_block_has_a_variants_table_where_the_stage_has_variants(self):
        block = make_tables.stage_block([("results/x.csv", self.rows)], "04")
        self.assertIn("**Variants of stage 04**", block)
        self.assertIn("| regression 5M | `atomic` | fp32 | — | 400 |", block)
        self.assertIn("| regression 5M | 03 | — | 500 |", block)  # the stage before, as ever
        self.assertIn("| regression 5M | 04 | — | 100 |", block)
        self.assertIn("vs default = the default variant's fp32 e2e", block)
        plain = make_tables.stage_block([("results/x.csv", self.rows)], "03")
        self.assertNotIn("Variants of stage", plain)

    def test_sweeps_plot_the_default_variant(self):
        series = plots.size_sweep_data(self.rows)
        self.assertEqual(series["04"], [(50_000, 0.5, series["04"][0][2]), (rc.REGRESSION_POINTS, 0.5,
                                                                             series["04"][1][2])])
        self.assertEqual(sorted(series), ["04"])  # 03 has one point; atomic and shuffle are not series


class SourceDefaultsTest(unittest.TestCase):
    def test_first_name_of_the_variant_list(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "04-shared-memory"))
            os.makedirs(os.path.join(root, "09-not-a-stage"))
            with open(os.path.join(root, "04-shared-memory", "regression.cu"), "w") as f:
                f.write('// x\nconst char *const REGRESSION_VARIANTS[] = {"shared", "atomic", NULL};\n')
            with open(os.path.join(root, "04-shared-memory", "mnist.cu"), "w") as f:
                f.write('const char *const MNIST_VARIANTS[] = {\n    "tile16-2x2", "tile16", NULL};\n')
            with open(os.path.join(root, "09-not-a-stage", "mnist.cu"), "w") as f:
                f.write('const char *const MNIST_VARIANTS[] = {"x", NULL};\n')
            self.assertEqual(rc.source_default_variants(root),
                             {("04", "regression"): "shared", ("04", "mnist"): "tile16-2x2"})
        self.assertEqual(rc.source_default_variants(os.path.join(ROOT, "no-such-folder")), {})

    def test_every_trainer_stage_of_the_repository_names_its_default(self):
        found = rc.source_default_variants(ROOT)
        for name in sorted(os.listdir(ROOT)):
            match = re.fullmatch(r"(0[2-7])-[\w-]+", name)
            for trainer in ("regression", "mnist"):
                if match and os.path.exists(os.path.join(ROOT, name, f"{trainer}.cu")):
                    self.assertRegex(found.get((match.group(1), trainer), ""), r"^[\w.-]+$", f"{name}/{trainer}.cu")


class SanitizeBlockTest(unittest.TestCase):
    SUMMARY = ("compute-sanitizer 1.0 on FIXTURE-GPU, commit abc, 4 runs at a time, 9 s in all\n"
               "stage  trainer    memcheck    racecheck   \n"
               "05     mnist      clean 2s    clean 9s    \n"
               "05     regression clean 1s    clean 3s    \n"
               "06     mnist      clean 4s    2 errors (library) 5s\n"
               "sanitize: 1 of 6 runs not clean: logs in build/sanitize/logs/\n")

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        with open(os.path.join(self.dir, "fixture-gpu-sanitize.txt"), "w") as f:
            f.write(self.SUMMARY)

    def test_whole_table_as_printed_without_trailing_blanks(self):
        block = make_tables.sanitize_block(make_tables.sanitize_summaries(self.dir), self.dir)
        self.assertIn("`results/fixture-gpu-sanitize.txt`: compute-sanitizer 1.0 on FIXTURE-GPU", block)
        self.assertIn("06     mnist      clean 4s    2 errors (library) 5s\n", block)
        self.assertIn("sanitize: 1 of 6 runs not clean", block)
        self.assertNotRegex(block, r" \n")
        self.assertNotIn("SAN_VARIANTS=all", block)

    def test_stage_rows_only(self):
        block = make_tables.sanitize_block(make_tables.sanitize_summaries(self.dir), self.dir, "05")
        self.assertIn("stage  trainer    memcheck    racecheck\n05     mnist", block)
        self.assertIn("05     regression", block)
        self.assertNotIn("06     mnist", block)
        self.assertNotIn("sanitize: 1 of 6", block)

    def test_all_variants_summary_is_named_with_its_verdict(self):
        with open(os.path.join(self.dir, "fixture-gpu-sanitize-all-variants.txt"), "w") as f:
            f.write(self.SUMMARY.replace("1 of 6", "3 of 20"))
        block = make_tables.sanitize_block(make_tables.sanitize_summaries(self.dir), self.dir)
        self.assertIn("`results/fixture-gpu-sanitize-all-variants.txt`, which ends: *sanitize: 3 of 20 runs", block)

    def test_no_summary_and_no_rows_of_a_stage(self):
        self.assertIn("Not run yet", make_tables.sanitize_block([], self.dir))
        summaries = make_tables.sanitize_summaries(self.dir)
        self.assertIn("Not run yet", make_tables.sanitize_block(summaries, self.dir, "02"))



# ----------------------------------------------------------------------------
# provenance (issue 16): which commit, which run, when

def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", *args],
                   cwd=cwd, check=True, capture_output=True)


def git_repo(path):
    """A git repository at path with one commit of a.txt; returns its HEAD, 12 digits."""
    os.makedirs(path, exist_ok=True)
    git(path, "init", "-q")
    with open(os.path.join(path, "a.txt"), "w") as f:
        f.write("a\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "one")
    out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=path, capture_output=True, text=True)
    return out.stdout.strip()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


@unittest.skipUnless(shutil.which("git"), "needs git")
class ProvenanceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)

    def test_git_only_at_the_top_of_a_work_tree(self):
        head = git_repo(self.tmp)
        self.assertEqual(provenance.git_state(self.tmp), (head, "0"))
        copy = os.path.join(self.tmp, "copy")  # a copy of the tree inside another repository
        os.makedirs(copy)
        self.assertEqual(provenance.git_state(copy), (None, ""))
        self.assertEqual(provenance.resolve_commit(copy, environ={}), ("unknown", "", "unknown"))
        write(os.path.join(copy, "build", ".commit"), "c0ffee123456\n")
        write(os.path.join(copy, "build", ".dirty"), "0\n")
        self.assertEqual(provenance.resolve_commit(copy, environ={}), ("c0ffee123456", "0", "build/.commit"))
        write(os.path.join(self.tmp, "a.txt"), "changed\n")
        self.assertEqual(provenance.git_state(self.tmp), (head, "1"))

    def test_order_of_preference(self):
        head = git_repo(self.tmp)
        self.assertEqual(provenance.resolve_commit(self.tmp, environ={}), (head, "0", "git"))
        write(os.path.join(self.tmp, "build", ".commit"), "feed00000001\n")
        self.assertEqual(provenance.resolve_commit(self.tmp, environ={})[:1], ("feed00000001",))
        env = {"GIT_COMMIT_ID": "beef00000002", "GIT_DIRTY": "1"}
        self.assertEqual(provenance.resolve_commit(self.tmp, environ=env), ("beef00000002", "1", "given"))
        env[provenance.COMMIT_ENV] = "abad00000003"
        self.assertEqual(provenance.resolve_commit(self.tmp, environ=env), ("abad00000003", "", "given"))
        self.assertEqual(provenance.resolve_commit(self.tmp, "d00d00000004", "0", environ=env),
                         ("d00d00000004", "0", "given"))
        self.assertEqual(provenance.resolve_commit(self.tmp, "d00d00000004", "yes", environ={})[1], "")

    def test_run_id_and_time(self):
        self.assertEqual(provenance.run_id({provenance.RUN_ID_ENV: "bench-x"}), "bench-x")
        self.assertEqual(provenance.run_id({}), provenance.run_id({}))  # one per process
        self.assertRegex(provenance.run_id({}), r"^\d{8}T\d{6}Z-p\d+$")
        self.assertEqual(provenance.new_run_id("bench-", 0, 7), "bench-19700101T000000Z-p7")
        self.assertEqual(provenance.utc_now(86400), "1970-01-02T00:00:00Z")

    def test_run_bench_passes_one_run_to_every_program(self):
        write(os.path.join(self.tmp, "build", ".commit"), "c0ffee123456\n")
        write(os.path.join(self.tmp, "build", ".dirty"), "1\n")
        env = {}
        commit, dirty, run_id, problem = run_bench.run_provenance(self.tmp, environ=env)
        self.assertIsNone(problem)
        self.assertEqual((commit, dirty), ("c0ffee123456", "1"))
        self.assertTrue(run_id.startswith("bench-"))
        self.assertEqual(env, {provenance.RUN_ID_ENV: run_id, provenance.COMMIT_ENV: "c0ffee123456",
                               provenance.DIRTY_ENV: "1"})
        self.assertIsNone(run_bench.run_provenance(self.tmp, "c0ffee123456", "0", {})[3])
        problem = run_bench.run_provenance(self.tmp, "0123456789ab", "0", {})[3]
        self.assertIn("built at c0ffee123456", problem)


@unittest.skipUnless(shutil.which("git") and shutil.which("make"), "needs git and make")
class MakefileCommitTest(unittest.TestCase):
    """The Makefile's commit (make commit-info): explicit, else git at the top of this tree, else build/.commit."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)

    def info(self, tree, *args):
        out = subprocess.run(["make", "-s", "--no-print-directory", "commit-info", *args], cwd=tree,
                             capture_output=True, text=True, env=dict(os.environ, GIT_COMMIT_ID="", GIT_DIRTY=""))
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.strip()

    def test_copy_inside_another_repository(self):
        outer = git_repo(self.tmp)
        tree = os.path.join(self.tmp, "gpu-copy")
        os.makedirs(tree)
        shutil.copy(os.path.join(ROOT, "Makefile"), tree)
        self.assertEqual(self.info(tree), "commit unknown dirty")  # not the outer repository's HEAD
        write(os.path.join(tree, "build", ".commit"), "c0ffee123456\n")
        write(os.path.join(tree, "build", ".dirty"), "0\n")
        self.assertEqual(self.info(tree), "commit c0ffee123456 dirty 0")
        self.assertNotIn(outer, self.info(tree))
        self.assertEqual(self.info(tree, "GIT_COMMIT_ID=abcdef012345", "GIT_DIRTY=1"), "commit abcdef012345 dirty 1")
        with open(os.path.join(tree, "build", ".commit")) as f:
            self.assertEqual(f.read().strip(), "abcdef012345")  # the record follows what the build was told

    def test_top_of_a_work_tree(self):
        head = git_repo(self.tmp)
        shutil.copy(os.path.join(ROOT, "Makefile"), self.tmp)
        git(self.tmp, "add", "Makefile")
        git(self.tmp, "commit", "-q", "-m", "two")
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=self.tmp, capture_output=True,
                              text=True).stdout.strip()
        write(os.path.join(self.tmp, "build", ".commit"), "stale0000000\n")
        self.assertEqual(self.info(self.tmp), f"commit {head} dirty 0")
        write(os.path.join(self.tmp, "a.txt"), "changed\n")
        self.assertEqual(self.info(self.tmp), f"commit {head} dirty 1")


if __name__ == "__main__":
    unittest.main()
