# bench/bench.mk: `make bench` (the top Makefile runs `make -f bench/bench.mk bench`), on a GPU machine.
#
#   make bench                 the full run, under 10 minutes on an H100: results/<gpu>.csv (started
#                              afresh; the last run's files go to build/bench/previous/), the curves and
#                              breakdown CSVs, the README tables and the PNG figures in results/
#   make bench BENCH=quick     about 2 minutes: every kind of measurement once, into build/bench/quick/;
#                              prints the tables and draws the figures there, changes no tracked file
#
# What is measured, in which order and how often: bench/run_bench.py (PLANS). Needs python3 with
# PyTorch and matplotlib for the baselines and the figures; the tables need only the standard library.

BENCH ?= full
PYTHON ?= python3

ifeq ($(BENCH),quick)
RESULTS := build/bench/quick
TABLE_FLAGS := --results $(RESULTS) --print
else
RESULTS := results
TABLE_FLAGS := --results $(RESULTS)
endif

.PHONY: bench
bench:
	@case "$(BENCH)" in quick|full) ;; *) echo "error: BENCH=$(BENCH): use BENCH=quick or BENCH=full" >&2; exit 2;; esac
	@command -v nvidia-smi >/dev/null 2>&1 || { echo "error: make bench needs a GPU machine (nvidia-smi not found);" \
	    "without one, python3 bench/make_tables.py still writes the tables from results/" >&2; exit 4; }
	@$(PYTHON) -c 'import torch, matplotlib' 2>/dev/null || { echo "error: make bench needs $(PYTHON) with torch" \
	    "and matplotlib (pip install torch matplotlib numpy)" >&2; exit 2; }
	$(MAKE) --no-print-directory -j$$(nproc) all
	$(MAKE) --no-print-directory data
	@# A failed run still leaves the others' rows: tables and figures are made from what was measured.
	@status=0; \
	$(PYTHON) bench/run_bench.py --bench $(BENCH) --results $(RESULTS) || status=1; \
	$(PYTHON) bench/make_tables.py $(TABLE_FLAGS) || status=1; \
	$(PYTHON) bench/plots.py --results $(RESULTS) || status=1; \
	exit $$status
