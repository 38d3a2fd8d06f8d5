"""tests/bench/test_bench.py: the CSV schema, the table generator and the plots' data selection, on the CPU.

Standard library only. The fixture tests/bench/fixtures/fixture-gpu.csv holds made-up rows of a made-up
device, FIXTURE-GPU, with round numbers so that every expected figure can be checked by hand.

  python3 -m unittest discover -s tests/bench
"""

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))  # the modules under test

import make_tables  # noqa: E402
import plots
import provenance
import report_rows
import results_csv as rc
import run_bench

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
        flops_per_sample = 6 * 1_863_690 - 2 * 784 * 1024  # the images need no gradient
        self.assertEqual(rc.mnist_flops_per_sample("1024,1024"), flops_per_sample)
        self.assertAlmostEqual(value, flops_per_sample * 59_904 * 10 / 9.8 / 1e9)

    def test_missing_configuration_and_no_results(self):
        text = make_tables.ladder_table(self.rows, rc.Config("mnist", "128"), "x.csv")
        self.assertIn("no rows in `x.csv` yet", text)
        self.assertEqual(make_tables.ladder_block([], "mnist"), make_tables.NO_RESULTS)

    def test_block_names_source_and_device(self):
        block = make_tables.ladder_block([("results/fixture-gpu.csv", self.rows)], "regression")
        self.assertIn("FIXTURE-GPU · `results/fixture-gpu.csv` · commit fix0001", block)
        self.assertIn("GB/s: the minimum traffic", block)
        self.assertNotIn("MNIST", block)


class HeadlineTest(unittest.TestCase):
    """The top README's ladder:headline block: one line per stage, the ladder's step speedups, × PyTorch's best."""

    def setUp(self):
        # the fixture's regression (02, 03, 05; PyTorch eager 400 ms, cuda-graph 150 ms) and MNIST --hidden 128
        self.rows = fixture_rows() + [
            timed_row("02", e2e=800.0, per_epoch=75.0, run="fix-run-1"),
            timed_row("05", e2e=200.0, per_epoch=18.0, run="fix-run-1"),
            timed_row("pytorch", e2e=1000.0, variant="eager", run="fix-run-1"),
            timed_row("pytorch", e2e=400.0, variant="cuda-graph", run="fix-run-1"),
            timed_row("pytorch", e2e=100.0, variant="bf16-cuda-graph", precision="bf16", run="fix-run-1")]
        self.ideas = {"02": make_tables.BASELINE_IDEA, "03": "kernel fusion"}

    def test_ideas_from_the_stage_ideas_file(self):
        ideas = make_tables.stage_ideas(ROOT)
        self.assertEqual(ideas["02"], "the naive first version")
        self.assertEqual([ideas[s] for s in ("03", "07")], ["kernel fusion", "CUDA graphs"])
        self.assertEqual(make_tables.stage_ideas(FIXTURES), {"02": "the naive first version"})

    def test_lines(self):
        lines, shown, best = make_tables.headline_lines(self.rows, self.ideas)
        # stage, idea, regression e2e, step, × PyTorch's best, MNIST 128 e2e, step, × PyTorch's best: each ratio
        # divides the e2e beside it (800 / 200 = 4.00×), not the ms/epoch of the rows (75.0, 18.0)
        self.assertEqual(lines, [
            ["02", "the naive first version", "1,000", "—", "0.15×", "800", "—", "0.50×"],  # 150 / 1000, 400 / 800
            ["03", "kernel fusion", "500", "2.00×", "0.30×", "—", "—", "—"],  # no MNIST 128 row
            ["05", "—", "100", "5.00× (vs 03)", "1.50×", "200", "4.00× (vs 02)", "2.00×"]])
        # the fastest fp32 mode: a bf16 mode is faster but not the stages' precision
        self.assertEqual([best[t].row["variant"] for t in ("regression", "mnist")], ["cuda-graph", "cuda-graph"])
        self.assertEqual(len(shown), 5 + 2)

    def test_block(self):
        block = make_tables.headline_block([("results/fixture-gpu.csv", self.rows)], {"05": "05 streams"}, None,
                                           self.ideas)
        self.assertIn("**Every stage: regression 5M, 200 epochs · MNIST --hidden 128, batch 128, 10 epochs**", block)
        self.assertIn("FIXTURE-GPU · `results/fixture-gpu.csv` · commit", block)
        self.assertIn("| stage | idea | regression e2e ms | ÷ stage before | × PyTorch's best | MNIST --hidden 128 e2e ms "
                      "| ÷ stage before | × PyTorch's best |", block)
        self.assertIn("| 05 streams | — | 100 | 5.00× (vs 03) | 1.50× | 200 | 4.00× (vs 02) | 2.00× |", block)
        self.assertIn("PyTorch's best (its fastest fp32 mode): regression 5M `cuda-graph`, 150 ms e2e; "
                      "MNIST --hidden 128 `cuda-graph`, 400 ms e2e.", block)
        self.assertEqual(block.count("Generated by"), 1)
        self.assertEqual(make_tables.headline_block([]), make_tables.NO_RESULTS)
        with MixedRunsPolicy("refuse"):
            with self.assertRaisesRegex(make_tables.TableError, "a table shows one run"):
                make_tables.headline_block([("x.csv", self.rows + [timed_row("06", e2e=150.0, run="run-2")])])


    def test_the_repository_places_its_blocks(self):
        """The top README holds the headline; docs/RESULTS.md the ladders and the sanitizer table (a student copy:
        the sanitizer table, and in the places of the timing tables, withheld markers)."""
        student = os.path.exists(os.path.join(ROOT, "STUDENT.md"))
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        with open(os.path.join(ROOT, make_tables.RESULTS_DOC), encoding="utf-8") as f:
            results = f.read()
        self.assertIn("<!-- sanitize:summary begin -->", results)
        self.assertNotIn("<!-- sanitize:summary begin -->", readme)
        for text, names in ((readme, ("ladder:headline",)), (results, ("ladder:regression", "ladder:mnist"))):
            for name in names:
                (self.assertNotIn if student else self.assertIn)(f"<!-- {name} begin -->", text)
            if student:
                self.assertIn("<!-- withheld:", text)
        self.assertNotIn("<!-- ladder:regression begin -->", readme)


class StageTableTest(unittest.TestCase):
    def setUp(self):
        self.rows = fixture_rows()

    def test_against_the_previous_stage_present(self):
        lines, shown, _ = make_tables.stage_lines(self.rows, "05")
        regression = [cells for cells in lines if cells[0] == "regression 5M"]
        self.assertEqual([cells[1] for cells in regression], ["03", "05"])
        # configuration, run, setup, e2e, wall, spread, loop, ms/epoch, throughput, speedup e2e, wall, ms/epoch
        self.assertEqual([regression[1][c] for c in (9, 11)], ["5.00×", "5.00×"])
        self.assertEqual([regression[1][c] for c in (2, 3, 4, 10)], ["50.0", "100", "150", "3.40×"])  # 510 / 150
        self.assertNotIn("old0001", {r["commit"] for r in shown})

    def test_stage_02_against_the_reference(self):
        lines, _, _ = make_tables.stage_lines(self.rows, "02")
        mnist0 = [cells for cells in lines if cells[0] == "MNIST --hidden 0"]
        self.assertEqual(mnist0[0][1], "CPU reference (1 epoch)")
        self.assertEqual([mnist0[1][c] for c in (9, 10, 11)], ["—", "—", "42.86×"])  # e2e: other epochs; 3000 / 70
        missing = [cells for cells in lines if cells[0] == "MNIST --hidden 128"]
        self.assertEqual(missing, [["MNIST --hidden 128", "02", "no result yet"] + [""] * 9])


