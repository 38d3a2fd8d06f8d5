#!/usr/bin/env bash
# common/try.sh NN FILE: the work behind `make stage N try` (common/exercises.mk hands over the build
# settings as TRY_* environment variables). FILE replaces the stage trainer it defines (for stage 01:
# vector_add.cu). Not meant to be run by hand.
#
# Step by step (every mistake is one "error:" line and exit 2, before anything runs on a GPU):
#   1. FILE exists and is a .cu file, or a Markdown answer (.md) whose only fenced code block is taken as
#      the file (build/try/NN/TRAINER.cu); the stage's own objects are built (make, as usual);
#   2. FILE compiles (nvcc, the Makefile's flags) into build/try/NN/;
#   3. it defines, with C linkage, what the drivers and tests call: train_regression and
#      REGRESSION_VARIANTS, or train_mnist, MNIST_VARIANTS and MNIST_PRECISIONS (nm decides which
#      trainer it replaces); for stage 01, main and the three vector_add_* functions;
#   4. it links with tests/gpu/test_stage.c and the stage's other trainer (build/try/NN/test_gpu),
#      and with the driver (build/try/NN/regression or mnist, which reports its stage as "NN-try");
#   5. the `// TODO(exercise)` comments left in FILE are counted: a file with one left never passes;
#   6. the suite runs on the candidate's trainer only (Criterion --filter);
#   7. only if it passed: the stage's driver and the candidate's, same flags, one after the other
#      (--quiet --repeat 3, then ARGS), and a table of the two result rows with the relative speed.
# Verdict on the last line: "try: PASS", "try: FAIL", or "try: UNVERIFIED (no CUDA device)"; exit 0, 1
# or 4 (see common/exercises.mk). common/exercise.sh runs this on a skeleton, with TRY_OUT (the folder
# for the build) and TRY_INCLUDE_DIR (the stage's folder, where a skeleton cut into build/ finds the
# headers beside its file).
nn=${1:-}
# shellcheck source=common/try_common.sh
source common/try_common.sh
[ -n "$nn" ] || die "usage: common/try.sh NN FILE (run through make stage N try)"
out=${TRY_OUT:-$build/try/$nn}
include_dir=${TRY_INCLUDE_DIR:-}
run_suite_too=${TRY_RUN_SUITE:-1}

# ----------------------------------------------------------------------------
# the candidate: checked, compiled, its symbols read, linked

answer_blocks() {  # answer_blocks FILE.md: how many fenced code blocks it holds (``` or ~~~ at a line's start)
    awk '/^(```|~~~)/ { fences++ } END { print fences % 2 ? "unclosed" : fences / 2 }' "$1"
}

check_candidate() {  # check_candidate FILE: sets file, and answer where it is a Markdown answer; or exits 2
    file=$1 answer=
    [ -n "$file" ] || die "no candidate given: make stage $n try FILE=path/to/regression.cu (a .cu file that replaces one of stage $nn's trainers)"
    [ -e "$file" ] || die "FILE '$file' does not exist"
    [ -f "$file" ] || die "FILE '$file' is not a regular file"
    case $file in
    *.cu) ;;
    *.md)
        answer=$file
        local blocks
        blocks=$(answer_blocks "$answer")
        [ "$blocks" = 1 ] || die "$answer holds $blocks fenced code blocks: try takes an answer with exactly one (the complete file)"
        ;;
    *) die "FILE '$file' is not a CUDA source: try takes a .cu file, or a Markdown answer holding one" ;;
    esac
}

build_own() {  # what the candidate links with, and the drivers only when they will run
    local targets=("$build/common/libcommon.a")
    if [ "$nn" = 01 ]; then
        trainer=vector_add
        targets+=("$build/tests/gpu/test_vector_add.o")
        [ "$run_suite_too" = 1 ] && targets+=("$build/01/vector_add")
    else
        targets+=("$build/tests/gpu/test_stage.o" "$build/$nn/regression.o" "$build/$nn/mnist.o")
        [ "$run_suite_too" = 1 ] && targets+=("$build/$nn/regression" "$build/$nn/mnist")
    fi
    build_stage "${targets[@]}"
}

compile_candidate() {  # compile_candidate OUT.o [FLAGS...]
    local object=$1
    shift
    # shellcheck disable=SC2086  # the flags are a list
    $TRY_NVCC $TRY_NVCCFLAGS ${include_dir:+"-I$include_dir"} "$@" -c "$file" -o "$object" ||
        die "$file does not compile (see the compiler output above)"
}

defined_symbols() {  # the global symbols an object defines, one per line
    nm --defined-only "$1" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[A-Z]$/ { print $3 }'
}

has() { grep -qx "$1" <<<"$2"; }

