# tools/build.mk: the build rules, with the top Makefile's compilers, flags and stage lists: libcommon.a, each stage's
# trainers and GPU suite, vector_add and the kernel ladders (versions_rules), the CPU suites and the exercises' checks.

# A changed GENCODE or compiler rebuilds everything.
ARCH_STAMP := $(BUILD)/.arch-$(shell echo '$(GENCODE) $(NVCC)' | cksum | cut -d' ' -f1)

$(ARCH_STAMP):  # (BUILD exists: the top Makefile writes the commit's record there as it is read)
	@rm -f $(BUILD)/.arch-*
	@touch $@

$(BUILD)/common/%.o: common/%.c $(COMMON_HEADERS) | $(ARCH_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# The CPU reference does real work with --reference; -O3 lets gcc vectorize its loops (same results).
$(BUILD)/common/reference.o: CFLAGS += -O3
$(BUILD)/common/copy_pool.o: CFLAGS += -fopenmp

$(COMMON_LIB): $(COMMON_OBJ)
	ar rcs $@ $^

LINK_PROGRAM = $(NVCC) $^ -o $@ $(LDFLAGS) $(LDLIBS)
LINK_TEST = $(NVCC) $^ -o $@ $(LDFLAGS) $(CRITERION_LIBS) $(LDLIBS)

define stage_rules
$(BUILD)/$(1)/%.o: $(call stage_dir,$(1))/%.cu $(COMMON_HEADERS) $(ARCH_STAMP)
	@mkdir -p $$(@D)
	$(NVCC) $(NVCCFLAGS) -c $$< -o $$@

# The drivers are compiled once per stage so that they know which stage they report.
$(BUILD)/$(1)/%_main.o: common/%_main.c $(COMMON_HEADERS) $(ARCH_STAMP)
	@mkdir -p $$(@D)
	$(CC) $(CFLAGS) -DSTAGE_NAME='"$(1)"' -c $$< -o $$@

$(BUILD)/$(1)/regression $(BUILD)/$(1)/mnist: $(BUILD)/$(1)/%: $(BUILD)/$(1)/%_main.o $(BUILD)/$(1)/%.o $(COMMON_LIB)
	$$(LINK_PROGRAM)

$(BUILD)/$(1)/test_gpu: $(BUILD)/tests/gpu/test_stage.o $(BUILD)/$(1)/regression.o $(BUILD)/$(1)/mnist.o $(COMMON_LIB)
	$$(LINK_TEST)
endef
$(foreach s,$(STAGES),$(eval $(call stage_rules,$(s))))

# versions_rules SOURCE NN NAME NO_MAIN_MACRO [DEPS]: a program that is its own main and table (stage 01's
# vector_add, the kernel ladders): build/NN/NAME, and build/NN/test_NAME, which links the test of that name in
# tests/gpu/ with the same versions compiled a second time with -DNO_MAIN_MACRO (no main)
define versions_rules
$(BUILD)/$(2)/$(3).o: $(1) $(5) $(COMMON_HEADERS) $(ARCH_STAMP)
	@mkdir -p $$(@D)
	$(NVCC) $(NVCCFLAGS) -c $$< -o $$@

$(BUILD)/$(2)/$(3)_versions.o: $(1) $(5) $(COMMON_HEADERS) $(ARCH_STAMP)
	@mkdir -p $$(@D)
	$(NVCC) $(NVCCFLAGS) -D$(4) -c $$< -o $$@

$(BUILD)/$(2)/$(3): $(BUILD)/$(2)/$(3).o $(COMMON_LIB)
	$$(LINK_PROGRAM)

$(BUILD)/$(2)/test_$(3): $(BUILD)/tests/gpu/test_$(3).o $(BUILD)/$(2)/$(3)_versions.o $(COMMON_LIB)
	$$(LINK_TEST)
endef
$(eval $(call versions_rules,01-vector-add/vector_add.cu,01,vector_add,VECTOR_ADD_NO_MAIN))

$(BUILD)/tests/%.o: tests/%.c $(COMMON_HEADERS) $(wildcard tests/*.h tests/gpu/*.h) | $(ARCH_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CRITERION_FLAGS) -Itests -c $< -o $@

$(BUILD)/tests/test_cpu: $(patsubst tests/%.c,$(BUILD)/tests/%.o,$(wildcard tests/test_*.c)) $(COMMON_LIB)
	$(LINK_TEST)

# The CPU checks of exercise regions in common/ (tests/exercise/test_<name>.c checks common/<name>.c) and in kernel
# ladders (tests/exercise/test_<name>_ladder.c checks NN-*/<name>_ladder.cu, compiled without its main): each a program
# of its own, which try links with a candidate's file and make test runs (in a student copy, once the exercise is done).
# A ladder's check is built where its ladder is (a student copy of earlier stages has none).
exercise_ladder_source = $(firstword $(wildcard 0[1-9]-*/$(1).cu))
EXERCISE_LADDER_NAMES := $(foreach n,$(patsubst tests/exercise/test_%.c,%,$(wildcard tests/exercise/test_*_ladder.c)),$(if \
    $(call exercise_ladder_source,$(n)),$(n)))
EXERCISE_TESTS := $(patsubst tests/%.c,$(BUILD)/tests/%,$(filter-out tests/exercise/test_%_ladder.c,$(wildcard tests/exercise/test_*.c))) \
    $(EXERCISE_LADDER_NAMES:%=$(BUILD)/tests/exercise/test_%)
$(filter-out %_ladder,$(EXERCISE_TESTS)): $(BUILD)/tests/exercise/%: $(BUILD)/tests/exercise/%.o $(COMMON_LIB)
	$(LINK_TEST)
define exercise_ladder_rule
$(BUILD)/tests/exercise/test_$(1): $(BUILD)/tests/exercise/test_$(1).o \
    $(BUILD)/$(firstword $(subst -, ,$(call exercise_ladder_source,$(1))))/$(1)_versions.o $(COMMON_LIB)
	$$(LINK_TEST)
endef
$(foreach n,$(EXERCISE_LADDER_NAMES),$(eval $(call exercise_ladder_rule,$(n))))