class CurveFileTest(unittest.TestCase):
    """The curves are committed gzip-compressed: compressing keeps every row, a second run's rows are
    added without a second header, and read_csv reads the .gz as it reads plain CSV."""

    def test_compress_and_extend(self):
        header = ",".join(rc.CURVE_COLUMNS)
        with tempfile.TemporaryDirectory() as tmp:
            plain = os.path.join(tmp, "fixture-gpu-curves.csv")
            with open(plain, "w") as f:
                f.write(header + "\n07,regression,fused,,train_loss,0,1.5,GPU,c16,run-1\n")
            rc.compress_curves(plain)
            self.assertFalse(os.path.exists(plain))
            with open(plain, "w") as f:
                f.write(header + '\n07,mnist,epoch-graph,"1024,1024",step_loss,3,0.25,GPU,c16,run-2\n')
            rc.compress_curves(plain)
            rows = rc.read_csv(plain + ".gz", rc.CURVE_COLUMNS)
        self.assertEqual([r["value"] for r in rows], ["1.5", "0.25"])
        self.assertEqual(rows[1]["hidden"], "1024,1024")

    def test_nothing_to_compress(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc.compress_curves(os.path.join(tmp, "absent-curves.csv"))
            self.assertEqual(os.listdir(tmp), [])


class StepsTableTest(unittest.TestCase):
    """The per-step block: µs per epoch and e2e − loop of the regression, µs per step of MNIST
    (ms/epoch ÷ 60,000 // 128 = 468 steps), and the µs saved against the stage before."""

    def setUp(self):
        self.rows = [regression_row("02", "default", 4210), regression_row("03", "default", 2810),
                     result_row(stage="02", trainer="mnist", variant="default", hidden="128", batch=128, epochs=10,
                                lr=0.1, e2e_ms=960, loop_ms=950, ms_per_epoch=93.6),
                     result_row(stage="03", trainer="mnist", variant="default", hidden="128", batch=128, epochs=10,
                                lr=0.1, e2e_ms=820, loop_ms=810, ms_per_epoch=81.9),
                     mnist_row("03", "default", "bf16", 500, hidden="128")]

    def test_steps_per_epoch_from_the_repository_constants(self):
        self.assertEqual(make_tables.mnist_steps_per_epoch(), 468)
        self.assertEqual(make_tables.mnist_steps_per_epoch(256), 234)

    def test_against_the_stage_before(self):
        regression, mnist, shown = make_tables.steps_lines(self.rows, "03")
        # run, loop ms, µs per epoch (loop ÷ 200 epochs), e2e − loop, µs saved per epoch
        self.assertEqual(regression, [["02", "4,200", "21,000", "10.0", ""], ["03", "2,800", "14,000", "10.0", "7,000"]])
        hidden128 = [cells for cells in mnist if cells[0] == "MNIST --hidden 128"]
        # 93.6 ms ÷ 468 = 200 µs, 81.9 ms ÷ 468 = 175 µs: 25 µs saved; the bf16 row is not the ladder's
        self.assertEqual(hidden128, [["MNIST --hidden 128", "02", "93.6", "468", "200", ""],
                                     ["MNIST --hidden 128", "03", "81.9", "468", "175", "25.0"]])
        self.assertIn(["MNIST --hidden 0", "03", "no result yet", "", "", ""], mnist)
        self.assertEqual(len(shown), 4)

    def test_first_stage_and_a_slower_stage(self):
        regression, mnist, _ = make_tables.steps_lines(self.rows, "02")
        self.assertEqual([cells[0] for cells in regression], ["02"])
        self.assertEqual([cells[-1] for cells in mnist if cells[0] == "MNIST --hidden 128"], [""])
        slower = self.rows + [regression_row("04", "default", 4410)]
        regression, _, _ = make_tables.steps_lines(slower, "04")
        self.assertEqual(regression[-1][-1], "−8,000")  # 14,000 − 22,000 µs: this stage is slower

    def test_block(self):
        block = make_tables.steps_block([("fixture-gpu.csv", self.rows)], "03")
        self.assertIn("`fixture-gpu.csv`", block)
        self.assertIn("| µs per step | µs saved per step |", block)
        self.assertIn("Generated by `bench/make_tables.py`", block)
        self.assertIn("Not measured yet", make_tables.steps_block([], "03"))


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
            with self.assertRaisesRegex(make_tables.TableError, "must both appear"):
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
            files = {"docs/RESULTS.md": readme, "05-streams/README.md": "# 05\n<!-- results:stage05 begin -->\n"
                     "<!-- results:stage05 end -->\n", "03-fused-kernels/README.md": "# 03, no markers\n",
                     "README.md": "# top\n<!-- ladder:headline begin -->\n<!-- ladder:headline end -->\n"}
            for name, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
                with open(os.path.join(root, name), "w") as f:
                    f.write(text)
            untouched = os.path.join(root, "03-fused-kernels", "README.md")
            before = os.stat(untouched).st_mtime_ns

            self.assertEqual(self.run_main("--root", root), 0)
            results = os.path.join(root, "docs", "RESULTS.md")
            with open(results) as f:
                first = f.read()
            self.assertTrue(first.startswith("# title\n\nprose\n<!-- ladder:regression begin -->\n**Regression"))
            self.assertIn("<!-- ladder:regression end -->\nmiddle\n<!-- ladder:mnist begin -->\n**MNIST", first)
            self.assertTrue(first.endswith("<!-- ladder:mnist end -->\nend\n"))
            self.assertNotIn("stale", first)
            self.assertIn("`results/fixture-gpu.csv`", first)
            with open(os.path.join(root, "05-streams", "README.md")) as f:
                self.assertIn("| regression 5M | 05 streams |", f.read())
            with open(os.path.join(root, "README.md")) as f:
                self.assertIn("| 05 streams | — | 100 | 5.00× (vs 03) | 1.50× |", f.read())
            self.assertEqual(os.stat(untouched).st_mtime_ns, before)

            self.assertEqual(self.run_main("--root", root, "--check"), 0)
            self.assertEqual(self.run_main("--root", root), 0)
            with open(results) as f:
                self.assertEqual(f.read(), first)
            with open(results, "w") as f:
                f.write(first.replace("10.00×", "11.00×"))
            self.assertEqual(self.run_main("--root", root, "--check"), 1)


class TryRoundsTest(unittest.TestCase):
    """The rounds table, from a copy of a real `make stage 4 try` output (results/nvidia-h100-80gb-hbm3-try-04-regression.txt)."""
    FIXTURE = os.path.join(FIXTURES, "fixture-gpu-try-04-regression.txt")

    def test_parse_a_real_output(self):
        r = make_tables.parse_try_file(self.FIXTURE)
        self.assertEqual((r["stage"], r["trainer"]), ("04", "regression"))
        self.assertEqual(r["answer"], "04-shared-memory/assistant/regression.answer.md")
        self.assertEqual((r["commit"], r["state"], r["device"]), ("615f77392bc0", "clean", "NVIDIA H100 80GB HBM3"))
        self.assertEqual(r["own"], {"variant": "shared", "e2e": "14.19", "loop": "7.466"})
        self.assertEqual(r["candidate"], {"variant": "block-reduce", "e2e": "12.83", "loop": "6.804"})
        self.assertEqual(r["speed"], "1.10x (faster)")
        self.assertTrue(r["verdict"].startswith("try: PASS"))

    def test_block_by_stage(self):
        with tempfile.TemporaryDirectory() as results:
            shutil.copy(self.FIXTURE, results)
            rounds = make_tables.try_rounds(results)
            line = "| 04 | regression | [`04-shared-memory/assistant/regression.answer.md`](regression.answer.md) | PASS | " \
                   "14.19 | 12.83 | 7.466 | 6.804 | 1.10x (faster) | NVIDIA H100 80GB HBM3 | 615f77392bc0 (clean) |"
            self.assertIn(line, make_tables.rounds_block(rounds, "04", "04-shared-memory/assistant"))
            self.assertIn("(../results/fixture-gpu-try-04-regression.txt)", make_tables.rounds_block(rounds, None, "02-x"))
            self.assertIn("No round recorded yet", make_tables.rounds_block(rounds, "03"))

    def test_verdict_word(self):
        for last, word in (("try: PASS, relative loop speed 1.10x (faster)", "PASS"), ("try: NOT RUN", "NOT RUN"),
                           ("try: FAIL (a.cu: FAIL, b.cu: PASS)", "FAIL"),
                           ("try: UNVERIFIED (no CUDA device)", "UNVERIFIED")):
            self.assertEqual(make_tables.TRY_VERDICT.fullmatch(last).group("verdict"), word, last)

    def test_refuses_what_try_did_not_print(self):
        with tempfile.TemporaryDirectory() as results:
            with open(self.FIXTURE) as f:
                lines = f.read().split("\n")
            broken = {"no-header": lines[1:], "no-verdict": lines[:-2],
                      "no-timed-runs": [line for line in lines if not line.startswith("stage 04")]}
            for name, text in broken.items():
                path = os.path.join(results, f"{name}-try-04-regression.txt")
                with open(path, "w") as f:
                    f.write("\n".join(text))
                with self.assertRaises(make_tables.TableError, msg=name):
                    make_tables.parse_try_file(path)


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
        # the Makefile's GPU_SLUG and tools/loop.sh spell it through report_rows.py
        self.assertEqual(report("gpu-slug", "NVIDIA H100 80GB HBM3"), (0, "nvidia-h100-80gb-hbm3\n"))

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
        for stage in ("04", "06", "07", "08"):
            self.assertEqual(runs[(stage, "regression", "variant")], (None, ("",)))  # every variant
        self.assertIsNone(runs[("04", "mnist", "variant")][0])  # every tile shape
        self.assertIsNone(runs[("07", "mnist", "variant")][0])  # epoch-graph and step-graph
        self.assertEqual(runs[("08", "mnist", "variant")], (None, rc.MNIST_HIDDEN))  # epoch-graph, step-graph
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


class LoopTableTest(unittest.TestCase):
    """make loop's rows: the newest run of each round, the hand-written stages, verdicts from the records, and the
    outcome against the study's 50 % (a fake repository with two rounds, one failed)."""
    STAGES = "loop-stages-20261128T220000Z"

    def rows(self):
        rows = [regression_row(s, "v", e2e) for s, e2e in (("02", 4000.0), ("03", 2800.0), ("08", 4.0))]
        for row in rows:
            row["run_id"] = self.STAGES
        for run, candidate in (("loop-regression-open-r1-20261128T221000Z", 2500.0),  # an older try of round 1
                               ("loop-regression-open-r1-20261128T223000Z", 40.0),
                               ("loop-regression-guided-r1-20261128T223100Z", 2100.0)):
            for stage, e2e in (("02", 4000.0), ("02-try", candidate), ("08", 4.0)):
                rows.append(dict(regression_row(stage, "v", e2e), run_id=run))
        for row in rows:
            row["setup_ms"] = "1"
        return rows

    def repository(self, root):
        os.makedirs(os.path.join(root, "tools"))
        with open(os.path.join(root, make_tables.STAGE_IDEAS), "w") as f:
            f.write("# stage, marker, idea, removes\n03\tfused\tkernel fusion: one kernel\tlaunches\n")
        for run, k, last in (("regression", 1, "try: PASS, relative loop speed 99x (faster)"),
                             ("regression", 2, "try: FAIL (regression.cu: FAIL)"),
                             ("regression-guided", 1, "try: PASS, relative loop speed 1.9x (faster)")):
            folder = os.path.join(root, make_tables.LOOP_DIR, run, f"round-{k}")
            os.makedirs(folder)
            with open(os.path.join(folder, "verdict.txt"), "w") as f:
                f.write(f"# make loop ...\n{last}\n")

    def test_rounds_and_stages(self):
        def figures(run):
            return {stage: rc.loop_figure(row) for stage, row in run.items()}
        rounds = rc.loop_rounds(self.rows())
        self.assertEqual(figures(rounds[("regression", "open", 1)]), {"02": 4000.0, "02-try": 40.0, "08": 4.0})
        self.assertEqual(figures(rc.loop_stages(self.rows())["regression"]), {"02": 4000.0, "03": 2800.0, "08": 4.0})

    def test_table_and_outcome(self):
        with tempfile.TemporaryDirectory() as root:
            self.repository(root)
            datasets = [("results/loop/fixture-gpu.csv", self.rows())]
            table = make_tables.loop_block(datasets, root)
            self.assertIn("| stage 03 | hand-written | 2,800 | 4,000 | 1.43× | 30 % | 2,801 | 5.00 | 4.00 |", table)
            self.assertIn("| open round 1 | PASS | 40.0 | 4,000 | 100× | 99.0 % | 41.0 | 5.00 | 4.00 |", table)
            self.assertIn("| open round 2 | FAIL | — | — | — | — | — | — | — |", table)
            self.assertIn("| guided round 1 (03: kernel fusion) | PASS | 2,100 | 4,000 | 1.90× | 48 % | 2,101 | 5.00 | 4.00 |", table)
            outcome = make_tables.loop_outcome_block(datasets, root)
            self.assertIn("the best of 2 open rounds (1 passed), round 1, removed **99.0 % (100×)**, 0.100× stage 08 of "
                          "its run; the best of 1 guided rounds (1 passed), round 1, removed **48 % (1.90×)**", outcome)
            self.assertIn("Against the study's figures: 50 % **hit**, 90 % **hit**.", outcome)
            self.assertIn("The hand-written stages removed 03 30 % (1.43×), 08 99.90 % (1,000×).", outcome)
            self.assertIn("**hit**", outcome)
            miss = [r for r in self.rows() if "-open-" not in r["run_id"]]
            self.assertIn("50 % **miss**, 90 % **miss**", make_tables.loop_outcome_block([("x.csv", miss)], root))
            self.assertIn("No round measured yet", make_tables.loop_block([], root))

    def test_figure_data(self):
        [(trainer, series, hand)] = plots.loop_data(self.rows())
        self.assertEqual(trainer, "regression")
        self.assertEqual(series, {"guided": [(1, 2100.0, 4000.0)], "open": [(1, 40.0, 4000.0)]})
        self.assertEqual(hand, [("02", 4000.0), ("03", 2800.0), ("08", 4.0)])


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
            os.makedirs(os.path.join(root, "common"))
            with open(os.path.join(root, "04-shared-memory", "regression.cu"), "w") as f:
                f.write('// x\nconst char *const REGRESSION_VARIANTS[] = {"shared", "atomic", NULL};\n')
            with open(os.path.join(root, "04-shared-memory", "mnist.cu"), "w") as f:
                f.write('const char *const MNIST_VARIANTS[] = {\n    "tile16-2x2", "tile16", NULL};\n')
            with open(os.path.join(root, "common", "mnist.cu"), "w") as f:
                f.write('const char *const MNIST_VARIANTS[] = {"x", NULL};\n')
            self.assertEqual(rc.source_default_variants(root),
                             {("04", "regression"): "shared", ("04", "mnist"): "tile16-2x2"})
        self.assertEqual(rc.source_default_variants(os.path.join(ROOT, "no-such-folder")), {})

    def test_every_trainer_stage_of_the_repository_names_its_default(self):
        found = rc.source_default_variants(ROOT)
        for stage, name in rc.stage_dirs(ROOT).items():
            for trainer in ("regression", "mnist"):
                if os.path.exists(os.path.join(ROOT, name, f"{trainer}.cu")):
                    self.assertRegex(found.get((stage, trainer), ""), r"^[\w.-]+$", f"{name}/{trainer}.cu")


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

    def test_linked_with_its_verdict(self):
        block = make_tables.sanitize_block(make_tables.sanitize_summaries(self.dir), self.dir)
        self.assertIn("[`results/fixture-gpu-sanitize.txt`](../results/fixture-gpu-sanitize.txt) (compute-sanitizer "
                      "1.0 on FIXTURE-GPU, commit abc, 4 runs at a time, 9 s in all)", block)
        self.assertIn("*sanitize: 1 of 6 runs not clean", block)
        self.assertNotIn("SAN_VARIANTS=all", block)

    def test_stage_rows_only(self):
        block = make_tables.sanitize_block(make_tables.sanitize_summaries(self.dir), self.dir, "05")
        self.assertIn(", stage 05: mnist: clean under all 2 tools; regression: clean under all 2 tools.", block)
        self.assertNotIn("06", block)
        self.assertNotIn("sanitize: 1 of 6", block)
        block = make_tables.sanitize_block(make_tables.sanitize_summaries(self.dir), self.dir, "06")
        self.assertIn(", stage 06: mnist: racecheck 2 errors (library) 5s.", block)

    def test_all_variants_summary_is_named_with_its_verdict(self):
        with open(os.path.join(self.dir, "fixture-gpu-sanitize-all-variants.txt"), "w") as f:
            f.write(self.SUMMARY.replace("1 of 6", "3 of 20"))
        block = make_tables.sanitize_block(make_tables.sanitize_summaries(self.dir), self.dir)
        self.assertIn("(../results/fixture-gpu-sanitize-all-variants.txt), which ends: *sanitize: 3 of 20 runs", block)

    def test_no_summary_and_no_rows_of_a_stage(self):
        self.assertIn("Not run yet", make_tables.sanitize_block([], self.dir))
        summaries = make_tables.sanitize_summaries(self.dir)
        self.assertIn("Not run yet", make_tables.sanitize_block(summaries, self.dir, "02"))


class KernelLadderTest(unittest.TestCase):
    """the kernel ladders (bench/make_tables.py) on fixture-gpu-ladders.csv: an older 04 reduce run (fix0001), the newer one
    (fix0002, version 5 missing), and a 06 gemm run of two shapes, three of its rows with a setup time."""

    LADDERS_CSV = os.path.join(FIXTURES, "fixture-gpu-ladders.csv")

    def rows(self):
        return rc.read_csv(self.LADDERS_CSV, make_tables.LADDER_COLUMNS)

    def test_columns_are_ladder_h_header(self):
        header = c_string_macro(os.path.join(ROOT, "common", "ladder.h"), "LADDER_CSV_HEADER")
        self.assertEqual(",".join(make_tables.LADDER_COLUMNS), header)

    def test_files_told_apart_by_header(self):
        self.assertEqual(rc.result_files(FIXTURES, make_tables.LADDER_COLUMNS), [self.LADDERS_CSV])
        self.assertNotIn(self.LADDERS_CSV, rc.result_files(FIXTURES))

    def test_the_last_run_is_the_table(self):
        run = make_tables.last_run(self.rows(), "04", "reduce")
        self.assertEqual([r["version"] for r in run], ["1", "2", "3", "4", "6"])
        self.assertEqual({r["commit"] for r in run}, {"fix0002"})
        self.assertEqual(make_tables.last_run(self.rows(), "04", "gemm"), [])

    def test_lines(self):
        lines = make_tables.kernel_ladder_lines(make_tables.last_run(self.rows(), "04", "reduce"))
        # version, name, ms (min–max), rate, % of ceiling, step, cumulative, setup
        self.assertEqual(lines[0], ["1", "`atomic`", "16.0 (15.0–17.0)", "2.00", "0.1%", "—", "1.00×", ""])
        self.assertEqual(lines[1][2:7], ["0.160 (0.150–0.200)", "200", "10.0%", "100.00×", "100.00×"])
        self.assertEqual(lines[2][5:7], ["0.50×", "50.00×"])
        self.assertEqual(lines[4][2:7], ["0.0200 (0.0190–0.0250)", "1,600", "80.0%", "4.00× (vs 4)", "800.00×"])
        self.assertEqual(lines[5][1:5], ["ceiling: read-only kernel", "0.0160", "2,000", "100%"])

    def test_one_table_per_shape_and_setup_only_where_measured(self):
        block = make_tables.kernel_ladder_block([("results/fixture-gpu-ladders.csv", self.rows())], "06", "gemm")
        first, second = block.split("**Stage 06 · gemm ladder · 128x784x128**")
        self.assertIn("**Stage 06 · gemm ladder · 128x784x10**", first)
        self.assertIn("| setup ms |", first)
        self.assertIn("| 4 | `lt-autotuned` | 0.00400 (0.00400–0.00500) | 500 | 125.0% | 2.00× | 2.50× | 25.0 |", first)
        self.assertIn("1.25× (vs 1)", first)
        self.assertNotIn("setup ms", second)
        self.assertIn("FIXTURE-GPU · `results/fixture-gpu-ladders.csv` · commit fix0002", first)
        self.assertIn("Not measured yet", make_tables.kernel_ladder_block([], "04", "reduce"))
        self.assertEqual(rc.three_digits(0.00523), "0.00523")
        self.assertEqual(rc.three_digits(1234.4), "1,234")

    def test_upload_ladder_has_its_own_footnote(self):
        values = ["05", "upload", "4000000 points, 8 threads x 4096 KiB", "4", "host-register", "9", "8", "10", "6",
                  "3.56", "GB/s", "pinned cudaMemcpy", "0.64", "50", "20", "FIXTURE-GPU", "9.0", "13.0", "13.0",
                  "fix0003", "20250103T000000Z-300"]
        row = dict(zip(make_tables.LADDER_COLUMNS, values))
        block = make_tables.kernel_ladder_block([("results/fixture-gpu-ladders.csv", [row])], "05", "upload")
        self.assertIn("| 4 | `host-register` | 9.00 (8.00–10.0) | 3.56 | 7.1% | — | 1.00× | 6.00 |", block)
        self.assertIn("ceiling: pinned cudaMemcpy", block)
        self.assertIn("| % of ceiling |", block)  # a bound, not a baseline (LADDER_BASELINES)
        self.assertIn(make_tables.LADDER_FOOTNOTES["upload"], block)
        self.assertNotIn(make_tables.LADDER_FOOTNOTE, block)

    def test_persistent_ladder_block(self):
        """08's ladder: per-step rows of two shapes against the kernel-graph baseline (named so whether a row says
        kernel-graph or the older step-graph), "baseline" where other ladders say "ceiling", its own footnote."""
        rows = []
        for shape, ms, reference in (("hidden 0, batch 128, 128 steps", 0.02, "kernel-graph"),
                                     ("hidden 128, batch 128, 128 steps", 0.04, "step-graph")):
            for version, name, scale in ((1, "cooperative", 1.0), (2, "shared-weights", 0.5), (4, "async-copy", 0.25)):
                values = ["08", "persistent", shape, str(version), name, str(ms * scale), str(ms * scale * 0.9),
                          str(ms * scale * 1.2), "", "100", "GFLOP/s", reference, str(ms * 2), "50", "20",
                          "FIXTURE-GPU", "9.0", "13.0", "13.0", "fix0004", "20250104T000000Z-400"]
                rows.append(dict(zip(make_tables.LADDER_COLUMNS, values)))
        block = make_tables.kernel_ladder_block([("results/fixture-gpu-ladders.csv", rows)], "08", "persistent")
        first, second = block.split("**Stage 08 · persistent ladder · hidden 128, batch 128, 128 steps**")
        self.assertIn("**Stage 08 · persistent ladder · hidden 0, batch 128, 128 steps**", first)
        self.assertIn("| # | version | ms (min–max) | GFLOP/s | % of baseline | step | cumulative |", first)
        self.assertIn("| 2 | `shared-weights` | 0.0100 (0.00900–0.0120) | 100 | 200.0% | 2.00× | 2.00× |", first)
        self.assertIn("| 4 | `async-copy` | 0.00500 (0.00450–0.00600) | 100 | 200.0% | 2.00× (vs 2) | 4.00× |", first)
        self.assertIn("|  | baseline: kernel-graph | 0.0400 | 50.0 | 100% |", first)
        self.assertIn("|  | baseline: kernel-graph | 0.0800 | 50.0 | 100% |", second)
        self.assertNotIn("step-graph", block)
        self.assertNotIn("ceiling", block)
        self.assertIn(make_tables.LADDER_FOOTNOTES["persistent"], second)
        self.assertNotIn("setup ms", block)
        self.assertEqual(rows[-1]["ceiling"], "step-graph")  # the rows themselves are left as recorded
        self.assertIn("Not measured yet: run `make stage 8 ladder RECORD=1`", make_tables.kernel_ladder_block([], "08", "persistent"))

    def test_regression_ladder_beside_the_results_ladder(self):
        """08's kernel ladder regression_ladder.cu fills ladder:regression of 08's README, with its own footnote;
        docs/RESULTS.md's ladder:regression (the trainers' stage ladder) stays the other table."""
        values = ["08", "regression", "4000000 points, 200 epochs", "2", "on-chip", "0.004", "0.0039", "0.0045", "",
                  "8000", "GB/s", "graphs", "0.016", "2000", "20", "FIXTURE-GPU", "9.0", "13.0", "13.0", "fix0005",
                  "20250105T000000Z-500"]
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "results"))
            os.makedirs(os.path.join(root, "docs"))
            os.makedirs(os.path.join(root, "08-persistent-kernels"))
            with open(os.path.join(root, "results", "fixture-gpu-ladders.csv"), "w") as f:
                f.write(",".join(make_tables.LADDER_COLUMNS) + "\n" + ",".join(f'"{v}"' for v in values) + "\n")
            with open(os.path.join(root, "08-persistent-kernels", "regression_ladder.cu"), "w") as f:
                f.write("// the ladder\n")
            readme = os.path.join(root, "08-persistent-kernels", "README.md")
            results = os.path.join(root, "docs", "RESULTS.md")
            for path in (readme, results):
                with open(path, "w") as f:
                    f.write("# title\n<!-- ladder:regression begin -->\n<!-- ladder:regression end -->\n")
            self.assertEqual(MarkerTest.run_main("--root", root), 0)
            with open(readme) as f:
                text = f.read()
            self.assertIn("**Stage 08 · regression ladder · 4000000 points, 200 epochs**", text)
            self.assertIn("| 2 | `on-chip` | 0.00400 (0.00390–0.00450) | 8,000 | 400.0% | — | 1.00× |", text)
            self.assertIn("|  | baseline: graphs | 0.0160 | 2,000 | 100% |", text)
            self.assertIn(make_tables.LADDER_FOOTNOTES["regression"], text)
            with open(results) as f:
                self.assertNotIn("regression ladder", f.read())

    def test_main_writes_stage_readmes(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "results"))
            shutil.copy(self.LADDERS_CSV, os.path.join(root, "results"))
            os.makedirs(os.path.join(root, "04-shared-memory"))
            os.makedirs(os.path.join(root, "06-cublas-cudnn"))
            with open(os.path.join(root, "04-shared-memory", "gemm_ladder.cu"), "w") as f:
                f.write("// a ladder not measured yet\n")
            readme04 = os.path.join(root, "04-shared-memory", "README.md")
            with open(readme04, "w") as f:
                f.write("# 04\n<!-- ladder:reduce begin -->\nstale\n<!-- ladder:reduce end -->\n"
                        "<!-- ladder:gemm begin -->\n<!-- ladder:gemm end -->\nend\n")
            readme06 = os.path.join(root, "06-cublas-cudnn", "README.md")
            with open(readme06, "w") as f:
                f.write("# 06, no markers\n")
            before = os.stat(readme06).st_mtime_ns

            self.assertEqual(MarkerTest.run_main("--root", root), 0)
            with open(readme04) as f:
                text = f.read()
            self.assertTrue(text.startswith("# 04\n<!-- ladder:reduce begin -->\n**Stage 04 · reduce ladder"))
            self.assertNotIn("stale", text)
            self.assertIn("<!-- ladder:gemm begin -->\n*Not measured yet: run `make stage 4 ladder RECORD=1`", text)
            self.assertTrue(text.endswith("<!-- ladder:gemm end -->\nend\n"))
            self.assertEqual(os.stat(readme06).st_mtime_ns, before)

            self.assertEqual(MarkerTest.run_main("--root", root, "--check"), 0)
            with open(readme04, "w") as f:
                f.write(text.replace("800.00×", "801.00×"))
            self.assertEqual(MarkerTest.run_main("--root", root, "--check"), 1)


