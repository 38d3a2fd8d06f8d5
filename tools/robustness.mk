# tools/robustness.mk: the robustness tools, included by the top Makefile (after its build rules).
#
#   make sanitize             compute-sanitizer memcheck, racecheck, synccheck and initcheck over every
#                             stage x trainer at small sizes, 4 at a time; table in build/sanitize/summary.txt
#   make stage N sanitize     the same for one stage
#   make test SANITIZE=1      the CPU suites, the drivers and common/ built with AddressSanitizer + UBSan
#                             into build-asan/ (kept apart from build/), then every suite as usual
#   make fuzz                 libFuzzer (clang) on the IDX reader and the flag parser, FUZZ_SECONDS each
#
# Knobs: SAN_TOOLS, SAN_JOBS (4), SAN_TIMEOUT (s per run, 300), SAN_VARIANTS=all (every --variant and
# --precision of each stage, not just its default), SAN_MNIST_DATA (default: a 3000/1000-image cut of
# data/mnist), SAN_RACECHECK_MNIST_DATA (racecheck's: a 300/100-image cut), COMPUTE_SANITIZER;
# FUZZ_SECONDS (60), FUZZ_RUNS (a number of executions instead), FUZZ_CC.
# Racecheck over cuBLASLt's tf32 and bf16 kernels can hold over 40 GB of host memory per run (the
# out-of-memory killer's report on an H100 host): with SAN_VARIANTS=all, use a small SAN_JOBS.

.PHONY: sanitize stage-sanitize fuzz

# ----------------------------------------------------------------------------
# make test SANITIZE=1: host code with ASan + UBSan

# The flags are set in the top Makefile, next to BUILD, as they must be before the build rules are read
# (build-asan/ keeps instrumented and normal objects apart). gcc compiles common/, the drivers and the tests
# with them; nvcc links the sanitizers' runtimes. The stages' device code is compute-sanitizer's job.
ifeq ($(SANITIZE),1)
# protect_shadow_gap=0: the CUDA driver maps memory where ASan would otherwise protect its shadow gap
export ASAN_OPTIONS ?= protect_shadow_gap=0:detect_leaks=1:check_initialization_order=1:strict_string_checks=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
endif

# ----------------------------------------------------------------------------
# make sanitize / make stage N sanitize: compute-sanitizer over the stages

ifndef COMPUTE_SANITIZER
COMPUTE_SANITIZER := $(firstword $(wildcard $(CUDA_HOME)/bin/compute-sanitizer $(CUDA_HOME)/compute-sanitizer/compute-sanitizer) $(shell command -v compute-sanitizer 2>/dev/null))
endif
SAN_TOOLS ?= memcheck racecheck synccheck initcheck
SAN_JOBS ?= 4
SAN_TIMEOUT ?= 300
SAN_VARIANTS ?= default
SAN_DIR := $(BUILD)/sanitize
# Small runs that still take every path: an odd point count (float4 tails) with 800,002 training
# points (stages 05-07 upload them in four chunks); logged epochs 0 and 10 and the last one (11).
# MNIST: 3000 training images (9.4 MB of floats: two of stage 05's 8 MiB upload chunks; 23 steps of
# 128 and a remainder), 1000 test images, two epochs (evaluation overlapping the next epoch).
# Racecheck instruments every shared-memory access, and stage 08's kernel keeps each whole step in shared
# memory (10-15 s a step under racecheck on an H100, against under 10 us without): racecheck's MNIST runs, in
# every stage alike, take 300 training images (two steps of 128 and a remainder of 44) and 100 test images.
SAN_MNIST_DATA ?= $(SAN_DIR)/mnist-small
SAN_RACECHECK_MNIST_DATA ?= $(SAN_DIR)/mnist-tiny
SAN_REGRESSION_ARGS ?= --points 1000003 --epochs 12 --warmup 0 --quiet
SAN_MNIST_ARGS ?= --hidden 32 --epochs 2 --warmup 0 --quiet
SAN_VECTOR_ADD_ARGS ?= --n 1000003 --repeat 1
# memcheck also reports device memory a run never frees
SAN_FLAGS_memcheck ?= --leak-check full

# make stage N sanitize (stage-sanitize NN=...) runs stage NN; make sanitize (the top Makefile) runs it for every stage
SAN_STAGES = $(or $(NN),$(ALL_STAGES))
SAN_BINS = $(foreach s,$(SAN_STAGES),$(if $(filter 01,$(s)),$(BUILD)/01/vector_add,$(BUILD)/$(s)/regression $(BUILD)/$(s)/mnist))

