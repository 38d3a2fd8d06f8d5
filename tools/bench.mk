# tools/bench.mk: `make bench` (the top Makefile runs `make -f tools/bench.mk bench`), on a GPU machine.
#
#   make bench                 the full run, about 8 minutes on an H200 once built: results/<gpu>.csv
#                              (started afresh; the last run's files go to build/bench/previous/), the
#                              curves and breakdown CSVs, the README tables and the PNG figures in results/
#   make bench BENCH=quick     under 2 minutes: every kind of measurement once, into build/bench/quick/;
#                              prints the tables and draws the figures there, changes no tracked file
#   make bench BENCH_BUDGET_S=300
#                              the measurements' wall-clock budget (default 480 s full, 100 s quick): the
#                              optional phases (breakdown, persistent sweep, size and width sweeps,
#                              torch.compile) that would pass it are skipped, saying so; tables and
#                              figures use what ran
#   make bench GIT_COMMIT_ID=3f2a9c1b0d4e GIT_DIRTY=0
#                              on a copy of the tree without .git (a GPU machine's): the commit every row
#                              names, for the build and for bench/run_bench.py (--commit, --dirty); without
#                              them the top Makefile's record of the build (build/.commit)
#
# What is measured, in which order and how often: bench/run_bench.py (PLANS, with each phase's
# estimated seconds). Needs python3 with PyTorch and matplotlib for the baselines and the figures; the
# tables need only the standard library.

BENCH ?= full
PYTHON ?= python3

RESULTS := $(if $(filter quick,$(BENCH)),build/bench/quick,results)

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
	$(PYTHON) bench/run_bench.py --bench $(BENCH) --results $(RESULTS) \
	    $(if $(BENCH_BUDGET_S),--budget-s $(BENCH_BUDGET_S)) \
	    $(if $(GIT_COMMIT_ID),--commit $(GIT_COMMIT_ID)) $(if $(GIT_DIRTY),--dirty $(GIT_DIRTY)) || status=1; \
	$(PYTHON) bench/make_tables.py --results $(RESULTS) $(if $(filter quick,$(BENCH)),--print) || status=1; \
	$(PYTHON) bench/plots.py --results $(RESULTS) || status=1; \
	exit $$status
