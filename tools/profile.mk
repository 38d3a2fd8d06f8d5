# tools/profile.mk: make stage N profile, whose rule (stage-profile) the top Makefile's make profile runs for every
# trainer stage and tools/loop.sh and tools/prompt.sh call (make stage-profile NN=02 ...): Nsight Compute over a short
# run of each trainer, the metrics the summary reports collected by name (the SpeedOfLight section alone lacks
# dram__throughput on some GPUs; it is kept so that the .ncu-rep reads well in ncu-ui), the raw CSV summarized per
# kernel by bench/report_rows.py (docs/PROFILING.md). RECORD=1 also writes both trainers' summaries to
# results/<gpu>-profile-NN.txt, where bench/make_tables.py quotes them in the stage README.
PROFILE_METRICS := gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size
PROFILE_NCU := ncu --launch-count 40 --section SpeedOfLight --metrics $(PROFILE_METRICS)
PROFILE_RECORD = results/$(GPU_SLUG)-profile-$(NN).txt
# Stage 08's MNIST profile runs --hidden 0 first, the configuration its recorded profile
# (results/<gpu>-profile-08.txt) was taken at, and ARGS or MNIST_ARGS after it (the last of a repeated flag counts).
PROFILE_MNIST_FLAGS = $(strip $(if $(filter 08,$(NN)),--hidden 0) $(ARGS) $(MNIST_ARGS))
# The trainers profiled and where the outputs go (tools/loop.sh points them at a candidate's build)
PROFILE_BIN = $(BUILD)/$(NN)
PROFILE_OUT = $(BUILD)/profile/$(NN)

.PHONY: stage-profile
$(call verb,profile): $(BUILD)/$(NN)/regression $(BUILD)/$(NN)/mnist $(NEEDS_MNIST)
	@if [ "$(RECORD)" = 1 ]; then \
	    command -v ncu >/dev/null 2>&1 || { echo "error: RECORD=1 records ncu's summaries, and ncu is not installed" >&2; exit 2; }; \
	    [ "$(words $(TRAINER))" = 2 ] || { echo "error: RECORD=1 records both trainers: leave TRAINER unset" >&2; exit 2; }; \
	fi
	@mkdir -p $(dir $(PROFILE_OUT))
	@set -e; rm -f $(PROFILE_OUT)-record.txt; for t in $(TRAINER); do \
	    args="$(if $(strip $(ARGS)), $(strip $(ARGS)))"; \
	    [ $$t != mnist ] || args="$(if $(PROFILE_MNIST_FLAGS), $(PROFILE_MNIST_FLAGS))"; \
	    if command -v ncu >/dev/null 2>&1; then \
	        out=$(PROFILE_OUT)-$$t; run="$(PROFILE_BIN)/$$t --quiet --epochs 2$$args"; \
	        echo "== ncu: $$run (full report in $$out.ncu-rep, raw CSV in $$out.csv)"; \
	        $(PROFILE_NCU) -f -o $$out $$run; \
	        ncu --import $$out.ncu-rep --page raw --csv --metrics $(PROFILE_METRICS) >$$out.csv; \
	        { echo "== $$t: $(PROFILE_NCU) -f -o $$out $$run"; \
	          $(PYTHON) bench/report_rows.py profile $$out.csv; echo; } >$$out.txt; \
	        tee -a $(PROFILE_OUT)-record.txt <$$out.txt; \
	    else echo "== ncu not found: per-phase breakdown instead"; $(PROFILE_BIN)/$$t --breakdown$$args; fi; done
	@if [ "$(RECORD)" = 1 ]; then \
	    record=$(PROFILE_RECORD); mkdir -p results; \
	    { echo "$$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)" \
	           "· driver $$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)" \
	           "· ncu $$(ncu --version | sed -n 's/^Version //p')" \
	           "· commit $(GIT_COMMIT_ID) dirty $(GIT_DIRTY) · $$(date -u +%Y-%m-%dT%H:%M:%SZ)"; \
	      echo "command: make stage $(NN:0%=%) profile RECORD=1$(if $(ARGS), ARGS=\"$(ARGS)\")$(if $(MNIST_ARGS), MNIST_ARGS=\"$(MNIST_ARGS)\")"; echo; \
	      cat $(PROFILE_OUT)-record.txt; } >$$record; \
	    echo "profile summaries recorded in $$record"; \
	fi