# The MNIST cuts: the first images and labels of each split, with the count in the header changed.
SAN_CUTS := mnist-small mnist-tiny
SAN_CUT_mnist-small := 3000 1000
SAN_CUT_mnist-tiny := 300 100
$(SAN_CUTS:%=$(SAN_DIR)/%/.done): $(SAN_DIR)/%/.done: | $(MNIST_DATA)
	@mkdir -p $(@D)
	@be32() { printf "\\$$(printf %03o $$(($$1 >> 24 & 255)))\\$$(printf %03o $$(($$1 >> 16 & 255)))\\$$(printf %03o $$(($$1 >> 8 & 255)))\\$$(printf %03o $$(($$1 & 255)))"; }; \
	cut() { { head -c 4 "data/mnist/$$1"; be32 $$2; tail -c +9 "data/mnist/$$1" | head -c $$(($$3 + $$2 * $$4)); } >"$(@D)/$$1"; }; \
	train=$(word 1,$(SAN_CUT_$*)) test=$(word 2,$(SAN_CUT_$*)); \
	cut train-images-idx3-ubyte $$train 8 784 && cut train-labels-idx1-ubyte $$train 0 1 && \
	cut t10k-images-idx3-ubyte $$test 8 784 && cut t10k-labels-idx1-ubyte $$test 0 1 && touch $@
SAN_MNIST_CUT := $(foreach d,$(SAN_MNIST_DATA) $(SAN_RACECHECK_MNIST_DATA),$(if $(filter $(SAN_CUTS:%=$(SAN_DIR)/%),$(d)),$(d)/.done))

# A full matrix (every stage, all four tools, the default sizes) is a result worth keeping: its summary
# is copied to results/<gpu>-sanitize.txt (-sanitize-all-variants.txt with SAN_VARIANTS=all), where
# bench/make_tables.py finds it for the READMEs.
SAN_SIZES_CHANGED := $(filter-out file,$(foreach v,SAN_REGRESSION_ARGS SAN_MNIST_ARGS SAN_VECTOR_ADD_ARGS SAN_MNIST_DATA SAN_RACECHECK_MNIST_DATA,$(origin $(v))))
SAN_FULL_MATRIX := $(if $(SAN_SIZES_CHANGED)$(filter command line,$(origin SAN_STAGES)),,$(filter 4,$(words $(sort $(filter memcheck racecheck synccheck initcheck,$(SAN_TOOLS))))))
SAN_RESULT = $(if $(NN),,$(if $(SAN_FULL_MATRIX),sanitize$(if $(filter all,$(SAN_VARIANTS)),-all-variants)))

# the settings tools/sanitize_run.sh reads
SAN_EXPORTS := BUILD SAN_DIR SAN_TIMEOUT COMPUTE_SANITIZER SAN_REGRESSION_ARGS SAN_MNIST_ARGS SAN_VECTOR_ADD_ARGS \
    SAN_MNIST_DATA SAN_RACECHECK_MNIST_DATA SAN_FLAGS_memcheck SAN_FLAGS_racecheck SAN_FLAGS_synccheck SAN_FLAGS_initcheck
export $(SAN_EXPORTS)

# (without a GPU, nothing is built or fetched before the recipe's one error line)
$(call verb,sanitize): $(if $(DETECTED_ARCH),$(SAN_BINS) $(if $(filter-out 01,$(SAN_STAGES)),$(SAN_MNIST_CUT)))
	@if [ -z "$(DETECTED_ARCH)" ]; then echo "error: make sanitize needs an NVIDIA GPU and nvidia-smi lists none here:" \
	    "read the recorded verdicts, results/*-sanitize.txt" >&2; exit 4; fi
	@if [ ! -x "$(COMPUTE_SANITIZER)" ]; then echo "error: compute-sanitizer not found in $(CUDA_HOME)/bin or on PATH: set COMPUTE_SANITIZER=/path/to/compute-sanitizer" >&2; exit 2; fi
	@rm -rf $(SAN_DIR)/logs $(SAN_DIR)/results $(SAN_DIR)/jobs; mkdir -p $(SAN_DIR)/logs
	@for tool in $(filter racecheck,$(SAN_TOOLS)) $(filter memcheck synccheck initcheck,$(SAN_TOOLS)); do \
	    for trainer in mnist regression vector_add; do for stage in $(SAN_STAGES); do \
	        case $$stage-$$trainer in 01-vector_add) ;; 01-*|*-vector_add) continue ;; esac; \
	        variants=- precisions=-; \
	        if [ "$(SAN_VARIANTS)" = all ] && [ $$stage != 01 ]; then \
	            variants=$$($(BUILD)/$$stage/$$trainer --list-variants | sed -n 's/^variant //p'); \
	            [ $$trainer = regression ] || precisions=$$($(BUILD)/$$stage/$$trainer --list-variants | sed -n 's/^precision //p'); \
	        fi; \
	        for v in $$variants; do for p in $$precisions; do \
	            echo "$$stage $$trainer $$v $$p $$tool" >>$(SAN_DIR)/jobs; done; done; \
	    done; done; \
	done
	@echo "compute-sanitizer: $$(wc -l <$(SAN_DIR)/jobs) runs, $(SAN_JOBS) at a time, $(SAN_TIMEOUT) s limit each ($(COMPUTE_SANITIZER))"
	@start=$$(date +%s); \
	xargs -P $(SAN_JOBS) -L 1 sh tools/sanitize_run.sh <$(SAN_DIR)/jobs; \
	{ echo "compute-sanitizer $$("$(COMPUTE_SANITIZER)" --version 2>/dev/null | sed -n 's/.*Version //p' | head -n 1)" \
	       "on $$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1), commit $(GIT_COMMIT_ID)," \
	       "$(SAN_JOBS) runs at a time, $$(($$(date +%s) - start)) s in all"; \
	  sort -k1,1 -k2,2 $(SAN_DIR)/results | $(PYTHON) bench/report_rows.py sanitize "$(SAN_TOOLS)" $(SAN_DIR) /dev/stdin; \
	} >$(SAN_DIR)/summary.txt
	@echo; cat $(SAN_DIR)/summary.txt
	@if [ -n "$(SAN_RESULT)" ]; then \
	    record=results/$(GPU_SLUG)-$(SAN_RESULT).txt; \
	    mkdir -p results; cp $(SAN_DIR)/summary.txt $$record; echo "sanitize: summary recorded in $$record"; \
	fi
	@tail -n 1 $(SAN_DIR)/summary.txt | grep -q "all .* runs clean"

