# common/exercises.mk: candidate files, checked exercises, prompts, the loop and the student copy (`make help`
# lists the verbs). Included by the top Makefile; the stage verbs are reached through `make stage N VERB`,
# which sets NN. The work is in common/try.sh, exercise.sh (which runs try.sh), prompt.sh, loop.sh and
# student.sh, each of which says what it does; this file only hands them the build settings, as TRY_*
# variables in their environment.
#
# TRY_RUN=0 stops try and exercise after the checks that need no GPU (compiles, exports, links, markers).
# Exit status: 0 PASS (or TRY_RUN=0 with nothing left to do), 1 FAIL, 2 a file that cannot be a candidate
# (missing, does not compile, does not export what the drivers need, does not link), 4 UNVERIFIED (no
# CUDA device ran the suite: nothing was checked, so nothing passed).

.PHONY: stage-try stage-exercise stage-prompt student loop

stage-try stage-exercise stage-prompt loop: export TRY_MAKE = $(MAKE)
stage-try stage-exercise stage-prompt loop: export TRY_BUILD = $(BUILD)
stage-try stage-exercise stage-prompt loop: export TRY_PYTHON = $(PYTHON)
stage-try stage-exercise stage-prompt loop: export TRY_NVCC = $(NVCC)
stage-try stage-exercise stage-prompt loop: export TRY_NVCCFLAGS = $(NVCCFLAGS)
stage-try stage-exercise stage-prompt loop: export TRY_CC = $(CC)
stage-try stage-exercise stage-prompt loop: export TRY_CFLAGS = $(CFLAGS)
stage-try stage-exercise stage-prompt loop: export TRY_LDFLAGS = $(LDFLAGS)
stage-try stage-exercise stage-prompt loop: export TRY_LDLIBS = $(LDLIBS)
stage-try stage-exercise stage-prompt loop: export TRY_CRITERION_LIBS = $(CRITERION_LIBS)
stage-try stage-exercise stage-prompt loop: export TRY_HAVE_GPU = $(if $(DETECTED_ARCH),1,0)
stage-try stage-exercise stage-prompt: export TRY_STAGE_DIR = $(call stage_dir,$(NN))
stage-try stage-exercise stage-prompt loop: export TRY_ARGS = $(ARGS)
stage-try stage-exercise stage-prompt loop: export TRY_TRAINER = $(TRAINER)
stage-try stage-exercise: export TRY_RUN_SUITE = $(if $(filter 0 no,$(TRY_RUN)),0,1)
stage-exercise: export TRY_EXERCISE = $(EXERCISE)
stage-exercise: export TRY_ANSWER = $(ANSWER)

stage-try:
	+@bash common/try.sh $(NN) "$(FILE)"

stage-exercise:
	+@bash common/exercise.sh $(NN)

stage-prompt:
	+@bash common/prompt.sh $(NN)

# the loop's stage is 02: its trainers, built and profiled with these settings; FROM travels in the environment
loop: export TRY_STAGE_DIR = $(call stage_dir,02)
loop: export LOOP_ROUND = $(ROUND)
loop: export LOOP_FROM = $(FROM)
loop: export LOOP_MODE = $(or $(MODE),open)
loop:
	+@bash common/loop.sh

# DIR travels in the environment, never through a shell command line
student: export STUDENT_DIR = $(or $(DIR),$(BUILD)/student)
student:
	@bash common/student.sh