# ----------------------------------------------------------------------------
# provenance: which commit, which run, when

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

    @staticmethod
    def with_makefile(tree):
        """tree with a copy of the Makefile, untracked (the tree stays clean), which works the commit out."""
        os.makedirs(tree, exist_ok=True)
        shutil.copy(os.path.join(ROOT, "Makefile"), tree)
        return tree

    def test_git_only_at_the_top_of_a_work_tree(self):
        head = git_repo(self.tmp)
        self.with_makefile(self.tmp)
        self.assertEqual(provenance.make_answer(self.tmp), (head, "0"))
        self.assertEqual(provenance.build_record(self.tmp), (head, "0"))  # what make recorded
        copy = self.with_makefile(os.path.join(self.tmp, "copy"))  # a copy of the tree inside another repository
        self.assertEqual(provenance.make_answer(copy), (None, ""))
        self.assertEqual(provenance.resolve_commit(copy, environ={}), ("unknown", "", "unknown"))
        write(os.path.join(copy, "build", ".commit"), "c0ffee123456\n")
        write(os.path.join(copy, "build", ".dirty"), "0\n")
        self.assertEqual(provenance.resolve_commit(copy, environ={}), ("c0ffee123456", "0", "build/.commit"))
        write(os.path.join(self.tmp, "a.txt"), "changed\n")
        self.assertEqual(provenance.make_answer(self.tmp), (head, "1"))

    def test_order_of_preference(self):
        head = git_repo(self.tmp)
        self.with_makefile(self.tmp)
        self.assertEqual(provenance.resolve_commit(self.tmp, environ={}), (head, "0", "make"))
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

    # The make that runs this suite (make test GIT_COMMIT_ID=...) passes its command-line variables down in
    # MAKEFLAGS, where they would override the tree's own answer: drop them, and SANITIZE (make test
    # SANITIZE=1 exports it), which would send the copy's make to build-asan/ instead of build/.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "SANITIZE")}
    env.update(GIT_COMMIT_ID="", GIT_DIRTY="")

    def info(self, tree, *args):
        out = subprocess.run(["make", "-s", "--no-print-directory", "commit-info", *args], cwd=tree,
                             capture_output=True, text=True, env=self.env)
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