# sets trainer (regression|mnist), other (the stage trainer that stays) and required, or exits 2
pick_trainer() {
    local symbols=$1 has_r=0 has_m=0 s
    for s in train_regression REGRESSION_VARIANTS; do has "$s" "$symbols" && has_r=1; done
    for s in train_mnist MNIST_VARIANTS MNIST_PRECISIONS; do has "$s" "$symbols" && has_m=1; done
    if [ $has_r = 1 ] && [ $has_m = 1 ]; then
        die "$file defines symbols of both trainers (train_regression ... and train_mnist ...): a candidate replaces one; split it into regression.cu and mnist.cu"
    fi
    if [ $has_r = 0 ] && [ $has_m = 0 ]; then  # neither: the file name says what it meant to be
        case $(basename "$file") in
        *mnist*) has_m=1 ;;
        *regression*) has_r=1 ;;
        *) die "$file defines neither train_regression nor train_mnist with C linkage: keep a signature of common/trainer.h and #include \"trainer.h\" (it declares them extern \"C\")" ;;
        esac
    fi
    if [ $has_r = 1 ]; then trainer=regression other=mnist required="train_regression REGRESSION_VARIANTS"
    else trainer=mnist other=regression required="train_mnist MNIST_VARIANTS MNIST_PRECISIONS"; fi
    for s in $required; do
        has "$s" "$symbols" ||
            die "$file does not define $s with C linkage, which the $trainer driver and tests need (common/trainer.h declares it: #include \"trainer.h\" and keep its signature)"
    done
    if has main "$symbols"; then
        die "$file defines main: a trainer file must not (the drivers in common/ own main)"
    fi
}

link_vector_add() {  # stage 01: the file is the whole program, and its versions are what the suite calls
    compile_candidate "$out/candidate.o"
    compile_candidate "$out/candidate_versions.o" -DVECTOR_ADD_NO_MAIN
    local symbols s
    symbols=$(defined_symbols "$out/candidate_versions.o")
    for s in vector_add_version_count vector_add_version_name vector_add_run; do
        has "$s" "$symbols" ||
            die "$file does not define $s with C linkage, which tests/gpu/test_vector_add.c calls (keep the extern \"C\" functions of 01-vector-add/vector_add.cu)"
    done
    has main "$(defined_symbols "$out/candidate.o")" ||
        die "$file does not define main: it replaces vector_add.cu as a whole, the program included (main only under #ifndef VECTOR_ADD_NO_MAIN)"
    # shellcheck disable=SC2086
    $TRY_NVCC "$build/tests/gpu/test_vector_add.o" "$out/candidate_versions.o" "$build/common/libcommon.a" \
        -o "$out/test_vector_add" $TRY_LDFLAGS $TRY_CRITERION_LIBS $TRY_LDLIBS ||
        die "$file does not link with tests/gpu/test_vector_add.c (see the linker output above)"
    # shellcheck disable=SC2086
    $TRY_NVCC "$out/candidate.o" "$build/common/libcommon.a" -o "$out/vector_add" $TRY_LDFLAGS $TRY_LDLIBS ||
        die "$file does not link into the vector_add program (see the linker output above)"
    echo "   compiles, defines main and vector_add_version_count/_name/_run, links: $out/test_vector_add, $out/vector_add"
}

link_trainer() {  # stages 02 on: the file replaces one trainer, beside the stage's other one
    compile_candidate "$out/candidate.o"
    pick_trainer "$(defined_symbols "$out/candidate.o")"
    # shellcheck disable=SC2086
    $TRY_NVCC "$build/tests/gpu/test_stage.o" "$out/candidate.o" "$build/$nn/$other.o" "$build/common/libcommon.a" \
        -o "$out/test_gpu" $TRY_LDFLAGS $TRY_CRITERION_LIBS $TRY_LDLIBS ||
        die "$file does not link with stage $nn's $other.o and the test suite (see the linker output above): make its helpers and kernels static"
    # shellcheck disable=SC2086
    $TRY_CC $TRY_CFLAGS -DSTAGE_NAME="\"$nn-try\"" -c "common/${trainer}_main.c" -o "$out/${trainer}_main.o" ||
        die "the $trainer driver does not compile (see above)"
    # shellcheck disable=SC2086
    $TRY_NVCC "$out/${trainer}_main.o" "$out/candidate.o" "$build/common/libcommon.a" -o "$out/$trainer" \
        $TRY_LDFLAGS $TRY_LDLIBS ||
        die "$file does not link into the $trainer driver (see the linker output above)"
    echo "   replaces stage $nn's $trainer: compiles, defines ${required// /, }, links: $out/test_gpu, $out/$trainer"
}

# ----------------------------------------------------------------------------
# the suite and the verdict

