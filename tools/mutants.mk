# tools/mutants.mk: make test-mutants, included by the top Makefile.
#
#   make test-mutants        every deliberate bug in tests/mutants/*.sed applied to the last stage's
#                            trainers; the GPU suite must fail on each, in each precision (GPU machine)
#   MUTANT_STAGE=NN          another stage (default: the last trainer stage; 09: its kernel ladder's bugs)
# make test checks, without a GPU, that every mutant still applies and compiles (tests/mutants.sh).

.PHONY: test-mutants
MUTANT_STAGE ?= $(lastword $(STAGES))

$(foreach v,NVCC NVCCFLAGS LDFLAGS LDLIBS CRITERION_LIBS,$(eval test-mutants: export $(v) := $$($(v))))
# a stage's kernel ladders: their tests, which its mutants are linked into
MUTANT_LADDER_TESTS = $(foreach f,$(wildcard $(MUTANT_STAGE)-*/*_ladder.cu),$(BUILD)/tests/gpu/test_$(basename $(notdir $(f))).o)
test-mutants: $(BUILD)/tests/gpu/test_stage.o $(COMMON_LIB) $(MUTANT_LADDER_TESTS) \
              $(if $(filter $(MUTANT_STAGE),$(STAGES)),$(BUILD)/$(MUTANT_STAGE)/regression $(BUILD)/$(MUTANT_STAGE)/mnist \
              $(if $(DETECTED_ARCH),$(MNIST_DATA)))
	@bash tests/mutants.sh $(BUILD) $(MUTANT_STAGE)