# ----------------------------------------------------------------------------
# setup and wall, spread, one run per table, the torch.compile audit, predictions

def timed_row(stage, trainer="mnist", hidden="128", setup=None, e2e=100.0, per_epoch=9.0, epochs=10, run="run-1",
              variant="default", precision="fp32", **columns):
    """A schema 2 row: e2e and ms/epoch as given, loop = e2e - 5, three repeats of e2e ± 10%."""
    row = result_row(stage=stage, trainer=trainer, variant=variant, precision=precision, epochs=epochs,
                     e2e_ms=e2e, loop_ms=e2e - 5, ms_per_epoch=per_epoch, repeats=3, e2e_min_ms=0.9 * e2e,
                     e2e_max_ms=1.1 * e2e, run_id=run, commit="c16")
    if trainer == "regression":
        row.update(points=str(rc.REGRESSION_POINTS), epochs=str(rc.REGRESSION_EPOCHS if epochs == 10 else epochs))
    else:
        row.update(hidden=hidden, batch="128")
    if setup is not None:
        row["setup_ms"] = str(setup)
    row.update({k: str(v) for k, v in columns.items()})
    return row


class MixedRunsPolicy:
    """Runs a block with make_tables.MIXED_RUNS set, and puts it back."""

    def __init__(self, policy):
        self.policy = policy

    def __enter__(self):
        self.saved, make_tables.MIXED_RUNS = make_tables.MIXED_RUNS, self.policy

    def __exit__(self, *exc):
        make_tables.MIXED_RUNS = self.saved