# ----------------------------------------------------------------------------
# make fuzz: libFuzzer harnesses (tests/fuzz/), built with clang, seeded from tests/fuzz/corpus_*/

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?=
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_CFLAGS := -std=c11 -g -O1 -D_GNU_SOURCE -Wall -Wextra -Icommon \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

# The harness and the code it fuzzes are instrumented; the rest of what that code calls comes from libcommon.a.
$(FUZZ_DIR)/fuzz_idx: tests/fuzz/fuzz_idx.c common/idx.c common/message.c
$(FUZZ_DIR)/fuzz_args: tests/fuzz/fuzz_args.c common/args.c common/flags.c common/message.c
$(FUZZ_DIR)/fuzz_idx $(FUZZ_DIR)/fuzz_args: $(COMMON_HEADERS) $(COMMON_LIB)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(filter %.c,$^) $(COMMON_LIB) -L$(CUDA_HOME)/lib64 -Wl,-rpath=$(CUDA_HOME)/lib64 \
	    $(filter-out -Xcompiler,$(LDLIBS)) -o $@

# Both harnesses at once, each for FUZZ_SECONDS (or FUZZ_RUNS executions); new inputs go to
# build/fuzz/corpus_*, the seeds in tests/ stay as they are; a finding is saved as build/fuzz/crash-*.
fuzz:
	@command -v $(FUZZ_CC) >/dev/null || { echo "error: make fuzz needs clang with libFuzzer (Debian: apt-get install clang libclang-rt-dev)" >&2; exit 2; }
	@$(MAKE) --no-print-directory $(FUZZ_DIR)/fuzz_idx $(FUZZ_DIR)/fuzz_args
	@echo "fuzzing the IDX reader and the flag parser, $(if $(FUZZ_RUNS),$(FUZZ_RUNS) executions,$(FUZZ_SECONDS) s) each ..."
	@for h in idx args; do \
	    mkdir -p $(FUZZ_DIR)/corpus_$$h; \
	    ( $(FUZZ_DIR)/fuzz_$$h $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_SECONDS)) -timeout=10 \
	        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/ \
	        $(FUZZ_DIR)/corpus_$$h tests/fuzz/corpus_$$h >$(FUZZ_DIR)/fuzz_$$h.log 2>&1; \
	      echo $$? >$(FUZZ_DIR)/fuzz_$$h.rc ) & \
	done; wait; \
	status=0; for h in idx args; do \
	    runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(FUZZ_DIR)/fuzz_$$h.log | tail -n 1); \
	    secs=$$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' $(FUZZ_DIR)/fuzz_$$h.log | tail -n 1); \
	    if [ "$$(cat $(FUZZ_DIR)/fuzz_$$h.rc)" = 0 ]; then \
	        echo "fuzz_$$h: $$runs executions in $${secs:-?} s, no finding (corpus: $$(ls $(FUZZ_DIR)/corpus_$$h | wc -l) inputs)"; \
	    else \
	        status=1; grep -E "^==[0-9]+==ERROR|SUMMARY|deadly signal|Test unit written" $(FUZZ_DIR)/fuzz_$$h.log | head -n 5; \
	        echo "fuzz_$$h: FINDING after $${runs:-?} executions: see $(FUZZ_DIR)/fuzz_$$h.log; replay with $(FUZZ_DIR)/fuzz_$$h $(FUZZ_DIR)/crash-..." >&2; \
	    fi; \
	done; exit $$status
