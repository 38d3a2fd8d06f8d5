# common/exercises.mk: candidate files, checked exercises and prompts. Included by the top Makefile;
# reached through `make stage N VERB`, which sets NN.
#
#   make stage N try FILE=path.cu   build stage N with FILE in place of the trainer it defines (for stage 1:
#                                   of vector_add.cu), run the stage's GPU suite on it, time it against the
#                                   stage's own file with the same flags (ARGS=... adds flags): PASS or FAIL
#   make stage N exercise           `try` on the stage's skeleton: build/exercise/NN/FILE.cu, the stage file
#                                   with its `// EXERCISE(name) begin:` ... `// EXERCISE end` regions cut
#                                   by common/exercise_cut.awk (EXERCISE=name cuts that region only)
#   make stage N exercise ANSWER=1  `try` on the stage file the skeleton was cut from (it must pass)
#   make student [DIR=path]         a copy of the repository with every exercise region cut, for a class
#                                   (default build/student; common/student.sh)
#   make stage N prompt             build/prompt/stageNN-TRAINER.md, one per trainer (stage 1: stage01.md): a
#                                   self-contained prompt, under 40 KB, for an assistant or a student to write
#                                   stage N's idea into stage N-1's file (TRAINER=regression|mnist: one only)
#   make loop TRAINER=mnist ROUND=1 round 1 of the loop: build/loop/TRAINER/round-1.md, a prompt to make stage 02's
#                                   trainer faster and keep it correct (TRAINER=regression|mnist: one only)
#   make loop TRAINER=mnist ROUND=k FROM=answer.md [MODE=open|guided]   round k: round k-1's answer tried as a
#                                   stage 02 candidate, timed against stages 02 and 08, profiled and recorded
#                                   (02-llm-baseline/loop/), and round k's prompt from them (common/loop.sh)
#
# TRY_RUN=0 stops try and exercise after the checks that need no GPU (compiles, exports, links, markers).
# Exit status: 0 PASS (or TRY_RUN=0 with nothing left to do), 1 FAIL, 2 a file that cannot be a candidate
# (missing, does not compile, does not export what the drivers need, does not link), 4 UNVERIFIED (no
# CUDA device ran the suite: nothing was checked, so nothing passed).
#
# The work is in common/try.sh, common/exercise.sh (which runs try.sh) and common/prompt.sh (whose prose
# is common/prompt_template.md), with common/try_common.sh for what they share; the verdict and speed
# tables are in bench/report_rows.py. This file only hands them the build settings, as TRY_* variables
# in their environment.

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
stage-try stage-exercise stage-prompt loop: export TRY_CRITERION_LIBS = $(CRITERION_LIBS) -Xlinker -rpath=$(CRITERION_PREFIX)/lib
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