class SetupWallSpreadTest(unittest.TestCase):
    def test_wall_is_setup_plus_e2e_and_needs_both(self):
        self.assertEqual(rc.wall_ms(timed_row("07", setup=130, e2e=227)), 357)
        self.assertIsNone(rc.wall_ms(timed_row("07", e2e=227)))  # no setup recorded
        self.assertEqual(make_tables.fmt_3(None), "—")
        self.assertEqual(make_tables.fmt_3(0.0), "0")
        self.assertEqual(make_tables.fmt_3(49.5), "49.5")

    def test_spread(self):
        row = timed_row("05", e2e=20)
        self.assertEqual(rc.spread(row), (3, 18.0, 22.0))
        self.assertEqual(make_tables.fmt_spread(row), "18.0–22.0 (n=3)")
        self.assertEqual(make_tables.fmt_spread(dict(row, repeats="1")), "n=1")
        self.assertEqual(make_tables.fmt_spread(dict(row, repeats="")), "—")

    def test_ladder_shows_setup_wall_and_both_step_speedups(self):
        # the issue's H100 figures, MNIST --hidden 128: 07 faster in e2e, slower in wall
        rows = [timed_row("06", setup=52, e2e=250, per_epoch=24), timed_row("07", setup=130, e2e=227, per_epoch=21.5)]
        lines = table_lines(rows, rc.Config("mnist", "128"))
        seven = lines["07"]
        self.assertEqual([seven[c] for c in (SETUP, E2E, WALL, SPREAD)], ["130", "227", "357", "204–250 (n=3)"])
        self.assertEqual([seven[c] for c in (STEP, STEP_WALL)], ["1.10×", "0.85×"])  # 250/227, 302/357
        block = make_tables.ladder_block([("results/x.csv", rows)], "mnist")
        self.assertIn("| step speedup (e2e) | step speedup (wall) |", block)
        self.assertIn("wall = setup + e2e", block)

    def test_payback(self):
        six, seven = (rc.Entry(timed_row("06", setup=52, e2e=250, per_epoch=24), 10),
                      rc.Entry(timed_row("07", setup=130, e2e=227, per_epoch=21.5), 10))
        # fixed: 06 52 + 250 - 240 = 62, 07 130 + 227 - 215 = 142; 80 ms more, 2.5 ms an epoch less: 32 epochs
        self.assertEqual(make_tables.payback(six, seven), (32, "after"))
        later = rc.Entry(timed_row("07", setup=131, e2e=227, per_epoch=21.5), 10)
        self.assertEqual(make_tables.payback(six, later), (33, "after"))  # 81 / 2.5 = 32.4: the 33rd epoch
        sentence = make_tables.payback_sentence(rc.Config("mnist", "128"), six, seven)
        self.assertIn("its larger fixed cost pays back after 32 epochs", sentence)
        self.assertIn("wall 357 against 302 ms (0.85×)", sentence)
        slower = rc.Entry(timed_row("07", setup=130, e2e=300, per_epoch=25), 10)
        self.assertEqual(make_tables.payback(six, slower), (None, "never"))
        cheap = rc.Entry(timed_row("07", setup=10, e2e=245, per_epoch=24), 10)
        self.assertEqual(make_tables.payback(six, cheap), (0, "at once"))
        cheap_slow = rc.Entry(timed_row("07", setup=0, e2e=250, per_epoch=24.5), 10)
        # fixed 5 against 62: 57 ms ahead, 0.5 ms an epoch behind: ahead for 114 epochs
        self.assertEqual(make_tables.payback(six, cheap_slow), (114, "until"))
        self.assertEqual(make_tables.payback(six, rc.Entry(timed_row("07", e2e=227), 10)), (None, None))

    def test_stage_block_says_when_the_setup_pays_back(self):
        rows = [timed_row("06", setup=52, e2e=250, per_epoch=24), timed_row("07", setup=130, e2e=227, per_epoch=21.5),
                timed_row("06", "regression", setup=5, e2e=15, per_epoch=0.06, run="run-1"),
                timed_row("07", "regression", setup=8, e2e=6, per_epoch=0.01)]
        block = make_tables.stage_block([("results/x.csv", rows)], "07")
        self.assertIn("**When stage 07's fixed cost pays back**", block)
        # the fixed costs the break-even compares are shown, so that it can be checked: (142 - 62) / 2.5 = 32
        self.assertIn("- MNIST --hidden 128, against 06: fixed cost 142 ms against 62.0 ms (setup 130 against 52.0), "
                      "21.5 against 24.0 ms an epoch: its larger fixed cost pays back after 32 epochs", block)
        self.assertIn("- regression 5M, against 06:", block)
        self.assertIn("| MNIST --hidden 128 | 07 | 130 | 227 | 357 | 204–250 (n=3) |", block)
        lines, _, _ = make_tables.stage_lines(rows, "07")
        seven = next(cells for cells in lines if cells[:2] == ["MNIST --hidden 128", "07"])
        self.assertEqual(seven[9:12], ["1.10×", "0.85×", "1.12×"])
        self.assertNotIn("pays back", make_tables.stage_block([("results/x.csv", rows)], "06"))  # nothing before

    def test_files_of_another_header_are_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "old-gpu.csv")
            with open(path, "w") as f:
                f.write("stage,trainer,e2e_ms,commit\n05,mnist,100,abc\n")
            self.assertEqual(rc.result_files(tmp), [])
            with self.assertRaises(rc.SchemaError):
                rc.read_csv(path, rc.RESULT_COLUMNS)
            with self.assertRaises(rc.SchemaError):
                rc.append_csv(path, rc.RESULT_COLUMNS, [timed_row("05")])
        self.assertEqual(rc.schema_of(rc.RESULT_COLUMNS, rc.RESULT_COLUMNS), rc.SCHEMA_VERSION)
        self.assertEqual(rc.schema_of(("stage", "e2e_ms"), rc.RESULT_COLUMNS), None)

    def test_a_row_without_setup_or_spread_shows_dashes(self):
        row = timed_row("05", setup="", e2e_min_ms="", e2e_max_ms="", repeats="")
        lines = make_tables.ladder_lines(rc.select_entries([row], rc.Config("mnist", "128")))
        self.assertEqual([lines[0][c] for c in (SETUP, WALL, SPREAD)], ["—", "—", "—"])

    def test_curves_of_another_header_are_not_folded_together(self):
        with tempfile.TemporaryDirectory() as tmp:
            plain = os.path.join(tmp, "x-curves.csv")
            with open(plain, "w") as f:
                f.write("stage,trainer,variant,hidden,series,index,value\n05,mnist,a,0,step_loss,0,1.5\n")
            rc.compress_curves(plain)
            with open(plain, "w") as f:
                f.write(",".join(rc.CURVE_COLUMNS) + "\n05,mnist,a,0,step_loss,0,1.5,GPU,c16,run-1\n")
            with self.assertRaises(rc.SchemaError):
                rc.compress_curves(plain)

    def test_source_line_names_run_dirty_torch_and_threads(self):
        rows = [timed_row("05"), timed_row("pytorch", variant="eager", torch="2.9.0"),
                timed_row("pytorch", variant="cpu", torch="2.9.0", threads=16),
                dict(timed_row("cpu-reference", threads=1), precision="fp64")]
        line = make_tables.source_line(rows, "GPU", "x.csv")
        self.assertEqual(line, "GPU · `x.csv` · commit c16 · run `run-1` · torch 2.9.0 · CPU threads: PyTorch cpu 16, "
                               "CPU reference 1")
        # the CPU reference's rows of several configurations name its threads once
        again = rows + [dict(timed_row("cpu-reference", threads=1), precision="fp64", hidden="128")]
        self.assertTrue(make_tables.source_line(again, "GPU", "x.csv").endswith("PyTorch cpu 16, CPU reference 1"))
        rows[0]["dirty"] = "1"
        self.assertIn("**built with uncommitted changes**", make_tables.source_line(rows, "GPU", "x.csv"))


class OneRunPerTableTest(unittest.TestCase):
    def setUp(self):
        self.rows = [timed_row("05", run="run-1"), timed_row("06", run="run-1"), timed_row("07", run="run-2")]

    def test_rows_of_two_runs_are_refused(self):
        with MixedRunsPolicy("refuse"):
            with self.assertRaisesRegex(make_tables.TableError, "a table shows one run") as caught:
                make_tables.ladder_table(self.rows, rc.Config("mnist", "128"), "x.csv")
        self.assertIn("2 runs (`run-1`, `run-2`)", str(caught.exception))
        with MixedRunsPolicy("refuse"):
            with self.assertRaisesRegex(make_tables.TableError, "a table shows one run"):
                make_tables.stage_block([("x.csv", self.rows)], "07")
            one = make_tables.ladder_table(self.rows[:2], rc.Config("mnist", "128"), "x.csv")
        self.assertNotIn("⚠", one)
        self.assertIn("run `run-1`", one)

    def test_or_marked_when_allowed(self):
        with MixedRunsPolicy("mark"):
            text = make_tables.ladder_table(self.rows, rc.Config("mnist", "128"), "x.csv")
        self.assertIn("**⚠ Rows of 2 runs**, not one measurement: `run-1`: 05, 06; `run-2`: 07.", text)

    def test_rows_that_record_no_run_are_marked(self):
        old = [dict(r, run_id="") for r in self.rows]
        text = make_tables.ladder_table(old, rc.Config("mnist", "128"), "x.csv")
        self.assertIn("⚠ Run not recorded", text)
        with MixedRunsPolicy("refuse"):  # recorded and not recorded together: two runs
            with self.assertRaisesRegex(make_tables.TableError, "a table shows one run"):
                make_tables.ladder_table(old[:2] + self.rows[2:], rc.Config("mnist", "128"), "x.csv")

    def test_main_refuses_unless_told(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "results"))
            path = os.path.join(root, "results", "gpu.csv")
            rc.append_csv(path, rc.RESULT_COLUMNS, self.rows)
            os.makedirs(os.path.join(root, "docs"))
            with open(os.path.join(root, "docs", "RESULTS.md"), "w") as f:
                f.write("<!-- ladder:mnist begin -->\n<!-- ladder:mnist end -->\n")
            self.assertEqual(MarkerTest.run_main("--root", root), 1)
            self.assertEqual(MarkerTest.run_main("--root", root, "--allow-mixed-runs"), 0)
            with open(os.path.join(root, "docs", "RESULTS.md")) as f:
                self.assertIn("Rows of 2 runs", f.read())
        self.assertEqual(make_tables.MIXED_RUNS, "refuse")


class AnswerKeyTest(unittest.TestCase):
    """TEACHING.md's answer key: per stage its newest default fp32 rows, e2e with ± 20%, one table per results
    file (results_tables: one run per table, the footnote once)."""

    def test_stages_ranges_and_runs(self):
        rows = [timed_row("07", hidden="128", e2e=100.0, per_epoch=9.0), timed_row("08", hidden="0", e2e=50.0),
                timed_row("08", hidden="0", e2e=10.0, precision="bf16")]
        block = make_tables.answer_key_block([("results/x.csv", rows), ("results/y.csv", rows)], ["06", "07", "08"])
        self.assertIn("| 07 | — | — | — | 100 (80.0–120) | 9.00 |", block)
        self.assertIn("| 08 | — | — | 50.0 (40.0–60.0) | — | — |", block)  # the bf16 row is not the key's
        self.assertNotIn("| 06 |", block)
        self.assertIn("`results/y.csv` · commit c16 · run `run-1`", block)
        self.assertEqual(block.count("Generated by"), 1)
        self.assertEqual(make_tables.answer_key_block([], ["07"]), make_tables.NO_RESULTS)
        with MixedRunsPolicy("refuse"):
            with self.assertRaisesRegex(make_tables.TableError, "a table shows one run"):
                make_tables.answer_key_block([("results/x.csv", rows + [timed_row("06", run="run-2")])], ["06", "07"])


