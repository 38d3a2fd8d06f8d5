# cuda-stages: one entry point. `make help` lists everything.

CUDA_HOME ?= /usr/local/cuda
CRITERION_PREFIX ?= /usr
# the reports of compare, profile, try and prompt are bench/report_rows.py's, run as tools/bench.mk runs Python
PYTHON ?= python3
NVCC := $(CUDA_HOME)/bin/nvcc
CC := gcc

# ----------------------------------------------------------------------------
# GPU architecture: the visible GPU's; without one, PTX for compute_75 and compute_90 (every path compiled, quickly;
# the driver compiles it at first launch); CUDA_ARCH=all: machine code for sm_75 ... sm_90 and compute_90 PTX.

DETECTED_ARCH := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '. ')
CUDA_ARCH ?= $(DETECTED_ARCH)
ifeq ($(strip $(CUDA_ARCH)),)
GENCODE := -gencode arch=compute_75,code=compute_75 -gencode arch=compute_90,code=compute_90
else ifeq ($(strip $(CUDA_ARCH)),all)
GENCODE := $(foreach a,75 80 86 89 90,-gencode arch=compute_$(a),code=sm_$(a)) -gencode arch=compute_90,code=compute_90
else
GENCODE := -gencode arch=compute_$(CUDA_ARCH),code=[sm_$(CUDA_ARCH),compute_$(CUDA_ARCH)]
endif

