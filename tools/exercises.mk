# tools/exercises.mk: candidate files, checked exercises, grading, prompts, the loop and the student copy
# (`make help` lists the verbs). Included by the top Makefile; the stage verbs are reached through `make stage N
# VERB`, which sets NN (the top Makefile says what $(call verb,VERB) names). The work is in tools/try.sh, exercise.sh
# and grade.sh (which run try.sh), prompt.sh, loop.sh and student.sh, each of which says what it does; this file only
# hands them the build settings, as TRY_* variables in their environment.
#
# TRY_RUN=0 stops try and exercise after the checks that need no GPU (compiles, exports, links, markers).
# Exit status: 0 PASS (or TRY_RUN=0 with nothing left to do), 1 FAIL, 2 a file that cannot be a candidate
# (missing, does not compile, does not export what the drivers need, does not link), 4 UNVERIFIED (no
# CUDA device ran the suite, and no CPU check covers the exercise whole: it was not all checked, so it did not pass).

.PHONY: stage-try stage-exercise stage-prompt student loop grade

TRY_VERBS := $(call verb,try) $(call verb,exercise) $(call verb,prompt) loop grade
# each verb's script reads TRY_MAKE = $(MAKE), TRY_BUILD = $(BUILD), and so on
$(foreach v,MAKE BUILD PYTHON NVCC NVCCFLAGS CC CFLAGS LDFLAGS LDLIBS CRITERION_LIBS ARGS TRAINER GIT_COMMIT_ID \
    GIT_DIRTY EXERCISE ANSWER,$(eval $(TRY_VERBS): export TRY_$(v) = $$($(v))))
$(TRY_VERBS): export TRY_HAVE_GPU = $(if $(DETECTED_ARCH),1,0)
$(call verb,try) $(call verb,exercise) $(call verb,prompt): export TRY_STAGE_DIR = $(call stage_dir,$(NN))
$(call verb,try) $(call verb,exercise) grade: export TRY_RUN_SUITE = $(if $(filter 0 no,$(TRY_RUN)),0,1)

$(call verb,try):
	+@bash tools/try.sh $(NN) "$(FILE)"

$(call verb,exercise):
	+@bash tools/exercise.sh $(NN)

$(call verb,prompt):
	+@bash tools/prompt.sh $(NN)

# the loop's stage is 02: its trainers, built and profiled with these settings; FROM travels in the environment
loop: export TRY_STAGE_DIR = $(call stage_dir,02)
$(foreach v,ROUND FROM MODE,$(eval loop: export LOOP_$(v) = $$($(v))))
loop:
	+@bash tools/loop.sh

# make grade STAGE=N SUBMISSIONS=dir [JOBS=k] [CSV=file]: try on every .cu of the folder, one CSV line each, try's
# exit status in it (tools/grade.sh); the values travel in the environment
GRADE_NN = $(if $(filter 1 2 3 4 5 6 7 8 9,$(STAGE)),0$(STAGE),$(STAGE))
grade: export TRY_STAGE_DIR = $(if $(filter $(GRADE_NN),$(ALL_STAGES)),$(call stage_dir,$(GRADE_NN)))
$(foreach v,STAGE SUBMISSIONS JOBS CSV,$(eval grade: export GRADE_$(v) = $$($(v))))
grade: export GRADE_STAGES = $(ALL_STAGES)
grade:
	+@bash tools/grade.sh

# DIR and UPTO travel in the environment, never through a shell command line; so do the Makefile's commit and flag
student: export STUDENT_DIR = $(or $(DIR),$(BUILD)/student)
student: export STUDENT_UPTO = $(UPTO)
student: export STUDENT_COMMIT = $(GIT_COMMIT_ID)
student: export STUDENT_DIRTY = $(GIT_DIRTY)
student:
	@bash tools/student.sh