class CompileAuditTest(unittest.TestCase):
    def rows(self, breaks, recompiles):
        return [timed_row("07"), timed_row("pytorch", variant="eager"),
                timed_row("pytorch", variant="compile-default", graph_breaks=breaks, recompiles=recompiles),
                timed_row("pytorch", variant="bf16-compile-max-autotune", precision="bf16", graph_breaks=0,
                          recompiles=0)]

    def test_audit(self):
        self.assertEqual(rc.compile_audit(timed_row("pytorch", variant="eager")), (True, ""))
        self.assertEqual(rc.compile_audit(timed_row("pytorch", variant="compile-default", graph_breaks=0,
                                                    recompiles=0)), (True, ""))
        self.assertEqual(rc.compile_audit(timed_row("pytorch", variant="compile-default", graph_breaks=2,
                                                    recompiles=1)), (False, "2 graph breaks, 1 recompile"))
        self.assertEqual(rc.compile_audit(timed_row("pytorch", variant="compile-max-autotune"))[0], False)

    def test_a_clean_compile_row_is_a_result(self):
        labels = [e.label() for e in rc.select_entries(self.rows(0, 0), rc.Config("mnist", "128"))]
        self.assertEqual(labels, ["07", "PyTorch eager", "PyTorch compile-default", "PyTorch bf16-compile-max-autotune"])

    def test_an_unclean_or_unaudited_one_is_named_not_shown(self):
        for breaks, recompiles, why in ((1, 0, "1 graph break"), (0, 3, "3 recompiles"), ("", "", "not audited")):
            rows = self.rows(breaks, recompiles)
            labels = [e.label() for e in rc.select_entries(rows, rc.Config("mnist", "128"))]
            self.assertNotIn("PyTorch compile-default", labels)
            text = make_tables.ladder_table(rows, rc.Config("mnist", "128"), "x.csv")
            self.assertIn(f"*Not shown as results: PyTorch compile-default: {why}", text)
            self.assertNotIn("| PyTorch compile-default |", text)
            self.assertEqual(plots.ladder_data(rows, rc.Config("mnist", "128"))[1],
                             [("PyTorch eager", 100.0), ("PyTorch bf16-compile-max-autotune", 100.0)])


class PytorchModesTest(unittest.TestCase):
    def test_bf16_modes(self):
        self.assertEqual([m for m in rc.PYTORCH_MODES if rc.mode_precision(m) == "bf16"],
                         ["bf16-autocast", "bf16-cuda-graph", "bf16-compile-max-autotune"])
        self.assertEqual([m for m in rc.PYTORCH_MODES if rc.mode_captured(m)], ["cuda-graph", "bf16-cuda-graph"])
        self.assertEqual([m for m in rc.PYTORCH_MODES if rc.mode_compiles(m)],
                         ["compile-default", "compile-max-autotune", "bf16-compile-max-autotune"])
        self.assertEqual([m for m in rc.PYTORCH_MODES if rc.mode_max_autotune(m)],
                         ["compile-max-autotune", "bf16-compile-max-autotune"])

    def test_every_mode_has_a_color(self):
        self.assertTrue({f"PyTorch {m}" for m in rc.PYTORCH_MODES} <= set(plots.COLORS))

    def test_setup(self):
        self.assertEqual(rc.pytorch_setup_ms("bf16-cuda-graph", 40.0, 900.0, 2, 100.0), 40.0)
        self.assertEqual(rc.pytorch_setup_ms("compile-default", 0.0, 30_200.0, 2, 100.0), 30_000.0)
        self.assertEqual(rc.pytorch_setup_ms("bf16-compile-max-autotune", 0.0, 150.0, 2, 100.0), 0.0)
        self.assertEqual(rc.pytorch_setup_ms("eager", 0.0, 5_000.0, 2, 100.0), 0.0)
        self.assertEqual(rc.pytorch_setup_ms("bf16-autocast", 0.0, 5_000.0, 2, 100.0), 0.0)

    def test_pytorch_canonical_runs_bf16_through_a_graph(self):
        bench = run_bench.Bench(run_bench.PLANS["full"], tempfile.gettempdir(), ["07"], "x", run_bench.Budget(100))
        calls = []
        bench.canonical_export = lambda config: f"{config}.json"
        bench.pytorch = lambda trainer, export, modes, repeat, **kw: calls.append((export, tuple(modes)))
        with contextlib.redirect_stdout(io.StringIO()):
            bench.pytorch_canonical()
            bench.optional = True
            bench.pytorch_compile()
        modes = dict(calls[:4])
        self.assertIn("bf16-cuda-graph", modes["1024,1024.json"])
        self.assertNotIn("bf16-cuda-graph", modes["128.json"])
        self.assertNotIn("bf16-autocast", modes["regression.json"])
        self.assertIn(("1024,1024.json", ("bf16-compile-max-autotune",)), calls[4:])


PREDICTIONS = """# 07

## Prediction

prose

<!-- predictions begin -->
| trainer | config | metric | predicted low | predicted high |
|:--|:--|:--|--:|--:|
| mnist | 128 | speedup_epoch | 1.3 | 1.5 |
| mnist | 0 | speedup_e2e | | 1.1 |
| regression | 5M variant=cublas | loop_ms | 7 | 10 |
| mnist | 1024,1024 | setup_ms | 100 | |
<!-- predictions end -->

## Measured

<!-- outcome:stage07 begin -->
<!-- outcome:stage07 end -->
"""


class PredictionsTest(unittest.TestCase):
    def rows(self):
        return [timed_row("06", per_epoch=24.0), timed_row("07", per_epoch=18.0),           # 1.33: hit
                timed_row("06", hidden="0", e2e=150), timed_row("07", hidden="0", e2e=120),   # 1.25: miss
                timed_row("06", "regression", variant="cublas", e2e=20),
                timed_row("07", "regression", variant="fused", e2e=6),
                timed_row("07", "regression", variant="cublas", e2e=14)]                     # loop 9: hit

    def test_parse(self):
        found = make_tables.parse_predictions(PREDICTIONS, "x.md")
        self.assertEqual([(p.trainer, p.config.hidden, p.metric, p.low, p.high) for p in found],
                         [("mnist", "128", "speedup_epoch", 1.3, 1.5), ("mnist", "0", "speedup_e2e", None, 1.1),
                          ("regression", None, "loop_ms", 7.0, 10.0), ("mnist", "1024,1024", "setup_ms", 100.0, None)])
        self.assertEqual(found[2].variant, "cublas")
        self.assertEqual([p.predicted() for p in found], ["1.3–1.5×", "≤ 1.1×", "7–10 ms", "≥ 100 ms"])
        self.assertEqual(found[0].where, "x.md:10")
        self.assertEqual(make_tables.parse_predictions("no table\n", "x.md"), [])

    def test_bad_tables_are_errors(self):
        good = "| mnist | 128 | speedup_epoch | 1.3 | 1.5 |"
        for bad, message in ((good.replace("speedup_epoch", "speedup"), "metric 'speedup'"),
                             (good.replace("| 128 |", "| 64 |"), "an MNIST --hidden of the ladder"),
                             (good.replace("1.3", "1.6"), "is above predicted high"),
                             (good.replace("1.3 | 1.5", " | "), "needs a low or a high bound"),
                             (good.replace("1.3", "fast"), "is not a number"),
                             (good.replace("| 128 |", "| 128 batch=64 |"), "only variant=NAME and precision=NAME"),
                             (good.replace("| mnist |", "| cifar |"), "trainer 'cifar'"),
                             (good.replace(" 1.5 |", " 1.5 | x |"), "6 cells")):
            text = PREDICTIONS.replace(good, bad)
            with self.assertRaises(make_tables.TableError, msg=bad) as caught:
                make_tables.parse_predictions(text, "x.md")
            self.assertIn(message, str(caught.exception))
        with self.assertRaises(make_tables.TableError):
            make_tables.parse_predictions(PREDICTIONS.replace("<!-- predictions end -->", ""), "x.md")
        with self.assertRaises(make_tables.TableError):
            make_tables.parse_predictions(PREDICTIONS.replace("predicted low", "low"), "x.md")

    def test_outcome_hit_miss_and_ratio(self):
        predictions = make_tables.parse_predictions(PREDICTIONS, "x.md")
        lines, used, hits, misses = make_tables.outcome_lines(self.rows(), "07", predictions)
        # configuration, metric, predicted, measured, measured ÷ predicted, verdict
        self.assertEqual(lines[0], ["MNIST --hidden 128", "ms/epoch speedup vs 06", "1.3–1.5×", "1.33×", "0.95×", "hit"])
        self.assertEqual(lines[1][3:], ["1.25×", "1.14×", "**miss**"])  # 1.25 / 1.1
        self.assertEqual(lines[2], ["regression 5M variant=cublas", "loop", "7–10 ms", "9.00 ms", "1.06×", "hit"])
        self.assertEqual(lines[3][3:], ["no result yet", "", "—"])
        self.assertEqual((hits, misses), (2, 1))
        block = make_tables.outcome_block([("results/x.csv", self.rows())], "07", predictions)
        self.assertIn("**Verdict: miss**: 1 of 3 predictions measured missed their range.", block)
        self.assertNotIn("as predicted", block)

    def test_a_target_is_a_one_bound_prediction(self):
        target = make_tables.parse_predictions(PREDICTIONS.replace("| 1.3 | 1.5 |", "| 1.3 | 1.5 |\n"
                                                                   "| regression | 5M | loop_ms | | 3 |"), "x.md")[1:2]
        met = [timed_row("07", "regression", e2e=7)]  # loop 2 ms
        self.assertEqual(make_tables.outcome_lines(met, "07", target)[0][0],
                         ["regression 5M", "loop", "≤ 3 ms", "2.00 ms", "0.67×", "hit"])
        missed = [timed_row("07", "regression", e2e=11)]  # loop 6 ms: 2× the target
        self.assertEqual(make_tables.outcome_lines(missed, "07", target)[0][0][3:], ["6.00 ms", "2.00×", "**miss**"])

    def test_verdict_hit_only_when_every_prediction_measured_hit(self):
        predictions = make_tables.parse_predictions(PREDICTIONS, "x.md")[:1]
        block = make_tables.outcome_block([("results/x.csv", self.rows())], "07", predictions)
        self.assertIn("**Verdict: hit**: all 1 predictions measured came out as predicted.", block)
        block = make_tables.outcome_block([("results/x.csv", [])], "07", predictions)
        self.assertIn("Verdict: not measured yet", block)

    def test_as_predicted_only_inside_a_hit_verdict(self):
        hit = "<!-- outcome:stage07 begin -->\n**Verdict: hit**: came out as predicted.\n<!-- outcome:stage07 end -->\n"
        miss = "<!-- outcome:stage07 begin -->\n**Verdict: miss**: as predicted\n<!-- outcome:stage07 end -->\n"
        self.assertEqual(make_tables.prediction_claim_problems("r.md", hit), [])
        self.assertEqual(len(make_tables.prediction_claim_problems("r.md", miss)), 1)
        prose = hit + "\nThe loop gained, as\npredicted.\n"  # wrapped across lines
        self.assertEqual(make_tables.prediction_claim_problems("r.md", prose),
                         ['r.md:5: says "as predicted" outside a generated outcome block whose verdict is hit'])
        self.assertEqual(make_tables.prediction_claim_problems("r.md", "It was not as predicted.\n"), [])
        self.assertEqual(len(make_tables.prediction_claim_problems("r.md", "gained at least as much As Predicted")), 1)

    def test_teaching_lists_every_stage_outcome(self):
        with tempfile.TemporaryDirectory() as root:
            write(os.path.join(root, "07-cuda-graphs", "README.md"), PREDICTIONS)
            files = make_tables.all_blocks([("results/x.csv", self.rows())], root, os.path.join(root, "results"))
            block = files[os.path.join(root, "TEACHING.md")]["outcomes:all"]
        self.assertIn("| 07 | MNIST --hidden 128 | ms/epoch speedup vs 06 | 1.3–1.5× | 1.33× | 0.95× | hit |", block)
        self.assertIn("| 07 | regression 5M variant=cublas | loop | 7–10 ms | 9.00 ms | 1.06× | hit |", block)
        self.assertIn("`results/x.csv`", block)

    def test_main_fills_the_outcome_and_check_fails_on_a_prose_claim(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "results"))
            rc.append_csv(os.path.join(root, "results", "gpu.csv"), rc.RESULT_COLUMNS, self.rows())
            readme = os.path.join(root, "07-cuda-graphs", "README.md")
            write(readme, PREDICTIONS)
            self.assertEqual(MarkerTest.run_main("--root", root), 0)
            with open(readme) as f:
                text = f.read()
            self.assertIn("| MNIST --hidden 128 | ms/epoch speedup vs 06 | 1.3–1.5× | 1.33× | 0.95× | hit |", text)
            self.assertIn("**Verdict: miss**", text)
            self.assertEqual(MarkerTest.run_main("--root", root, "--check"), 0)
            write(readme, text + "\nMNIST gained, as predicted.\n")
            self.assertEqual(MarkerTest.run_main("--root", root, "--check"), 1)
            self.assertEqual(MarkerTest.run_main("--root", root), 0)  # updating only warns
            write(readme, PREDICTIONS.replace("speedup_e2e", "e2e_speedup"))
            self.assertEqual(MarkerTest.run_main("--root", root), 1)  # a table it cannot read stops it



