# tools/ladders.mk: the kernel ladders, NN-*/NAME_ladder.cu, included by the top Makefile.
#
#   build/NN/NAME_ladder        every version of one kernel against a ceiling: a table, --csv rows
#   build/NN/test_NAME_ladder   every version on odd sizes against the CPU (tests/gpu/test_NAME_ladder.c;
#                               make test runs them, and they report themselves skipped without a GPU)
#
#   make stage N ladder                 build and run every ladder of stage N (stages 4, 5, 6, 8 and 9)
#   make stage N ladder LADDER=gemm     one of them; ARGS="--repeat 50" passes flags to each one run
#   make stage N ladder RECORD=1        also append their rows to results/<gpu>-ladders.csv, where
#                                       bench/make_tables.py finds them for the stage README's tables
#
# Built by tools/build.mk's versions_rules (a test links its ladder compiled with -DLADDER_NO_MAIN). A ladder
# may include another stage's ladder (06's GEMM ladder starts from 04's kernels) or its own stage's trainer (08's
# regression ladder includes regression.cu): each depends on every ladder source and every .cu of its stage folder.

LADDER_SRCS := $(sort $(wildcard 0[1-9]-*/*_ladder.cu))
ladder_stage = $(firstword $(subst -, ,$(1)))
ladder_name = $(basename $(notdir $(1)))
LADDER_BINS := $(foreach f,$(LADDER_SRCS),$(BUILD)/$(call ladder_stage,$(f))/$(call ladder_name,$(f)))
LADDER_TEST_BINS := $(foreach f,$(LADDER_SRCS),$(BUILD)/$(call ladder_stage,$(f))/test_$(call ladder_name,$(f)))

ladder_deps = $(sort $(LADDER_SRCS) $(wildcard $(dir $1)*.cu))
ladder_rules = $(call versions_rules,$1,$(call ladder_stage,$1),$(call ladder_name,$1),LADDER_NO_MAIN,\
    $(call ladder_deps,$1))
$(foreach f,$(LADDER_SRCS),$(eval $(call ladder_rules,$(f))))

all: $(LADDER_BINS)

# ----------------------------------------------------------------------------
# make stage N ladder (the top Makefile refuses a stage without ladders, or a machine without a GPU)

.PHONY: stage-ladder

STAGE_LADDERS = $(filter $(BUILD)/$(NN)/%,$(LADDER_BINS))
PICKED_LADDERS = $(if $(LADDER),$(filter %/$(LADDER)_ladder,$(STAGE_LADDERS)),$(STAGE_LADDERS))
LADDER_RECORD_CSV = results/$(GPU_SLUG)-ladders.csv

$(call verb,ladder): $(PICKED_LADDERS)
	@if [ -z "$(PICKED_LADDERS)" ]; then echo "error: stage $(NN) has no ladder '$(LADDER)'; its ladders:" \
	    "$(patsubst $(BUILD)/$(NN)/%_ladder,%,$(STAGE_LADDERS))" >&2; exit 2; fi
	@set -e; csv=; \
	if [ "$(RECORD)" = 1 ]; then mkdir -p results; csv=$(LADDER_RECORD_CSV); echo "ladder rows go to $$csv"; fi; \
	for ladder in $(PICKED_LADDERS); do echo "== $$ladder $(ARGS)"; $$ladder $(ARGS) $${csv:+--csv "$$csv"}; done