# run_suite BINARY [ARGS...]: shows the output, keeps it in $out/suite.log and Criterion's TAP report in
# $out/suite.tap ("ok - NAME", "ok - NAME  # SKIP why", "not ok - NAME": a crash too); sets tested/failed/suite_rc
run_suite() {
    echo "== correctness: $* (every variant against the CPU reference)"
    rm -f "$out/suite.tap"
    "$@" --tap="$out/suite.tap" 2>&1 | tee "$out/suite.log"
    suite_rc=${PIPESTATUS[0]}
    tested=0 failed=1  # no report: the runner itself died, a failure and not a skip
    grep -q '^1\.\.' "$out/suite.tap" 2>/dev/null || return 0
    read -r tested failed < <(awk '/^ok .*# SKIP/ { next } /^ok / { t++ } /^not ok / { t++; f++ }
        END { print t + 0, f + 0 }' "$out/suite.tap")
}

verdict_fail() {  # verdict_fail REASON...: the FAIL block, exit 1
    echo "== verdict for $file (stage $nn $trainer)"
    local reason
    for reason in "$@"; do echo "  $reason"; done
    echo "try: FAIL"
    exit 1
}

todo_note() {
    [ "$todo" -gt 0 ] || return 0
    local s=s
    [ "$todo" -eq 1 ] && s=
    echo "$todo TODO(exercise) marker$s left in $file: the exercise is not done (delete each marker once its code is written)"
}

verdict_not_run() {  # TRY_RUN=0: the CPU-side checks are all there is
    echo "== verdict for $file (stage $nn $trainer), CPU-side checks only (TRY_RUN=0)"
    if [ "$todo" -gt 0 ]; then
        echo "  $(todo_note)"
        echo "try: FAIL"
        exit 1
    fi
    echo "  compiles, exports what the drivers need, links; the suite did not run (TRY_RUN=0): nothing was checked"
    echo "try: NOT RUN"
    exit 0
}

suite_verdict() {  # the suite, on the candidate's trainer only; returns only where it passed
    if [ "$nn" = 01 ]; then
        run_suite "$out/test_vector_add"
    else
        if [ "$trainer" = mnist ] && [ "${TRY_HAVE_GPU:-0}" = 1 ] && [ -z "${MNIST_DIR:-}" ] &&
            [ ! -f data/mnist/train-images-idx3-ubyte ]; then
            "$TRY_MAKE" --no-print-directory data || exit 3
        fi
        local filter='regression/*'
        [ "$trainer" = mnist ] && filter='mnist*/*'
        run_suite "$out/test_gpu" --filter "$filter"
    fi
    if [ "$failed" -gt 0 ] || [ "$suite_rc" -ne 0 ]; then
        local reasons=("correctness: FAIL, $failed of ${tested:-?} tests failed or crashed (the output above; kept in $out/suite.log)")
        [ "$todo" -gt 0 ] && reasons+=("$(todo_note)")
        verdict_fail "${reasons[@]}"
    fi
    if [ "${tested:-0}" -eq 0 ]; then
        [ "$todo" -gt 0 ] && verdict_fail "$(todo_note)" "correctness: not checked, the suite skipped every test (no CUDA device)"
        echo "== verdict for $file (stage $nn $trainer)"
        echo "  compiles, exports what the drivers need, links; the suite skipped every test (no CUDA device): nothing was checked"
        echo "try: UNVERIFIED (no CUDA device)"
        exit 4
    fi
    [ "$todo" -gt 0 ] && verdict_fail "correctness: the suite passed, but $(todo_note)"
}

speed_verdict() {  # the stage's driver, then the candidate's, the same flags; the PASS table
    local flags
    if [ "$nn" = 01 ]; then flags="--repeat 5"; else flags="--quiet --repeat 3"; fi
    flags="$flags ${TRY_ARGS:-}"
    echo "== speed: $build/$nn/$trainer and $out/$trainer, each with: $flags"
    rm -f "$out/stage.csv" "$out/candidate.csv"
    # shellcheck disable=SC2086
    if ! "$build/$nn/$trainer" $flags --csv "$out/stage.csv"; then
        echo "error: stage $nn's own $trainer failed with these flags (see above): no speed to compare with" >&2
        exit 2
    fi
    # shellcheck disable=SC2086
    if ! "$out/$trainer" $flags --csv "$out/candidate.csv"; then
        verdict_fail "correctness: PASS on the suite" "speed: the candidate's $trainer failed with these flags (see above): $flags"
    fi
    echo "== verdict for $file (stage $nn $trainer)"
    echo "  correctness: PASS, $tested tests against the CPU reference (output above; kept in $out/suite.log)"
    report_rows try-speed "$nn" "$out/stage.csv" "$out/candidate.csv"
}

# ----------------------------------------------------------------------------

check_candidate "${2:-}"
build_own
rm -rf "$out"
mkdir -p "$out"
if [ -n "$answer" ]; then  # an assistant's answer as it came: its one fenced code block is the candidate
    name=$(basename "$answer" .md)
    file=$out/${name%.answer}.cu
    answer_code "$answer" >"$file"
    echo "== try: the fenced code block of $answer, written to $file"
fi
echo "== try: stage $nn with $file ($out/)"
if [ "$nn" = 01 ]; then link_vector_add; else link_trainer; fi
todo=$(grep -c "// TODO(exercise)" "$file")
[ "$run_suite_too" = 1 ] || verdict_not_run
suite_verdict
speed_verdict