def report(*args):
    """(status, stdout) of bench/report_rows.py with args."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = report_rows.main(list(args))
    return status, out.getvalue()


class ReportRowsTest(unittest.TestCase):
    """bench/report_rows.py: the reader of rows (results_csv.read_rows) and the reports of compare and try
    (tests/profile_summary.sh checks the profile summary on real ncu exports)."""

    def test_read_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rows.csv")
            with open(path, "w") as f:
                f.write('stage,hidden,w\r\n02,"1024,1024",0.5\r\n\n03\n')
            header, rows = rc.read_rows(path)
        self.assertEqual(header, ("stage", "hidden", "w"))
        self.assertEqual([dict(r) for r in rows], [{"stage": "02", "hidden": "1024,1024", "w": "0.5"}, {"stage": "03"}])
        self.assertEqual((rows[1]["w"], rows[0]["no such column"]), ("", ""))

    def test_numbers_as_report_c_prints_them(self):
        self.assertEqual([rc.as_float(t) for t in (" -2e3", "", "n/a", "inf", 1.5)], [-2000, 0, 0, float("inf"), 1.5])
        self.assertEqual([rc.report_ms(t) for t in ("12345.6", "0.123456", 1000.4, "", None)],
                         ["12346", "0.1235", "1000", "-", "-"])
        self.assertEqual((rc.report_num("0.123456789"), rc.report_num("")), ("0.123457", "-"))

    def rows_file(self, tmp, name, rows):
        path = os.path.join(tmp, name)
        rc.append_csv(path, rc.RESULT_COLUMNS, rows)
        return path

    def test_compare_setup_and_wall(self):
        """make stage N compare shows setup and wall beside e2e, and the wall speedup."""
        with tempfile.TemporaryDirectory() as tmp:
            path = self.rows_file(tmp, "07.csv", [timed_row("06", setup=52, e2e=250, per_epoch=24),
                                                  timed_row("07", setup=130, e2e=227, per_epoch=21.5)])
            status, out = report("compare", path)
        self.assertEqual(status, 0)
        self.assertRegex(out, r"setup ms +e2e ms +wall ms +loop ms")
        self.assertRegex(out, r"\n  07 +default +130 +227 +357 +222 ")
        self.assertIn("stage 07 vs 06: e2e 1.10x, wall 0.85x, loop 1.10x", out)

    def test_try_speed(self):
        with tempfile.TemporaryDirectory() as tmp:
            own = self.rows_file(tmp, "stage.csv", [timed_row("03", e2e=205)])
            fast = self.rows_file(tmp, "fast.csv", [timed_row("03", e2e=105)])
            same = self.rows_file(tmp, "same.csv", [timed_row("03", e2e=204)])
            none = self.rows_file(tmp, "none.csv", [])
            self.assertEqual(report("try-speed", "03", own, fast)[1].splitlines()[-2:],
                             ["  candidate vs stage 03: loop 2.00x (faster), e2e 1.95x (faster)",
                              "try: PASS, relative loop speed 2.00x (faster)"])
            self.assertIn("loop 1.01x (the same within noise)", report("try-speed", "03", own, same)[1])
            self.assertEqual(report("try-speed", "03", own, none), (1, "try: FAIL\n"))
            add = [dict(timed_row("01", variant=v, e2e=e), trainer="vector-add") for v, e in (("a", 105), ("b", 25))]
            versions = self.rows_file(tmp, "va.csv", add)
            faster = self.rows_file(tmp, "va2.csv", [dict(r, loop_ms=ms) for r, ms in zip(add, ("50", "5"))])
            self.assertIn("relative GPU kernel speed 2.83x (geometric mean over 2 versions)",  # 2x and 4x
                          report("try-speed", "01", versions, faster)[1])

    def test_try_results(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = self.rows_file(tmp, "gpu.csv", [timed_row("04", e2e=300), timed_row("04", e2e=200, test_acc=0.9712),
                                                   timed_row("05", e2e=100)])
            status, out = report("try-results", "04", path)
            self.assertEqual(report("try-results", "06", path)[1].splitlines()[0][:22], "None for stage 06 yet ")
        lines = out.splitlines()
        self.assertEqual((status, len(lines)), (0, 3))
        self.assertRegex(lines[2], r"^\| .* \| mnist \| default \| hidden 128, batch 128, 10 epochs \| fp32 \| 200 \| 195 "
                                   r"\| 9 \| .* \| acc 97.12% \|$")


    def test_sanitize(self):
        """make sanitize's summary: a row per stage x trainer, a column per tool, the notes and the totals."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "results")
            write(path, "06 mnist memcheck 3 clean\n06 mnist racecheck 9 2 errors (library)\n06 regression memcheck 1 "
                        "KILLED (exit 9)\n")
            status, out = report("sanitize", "memcheck racecheck", "build/san", path)
            write(path, "01 vector_add memcheck 2 clean\n")
            self.assertEqual(report("sanitize", "memcheck", "build/san", path)[1].splitlines()[-1],
                             "sanitize: all 1 runs clean")
        lines = out.splitlines()
        self.assertEqual((status, lines[0].split()), (0, ["stage", "trainer", "memcheck", "racecheck"]))
        self.assertEqual(lines[1], "%-5s  %-24s  %-24s  %-24s" % ("06", "mnist", "clean 3s", "2 errors (library) 9s"))
        self.assertEqual(lines[2].split(), ["06", "regression", "KILLED", "(exit", "9)", "1s", "-"])
        self.assertTrue(lines[3].startswith("(library): ") and lines[4].startswith("KILLED: "))
        self.assertEqual(lines[5], "sanitize: 2 of 3 runs not clean: logs in build/san/logs/")


class ProfileExcerptTest(unittest.TestCase):
    """The profile:stageNN blocks: lines quoted from results/<gpu>-profile-NN.txt, or a note that none is
    recorded. tests/bench/fixtures/fixture-gpu-profile-06.txt is a summary file as `make stage 6 profile
    RECORD=1` writes it, made from an H100's raw exports."""

    PROFILE = os.path.join(FIXTURES, "fixture-gpu-profile-06.txt")

    def block(self, selection, with_file=True):
        picks = make_tables.parse_profile_selection(selection, "test")
        with tempfile.TemporaryDirectory() as tmp:
            if with_file:
                shutil.copy(self.PROFILE, os.path.join(tmp, "fixture-gpu-profile-06.txt"))
            return make_tables.profile_block([("fixture-gpu.csv", fixture_rows())], tmp, tmp, "06", picks)

    def test_top_lines_per_trainer(self):
        block = self.block("regression=top1 mnist=top2")
        self.assertIn("regression (the 1 lines of most time, of 2)", block)
        self.assertIn("forward_loss_backward_kernel", block)
        self.assertNotIn("sgd_update_kernel", block)
        self.assertIn("mnist (the 2 lines of most time, of 15)", block)
        self.assertIn("cutlass_80_simt_sgemm_128x128_8x4_tn_align1", block)
        self.assertIn("40 launches, 437 µs in all", block)
        self.assertIn("`make stage 6 profile RECORD=1`", block)

    def test_named_kernels_every_launch_shape(self):
        block = self.block("mnist=scale_pixels_kernel,no_such_kernel")
        self.assertEqual(block.count("scale_pixels_kernel"), 2)  # the training and the test set's shapes
        self.assertIn("not in this profile: no_such_kernel", block)
        self.assertNotIn("regression", block)

    def test_no_profile_recorded(self):
        block = self.block("mnist=top2", with_file=False)
        self.assertIn("FIXTURE-GPU: *(no profile recorded for this GPU yet: run `make stage 6 profile RECORD=1`)*",
                      block)
        self.assertNotIn("<sub>", block)

    def test_a_bad_selection_is_refused(self):
        for selection in ("", "cpu=top2", "mnist="):
            with self.assertRaises(make_tables.TableError):
                make_tables.parse_profile_selection(selection, "test")