# make test SANITIZE=1: the host code with AddressSanitizer and UBSan, in a build folder of its own
SANITIZE_FLAGS := $(if $(filter 1,$(SANITIZE)),-fsanitize=address -fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
CFLAGS := -std=c11 -O2 -g -Wall -Wextra -Wshadow -D_POSIX_C_SOURCE=200809L -Icommon -I$(CUDA_HOME)/include $(SANITIZE_FLAGS)
NVCCFLAGS := -O3 -g -lineinfo -std=c++17 $(GENCODE) -Icommon -Xcompiler -Wall,-Wextra
LDFLAGS := -L$(CUDA_HOME)/lib64 -Xlinker --as-needed -Xlinker -rpath=$(CUDA_HOME)/lib64 $(foreach f,$(SANITIZE_FLAGS),-Xcompiler $(f))
LDLIBS := -lcublasLt -lcublas -lcudnn -lcurand -lcudart -lz -lm -lgomp -Xcompiler -pthread
CRITERION_FLAGS := -I$(CRITERION_PREFIX)/include
CRITERION_LIBS := -L$(CRITERION_PREFIX)/lib -L$(CRITERION_PREFIX)/lib/x86_64-linux-gnu -lcriterion \
    -Xlinker -rpath=$(CRITERION_PREFIX)/lib

BUILD := $(if $(filter 1,$(SANITIZE)),build-asan,build)
# A trainer stage exists once its folder holds both trainer files.
STAGE_DIRS := $(sort $(filter $(patsubst %/regression.cu,%,$(wildcard 0[2-9]-*/regression.cu)),$(patsubst %/mnist.cu,%,$(wildcard 0[2-9]-*/mnist.cu))))
STAGES := $(foreach d,$(STAGE_DIRS),$(firstword $(subst -, ,$(d))))
ALL_STAGES := 01 $(STAGES)
# A stage folder with kernel ladders and no trainers yet runs its ladders (make stage N ladder) and the exercises of
# their files (make stage N exercise; make stage N try FILE=mine/NAME_ladder.cu) only.
LADDER_ONLY_DIRS := $(filter-out $(STAGE_DIRS),$(sort $(patsubst %/,%,$(dir $(wildcard 0[2-9]-*/*_ladder.cu)))))
LADDER_ONLY_STAGES := $(foreach d,$(LADDER_ONLY_DIRS),$(firstword $(subst -, ,$(d))))

# What every object depends on besides its source: the shared headers, C and CUDA alike
COMMON_HEADERS := $(wildcard common/*.h common/*.cuh)
COMMON_SRC := $(filter-out common/%_main.c,$(wildcard common/*.c))
COMMON_OBJ := $(patsubst common/%.c,$(BUILD)/common/%.o,$(COMMON_SRC))
COMMON_LIB := $(BUILD)/common/libcommon.a

stage_dir = $(filter $(1)-%,$(STAGE_DIRS) $(LADDER_ONLY_DIRS) 01-vector-add)
STAGE_BINS := $(foreach s,$(STAGES),$(BUILD)/$(s)/regression $(BUILD)/$(s)/mnist)

# ----------------------------------------------------------------------------
# Values that reach a shell. The variables the stage verbs hand to their recipes (FILE, ARGS, MNIST_ARGS, TRAINER,
# EXERCISE, ANSWER, TRY_RUN, NN; make loop's FROM, ROUND, MODE; make grade's STAGE, SUBMISSIONS, JOBS, CSV) are
# checked here, once, before any recipe is expanded: each against a pattern of characters no shell acts on, read
# unexpanded ($(value)), so that a quote, `;`, `$`, a backquote, `|`, `&`, `<`, `>`, `*` or a control character
# never reaches a recipe, and a `$(shell ...)` in a value is never expanded. A value outside its pattern is one line
# and exit 2.

empty :=
space := $(empty) $(empty)
comma := ,
SAFE_WORD_CHARS := a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L M N O P Q R S T U V W X Y Z 0 1 2 3 4 5 6 7 8 9 . _ -
SAFE_PATH_CHARS := $(SAFE_WORD_CHARS) / + , = @ :
# $(call without_chars,TEXT,CHARS): TEXT with every one of CHARS removed
without_chars = $(if $(2),$(call without_chars,$(subst $(firstword $(2)),,$(1)),$(wordlist 2,$(words $(2)),$(2))),$(1))
# $(call check_value,VAR,CHARS,HINT[,spaces]): an error unless VAR's unexpanded value is made of CHARS
# (and spaces, when the fourth argument is given) only
check_value = $(if $(filter <>,<$(call without_chars,$(if $(4),$(subst $(space),,$(value $(1))),$(value $(1))),$(2))>),,$(error $(1) holds $(UNSAFE_TEXT): $(3)))
UNSAFE_TEXT := a character a shell would act on (a quote, ; $$ ` | & < > * ( ) or a control character)
hint_path = $(1) takes a path of letters, digits and . _ - / + , = @ : (copy the $(2) to such a path)
HINT_ARGS := it takes flags and values of letters, digits and . _ - / + , = @ : separated by spaces
HINT_TRAINER := TRAINER takes regression, mnist or both
HINT_WORD := it takes a name of letters, digits and . _ -

ifneq ($(filter stage stage-% loop grade,$(MAKECMDGOALS)),)
$(call check_value,FILE,$(SAFE_PATH_CHARS),$(call hint_path,FILE,file))
$(call check_value,SUBMISSIONS,$(SAFE_PATH_CHARS),$(call hint_path,SUBMISSIONS,folder))
$(call check_value,CSV,$(SAFE_PATH_CHARS),$(call hint_path,CSV,file))
$(call check_value,FROM,$(SAFE_PATH_CHARS),$(call hint_path,FROM,answer))
$(foreach v,ARGS MNIST_ARGS,$(call check_value,$(v),$(SAFE_PATH_CHARS),$(HINT_ARGS),spaces))
$(call check_value,TRAINER,$(SAFE_WORD_CHARS),$(HINT_TRAINER),spaces)
$(foreach v,ROUND MODE EXERCISE ANSWER TRY_RUN NN STAGE JOBS,$(call check_value,$(v),$(SAFE_WORD_CHARS),$(HINT_WORD)))
ifneq ($(filter-out regression mnist,$(TRAINER)),)
$(error unknown TRAINER '$(filter-out regression mnist,$(TRAINER))'; valid: regression, mnist (TRAINER=regression, TRAINER=mnist, or both))
endif
endif

# ----------------------------------------------------------------------------
# `make stage N VERB`: the words after `stage` become arguments, not goals, and the verb's own rule runs in this
# make as the rule of `stage`: a verb's rule has the targets $(call verb,VERB), that is stage-VERB (the name a tool
# calls it by: make stage-profile NN=02) and, for the verb asked for, `stage`. A failed program's one error line is
# then followed by make's one line, which names the recipe's file and line and the program's exit code, "make: ***
# [Makefile:NNN: stage] Error 5" (make itself exits 2). `make -n stage N VERB` prints what it would run.
verb = stage-$(1)$(if $(filter $(1),$(STAGE_VERB)), stage)

ifeq ($(firstword $(MAKECMDGOALS)),stage)

STAGE_WORD := $(word 2,$(MAKECMDGOALS))
VERB := $(or $(word 3,$(MAKECMDGOALS)),run)
# (override: the stage word decides, even over an NN= on the command line)
override NN := $(if $(filter 1 2 3 4 5 6 7 8 9,$(STAGE_WORD)),0$(STAGE_WORD),$(STAGE_WORD))
VERBS := run compare diff test profile sanitize try exercise prompt ladder

ifeq ($(filter $(NN),$(ALL_STAGES) $(LADDER_ONLY_STAGES)),)
$(error unknown stage '$(STAGE_WORD)'; valid stages: $(ALL_STAGES:0%=%) (e.g. make stage 2 run)$(if $(LADDER_ONLY_STAGES),; ladders only: $(LADDER_ONLY_STAGES:0%=%)))
endif
ifneq ($(filter-out $(VERBS),$(wordlist 3,99,$(MAKECMDGOALS)))$(word 4,$(MAKECMDGOALS)),)
$(error unknown verb '$(wordlist 3,99,$(MAKECMDGOALS))'; valid verbs: $(VERBS))
endif

# A verb the stage cannot do here is refused by the rule below instead of its own, before anything is built: one
# error: line, then make's own one line, which names the exit code (2: the stage has no such thing; 4: it needs a GPU).
# Without a GPU, run trains on the CPU (stage 01: its CPU version), and each GPU verb names what to read or run instead.
GPU_VERBS := compare profile sanitize ladder
INSTEAD_compare = read the measured tables in $(call stage_dir,$(NN))/README.md
INSTEAD_ladder = read the ladder tables in $(call stage_dir,$(NN))/README.md
INSTEAD_profile = read $(or $(wildcard results/*-profile-$(NN).txt),the worked examples of docs/PROFILING.md)
INSTEAD_sanitize = read the recorded verdicts in $(or $(wildcard results/*-sanitize.txt),docs/RESULTS.md)
ifeq ($(VERB)$(wildcard $(call stage_dir,$(NN))/*_ladder.cu),ladder)
REFUSAL := 2 stage $(NN:0%=%) has no kernel ladders; stages with one: $(sort $(foreach f,$(wildcard 0[1-9]-*/*_ladder.cu),$(patsubst 0%,%,$(firstword $(subst -, ,$(f))))))
else ifneq ($(and $(filter $(NN),$(LADDER_ONLY_STAGES)),$(filter-out ladder exercise try,$(VERB))),)
REFUSAL := 2 stage $(NN:0%=%) has no trainers: its folder holds kernel ladders only (make stage $(NN:0%=%) ladder; make stage $(NN:0%=%) exercise)
else ifeq ($(DETECTED_ARCH)$(filter $(GPU_VERBS),$(VERB)),$(VERB))
REFUSAL := 4 make stage $(NN:0%=%) $(VERB) needs an NVIDIA GPU and nvidia-smi lists none here: $(INSTEAD_$(VERB))$(if \
    $(filter $(NN),$(LADDER_ONLY_STAGES)),,$(comma) or run stage $(NN:0%=%) on the CPU with make stage $(NN:0%=%) run)
endif

STAGE_VERB := $(if $(REFUSAL),,$(VERB))
.PHONY: stage $(wordlist 2,$(words $(MAKECMDGOALS)),$(MAKECMDGOALS))
ifneq ($(REFUSAL),)
stage:
	@echo "error: $(wordlist 2,$(words $(REFUSAL)),$(REFUSAL))" >&2; exit $(firstword $(REFUSAL))
endif
# the words after `stage`: goals that do nothing (the commands test, profile and sanitize are not defined here)
$(wordlist 2,$(words $(MAKECMDGOALS)),$(MAKECMDGOALS)): ; @:

else
# ----------------------------------------------------------------------------
# the commands (`make help` lists them), left out under `make stage N VERB`

.PHONY: all help test check commit-info data bench clean profile sanitize stage-run stage-compare stage-diff stage-test

all: $(STAGE_BINS) $(BUILD)/01/vector_add

# What the rows of this build will say: "commit 3f2a9c1b0d4e dirty 0" (dirty empty: unknown).
commit-info:
	@echo "commit $(GIT_COMMIT_ID) dirty $(GIT_DIRTY)"

# tests: CPU suites always; each stage's GPU suite reports itself skipped when no GPU is visible
TEST_BINS = $(BUILD)/tests/test_cpu $(EXERCISE_TESTS) $(STAGES:%=$(BUILD)/%/test_gpu) $(BUILD)/01/test_vector_add $(STAGE_BINS) \
    $(LADDER_BINS) $(LADDER_TEST_BINS)
# the test builds use every core unless make was given -j
TEST_JOBS = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 2))

# make test: what a student runs, in a few minutes; make check: the slow smoke suites of the tools. Both build
# quietly (-s: warnings and errors only, after one line when anything is to be built) after checking that Criterion
# and zlib are there (tests/prerequisites.sh).
test check:
	@sh tests/prerequisites.sh $(CRITERION_PREFIX)
	@$(MAKE) --no-print-directory -s -q $(TEST_BINS) 2>/dev/null || \
	    echo "building the suites' programs and every stage (warnings and errors only; minutes on a fresh clone)"
	@$(MAKE) --no-print-directory -s $(TEST_JOBS) $(TEST_BINS)
	@$(if $(and $(DETECTED_ARCH),$(filter test,$@)),$(MAKE) --no-print-directory data,true)
	@NVCC=$(NVCC) bash tests/run_all.sh $@ $(BUILD) "$(STAGES)" "$(LADDER_TEST_BINS)"

# make profile: every trainer stage's profile in turn (RECORD=1: each one's results/<gpu>-profile-NN.txt)
profile:
	@if [ -z "$(DETECTED_ARCH)" ]; then echo "error: make profile needs an NVIDIA GPU and nvidia-smi lists none here:" \
	    "read the recorded profiles, results/*-profile-NN.txt, and docs/PROFILING.md" >&2; exit 4; fi
	@set -e; for s in $(STAGES); do $(MAKE) --no-print-directory stage-profile NN=$$s; done

# make sanitize: the rule of make stage N sanitize (tools/robustness.mk) over every stage
sanitize: stage-sanitize

bench:
	@$(MAKE) --no-print-directory -f tools/bench.mk bench

clean:
	rm -rf build build-asan

endif

# ----------------------------------------------------------------------------
# Result rows name the commit they were built at and whether tracked files had uncommitted changes. This is the one
# place that works them out; it records them in build/.commit and build/.dirty, which provenance.o is compiled
# from (common/provenance.c) and bench/provenance.py reads (asking `make commit-info` where there is no record).
# In order of preference:
#   1. make GIT_COMMIT_ID=3f2a9c1b0d4e GIT_DIRTY=0   (or the same in the environment): what a copy of the
#      tree without .git (a GPU machine's) is told by whoever copied it;
#   2. git, but only when this folder is the top of a git work tree (a copy inside some other
#      repository would otherwise get that repository's HEAD);
#   3. build/.commit and build/.dirty, the last make's record (the builder's record travels with build/);
#   4. unknown (dirty empty: unknown).
# A new commit or flag rewrites build/.commit / build/.dirty and rebuilds provenance.o.
GIT_AT_TOP := $(shell [ "$$(git rev-parse --show-toplevel 2>/dev/null)" -ef . ] && echo yes)
ifeq ($(GIT_AT_TOP) $(strip $(GIT_COMMIT_ID)),yes )
override GIT_COMMIT_ID := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
override GIT_DIRTY := $(if $(GIT_COMMIT_ID),$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo 1 || echo 0))
endif
ifeq ($(strip $(GIT_COMMIT_ID)),)
override GIT_COMMIT_ID := $(or $(shell cat $(BUILD)/.commit 2>/dev/null),unknown)
override GIT_DIRTY := $(if $(filter unknown,$(GIT_COMMIT_ID)),,$(shell cat $(BUILD)/.dirty 2>/dev/null))
endif
override GIT_COMMIT_ID := $(or $(firstword $(subst ', ,$(subst ",,$(GIT_COMMIT_ID)))),unknown)
override GIT_DIRTY := $(filter 0 1,$(GIT_DIRTY))
$(shell mkdir -p $(BUILD); [ "$$(cat $(BUILD)/.commit 2>/dev/null)" = "$(GIT_COMMIT_ID)" ] || echo $(GIT_COMMIT_ID) > $(BUILD)/.commit; \
        [ -f $(BUILD)/.dirty ] && [ "$$(cat $(BUILD)/.dirty)" = "$(GIT_DIRTY)" ] || echo $(GIT_DIRTY) > $(BUILD)/.dirty)
$(BUILD)/common/provenance.o: CFLAGS += -DGIT_COMMIT='"$(GIT_COMMIT_ID)"' -DGIT_DIRTY='"$(GIT_DIRTY)"'
$(BUILD)/common/provenance.o: $(BUILD)/.commit $(BUILD)/.dirty

# The visible GPU's name as results/ file names spell it, for recipes (a command substitution):
# 'NVIDIA H100 80GB HBM3' -> nvidia-h100-80gb-hbm3, by bench/results_csv.py's gpu_slug, the one spelling.
GPU_SLUG = $$($(PYTHON) bench/report_rows.py gpu-slug)

# make data checks the four files every time; a verb that trains MNIST fetches it only where it is missing
MNIST_DATA := data/mnist/train-images-idx3-ubyte
data $(MNIST_DATA):
	@sh tools/fetch_mnist.sh data
NEEDS_MNIST = $(if $(filter-out 01,$(NN)),$(if $(filter mnist,$(TRAINER)),$(MNIST_DATA)))

# ----------------------------------------------------------------------------
# the stage verbs (`make stage N VERB` sets NN): run, compare, diff and test here; profile in tools/profile.mk; try,
# exercise and prompt in tools/exercises.mk; sanitize in tools/robustness.mk; ladder in tools/ladders.mk

TRAINER ?= regression mnist
PREV = $(filter $(shell printf '%02d' $$(( 1$(NN) - 101 )) 2>/dev/null),$(STAGES))

# Without a GPU: the CPU version (stage 01) or the CPU reference trainers, and one note.
CPU_RUN_ARGS = $(if $(DETECTED_ARCH)$(findstring --reference,$(ARGS))$(findstring --version,$(ARGS)),,$(if $(filter 01,$(NN)),--version cpu,--reference))
CPU_RUN_NOTE = $(if $(CPU_RUN_ARGS),@echo "note: no CUDA device found: stage $(NN:0%=%) runs on the CPU ($(CPU_RUN_ARGS)) and its timings are CPU timings" >&2)

$(call verb,run): $(if $(filter 01,$(NN)),$(BUILD)/01/vector_add,$(BUILD)/$(NN)/regression $(BUILD)/$(NN)/mnist) $(NEEDS_MNIST)
	$(CPU_RUN_NOTE)
ifeq ($(NN),01)
	$(BUILD)/01/vector_add $(ARGS) $(CPU_RUN_ARGS)
else
	@set -e; for t in $(TRAINER); do $(BUILD)/$(NN)/$$t $(ARGS) $(CPU_RUN_ARGS); done
endif

$(call verb,compare): $(if $(PREV),$(foreach s,$(PREV) $(NN),$(BUILD)/$(s)/regression $(BUILD)/$(s)/mnist) $(NEEDS_MNIST))
	@if [ -z "$(PREV)" ]; then \
	    echo "error: stage $(NN) has no previous trainer stage to compare with (compare works for stages $(word 2,$(STAGES:0%=%))..$(lastword $(STAGES:0%=%)))" >&2; exit 2; fi
	@mkdir -p $(BUILD)/compare; rm -f $(BUILD)/compare/$(NN).csv
	@set -e; for t in $(TRAINER); do for s in $(PREV) $(NN); do \
	    $(BUILD)/$$s/$$t --quiet --csv $(BUILD)/compare/$(NN).csv $(ARGS); done; done
	@$(PYTHON) bench/report_rows.py compare $(BUILD)/compare/$(NN).csv

$(call verb,diff):
	@if [ -z "$(PREV)" ]; then \
	    echo "stage $(NN) is where the trainers start: nothing to diff against (read $(call stage_dir,$(NN))/README.md)"; \
	else for f in regression.cu mnist.cu; do \
	    diff -u --label $(call stage_dir,$(PREV))/$$f --label $(call stage_dir,$(NN))/$$f \
	        $(call stage_dir,$(PREV))/$$f $(call stage_dir,$(NN))/$$f; done; \
	    for f in $$(sh tools/stage_common.sh $(call stage_dir,$(NN)) $(call stage_dir,$(PREV))); do \
	        diff -u --label /dev/null --label $$f /dev/null $$f; done; fi; true

$(call verb,test): $(if $(filter 01,$(NN)),$(BUILD)/01/test_vector_add,$(BUILD)/$(NN)/test_gpu $(if $(DETECTED_ARCH),$(MNIST_DATA)))
	$<

# ----------------------------------------------------------------------------
# The rules of one topic each: how every program and suite is built; profiles; exercises and candidate files; the
# robustness tools (make sanitize, make fuzz, make test SANITIZE=1); the mutants; the kernel ladders; make help's text.
# (-include: the Makefile alone, in a tree without tools/, still answers make commit-info.)
-include tools/build.mk tools/profile.mk tools/exercises.mk tools/robustness.mk tools/mutants.mk tools/ladders.mk \
    tools/help.mk
