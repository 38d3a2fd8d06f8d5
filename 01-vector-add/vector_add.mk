# 01-vector-add/vector_add.mk: build rules for the warm-up stage, included by the top Makefile.
#
#   build/01/vector_add        every version, a table, --csv rows       (make stage 1 run)
#   build/01/test_vector_add   every version on odd sizes vs the CPU    (make stage 1 test)
#
# The test links the same versions, compiled a second time without main().

$(BUILD)/01/vector_add.o: 01-vector-add/vector_add.cu $(COMMON_HEADERS) $(ARCH_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/01/vector_add_versions.o: 01-vector-add/vector_add.cu $(COMMON_HEADERS) $(ARCH_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -DVECTOR_ADD_NO_MAIN -c $< -o $@

$(BUILD)/01/vector_add: $(BUILD)/01/vector_add.o $(COMMON_LIB)
	$(NVCC) $^ -o $@ $(LDFLAGS) $(LDLIBS)

$(BUILD)/01/test_vector_add: $(BUILD)/tests/gpu/test_vector_add.o $(BUILD)/01/vector_add_versions.o $(COMMON_LIB)
	$(NVCC) $^ -o $@ $(LDFLAGS) $(CRITERION_LIBS) -Xlinker -rpath=$(CRITERION_PREFIX)/lib $(LDLIBS)