# ----------------------------------------------------------------------------
# stage 08: the persistent sweep, its figure and tables, the stage-08 targets

def sweep_row(stage, hidden, per_epoch, run="run-2", variant=None, epochs=3, **columns):
    """A persistent-sweep row: stage 07's default variant epoch-graph, stage 08's persistent."""
    variant = variant or {"07": "epoch-graph", "08": "persistent"}[stage]
    return timed_row(stage, hidden=hidden, per_epoch=per_epoch, run=run, variant=variant, epochs=epochs, **columns)


class PersistentSweepPlanTest(unittest.TestCase):
    """run_bench's persistent sweep: stages 07 and 08, one hidden layer, the ladder's widths not again."""

    def setUp(self):
        self.clock = FakeClock()
        self.tmp = tempfile.TemporaryDirectory()
        self.bench = run_bench.Bench(SimpleNamespace(persistent_widths=rc.PERSISTENT_SWEEP_WIDTHS, persistent_epochs=3),
                                     self.tmp.name, ["02", "07", "08"], "fixture-gpu", run_bench.Budget(100, self.clock))
        self.ran = []

        def c_run(stage, trainer, flags, repeat, **kwargs):
            self.ran.append((stage, trainer, " ".join(flags), repeat, kwargs))
            self.clock.now += 1
            return 0

        self.bench.c_run = c_run

    def tearDown(self):
        self.tmp.cleanup()

    def sweep(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.bench.persistent_sweep()
        return out.getvalue()

    def test_every_width_for_07_and_08_once_the_ladders_widths_not_again(self):
        for stage in ("07", "08"):
            for hidden in rc.MNIST_HIDDEN:
                self.bench.done.add((stage, "mnist", hidden, None, None))
        self.bench.done.add(("08", "mnist", "32", "step-graph", None))  # a variant's run is no sweep point
        self.sweep()
        self.assertEqual([(r[0], r[2]) for r in self.ran],
                         [(stage, f"--hidden {w} --epochs 3") for w in (32, 64, 256, 512, 1024) for stage in ("07", "08")])
        self.assertTrue(all(r[1] == "mnist" and r[3] == 1 and r[4] == {} for r in self.ran))  # default variant, once

    def test_a_canonical_width_the_ladder_did_not_run_gets_the_canonical_epochs(self):
        self.bench.stages = ["08"]
        self.sweep()
        self.assertEqual(self.ran[0][2], f"--hidden 0 --epochs {rc.MNIST_EPOCHS}")
        self.assertEqual(self.ran[3][2], f"--hidden 128 --epochs {rc.MNIST_EPOCHS}")
        self.assertEqual(len(self.ran), len(rc.PERSISTENT_SWEEP_WIDTHS))

    def test_stops_at_the_budget_and_says_why(self):
        self.bench.optional = True
        self.clock.now = 97  # each run estimated at 2 s, taking 1: two fit in the 100 s
        self.sweep()
        self.assertEqual([(r[0], r[2]) for r in self.ran],
                         [("07", f"--hidden 0 --epochs {rc.MNIST_EPOCHS}"), ("08", f"--hidden 0 --epochs {rc.MNIST_EPOCHS}")])
        self.assertIn("persistent sweep: stage 07 at --hidden 32", self.bench.skipped[-1])

    def test_nothing_to_run(self):
        self.bench.stages = ["02", "06"]
        self.assertIn("stages 07 and 08 are not built", self.sweep())
        self.bench.stages, self.bench.plan = ["07", "08"], run_bench.PLANS["quick"]
        self.assertIn("not in this plan", self.sweep())
        self.assertEqual(self.ran, [])

    def test_plans(self):
        self.assertLess(run_bench.OPTIONAL.index("persistent sweep"), run_bench.OPTIONAL.index("compile"))
        full = run_bench.PLANS["full"]
        self.assertEqual(full.persistent_widths, rc.PERSISTENT_SWEEP_WIDTHS)
        self.assertNotEqual(full.persistent_epochs, rc.MNIST_EPOCHS)  # a sweep row is told apart by its epochs


class PersistentSweepDataTest(unittest.TestCase):
    """The newest run that measured stage 08, one hidden layer, default variants, fp32."""

    def rows(self):
        return [sweep_row("07", "0", 11.0, run="run-1", epochs=10), sweep_row("08", "0", 9.0, run="run-1", epochs=10),
                sweep_row("07", "0", 11.2, epochs=10), sweep_row("07", "128", 22.0, epochs=10),
                sweep_row("08", "0", 2.2, epochs=10), sweep_row("08", "128", 5.5, epochs=10),
                sweep_row("08", "128", 20.0, variant="epoch-graph"),   # an attribution row
                sweep_row("08", "128", 3.0, precision="tf32"),
                sweep_row("08", "1024,1024", 50.0),                   # two layers: the width sweep's
                sweep_row("07", "1024", 60.0), sweep_row("08", "1024", 59.0),
                sweep_row("07", "32", 12.0), sweep_row("08", "32", 2.4),
                sweep_row("07", "64", 99.0, run="run-3")]             # no stage 08 in run-3

    def test_selection(self):
        sweep = rc.persistent_sweep(self.rows())
        self.assertEqual(list(sweep), [0, 32, 128, 1024])
        self.assertEqual({w: {s: r["ms_per_epoch"] for s, r in by.items()} for w, by in sweep.items()},
                         {0: {"07": "11.2", "08": "2.2"}, 32: {"07": "12.0", "08": "2.4"},
                          128: {"07": "22.0", "08": "5.5"}, 1024: {"07": "60.0", "08": "59.0"}})
        self.assertEqual(rc.persistent_sweep([sweep_row("07", "128", 22.0)]), {})  # no stage 08: no sweep

    def test_plot_data(self):
        series = plots.persistent_sweep_data(self.rows())
        self.assertEqual(series, {"07": [(0, 11.2), (32, 12.0), (128, 22.0), (1024, 60.0)],
                                  "08": [(0, 2.2), (32, 2.4), (128, 5.5), (1024, 59.0)]})
        self.assertEqual(plots.persistent_sweep_data([sweep_row("08", "0", 2.2)]), {})  # one point: no line
        self.assertEqual([plots.width_label(w) for w in (0, 512)], ["none", "512"])
        self.assertIn("persistent-sweep", plots.FIGURES)
        self.assertNotEqual(plots.color_for("stage 08"), plots.color_for("other"))

    def test_sweep_block(self):
        block = make_tables.sweep_block([("results/x.csv", self.rows())])
        self.assertIn("| none (`--hidden 0`) | 11.2 | 2.20 | 5.09× |", block)
        self.assertIn("| 1024 | 60.0 | 59.0 | 1.02× |", block)
        self.assertIn("run `run-2`", block)
        self.assertNotIn("| 64 |", block)
        self.assertEqual(make_tables.sweep_block([]), make_tables.NO_RESULTS)
        self.assertEqual(make_tables.sweep_block([("results/x.csv", [sweep_row("07", "0", 11.0)])]),
                         make_tables.NO_RESULTS)


def stage08_rows(h0, h128, graph0, graph128, wide07, wide08, graph_run="run-1"):
    """Stages 07 and 08 (ms/epoch as given) and PyTorch eager and cuda-graph at --hidden 0 and 128, 07 and 08 at
    1024,1024."""
    rows = []
    for hidden, eight, graph in (("0", h0, graph0), ("128", h128, graph128)):
        rows += [timed_row("07", hidden=hidden, per_epoch=11.0), timed_row("08", hidden=hidden, per_epoch=eight),
                 timed_row("pytorch", hidden=hidden, variant="eager", per_epoch=200.0),
                 timed_row("pytorch", hidden=hidden, variant="cuda-graph", per_epoch=graph, run=graph_run)]
    return rows + [timed_row("07", hidden="1024,1024", per_epoch=wide07),
                   timed_row("08", hidden="1024,1024", per_epoch=wide08)]


class Stage08ReadmeTest(unittest.TestCase):
    """Every NN-* folder is a stage: stage 08's README gets the blocks stage 07's does, and its own."""

    MARKERS = ["results:stage08", "outcome:stage08", "steps:stage08", "sweep:stage08",
               "sanitize:stage08", "profile:stage08 regression=top2 mnist=top6"]

    def test_main_fills_every_block_and_an_absent_readme_is_no_error(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "results"))
            rows = stage08_rows(2.0, 5.0, 30.0, 60.0, 50.0, 49.0) + [
                timed_row("07", hidden="32", per_epoch=12.0, epochs=3), timed_row("08", hidden="32", per_epoch=2.4, epochs=3)]
            rc.append_csv(os.path.join(root, "results", "fixture-gpu.csv"), rc.RESULT_COLUMNS, rows)
            os.makedirs(os.path.join(root, "07-cuda-graphs"))
            self.assertEqual(MarkerTest.run_main("--root", root, "--check"), 0)  # 08 has no folder yet
            os.makedirs(os.path.join(root, "08-persistent-kernels"))
            self.assertEqual(MarkerTest.run_main("--root", root, "--check"), 0)  # nor a README
            readme = os.path.join(root, "08-persistent-kernels", "README.md")
            text = "# 08\n" + PREDICTIONS.replace("# 07\n", "").split("<!-- outcome:stage07")[0]
            text += "".join(f"<!-- {m} begin -->\n<!-- {m} end -->\n" for m in self.MARKERS)
            write(readme, text)
            self.assertEqual(MarkerTest.run_main("--root", root, "--check"), 1)  # stale until generated
            self.assertEqual(MarkerTest.run_main("--root", root), 0)
            with open(readme) as f:
                filled = f.read()
            self.assertIn("| MNIST --hidden 128 | 08 persistent-kernels |", filled)   # results, against 07
            self.assertIn("| 32 | 12.0 | 2.40 | 5.00× |", filled)                       # sweep
            self.assertIn("µs saved per step", filled)                                  # steps
            self.assertIn("**Verdict:", filled)                                         # outcome
            self.assertIn("make stage 8 profile RECORD=1", filled)                      # profile
            self.assertIn("make sanitize", filled)                                      # sanitize
            self.assertEqual(MarkerTest.run_main("--root", root, "--check"), 0)


if __name__ == "__main__":
    unittest.main()
