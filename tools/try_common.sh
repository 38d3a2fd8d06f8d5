# tools/try_common.sh: what tools/try.sh, tools/exercise.sh, tools/grade.sh and tools/prompt.sh share.
# Sourced, after the script has set nn (the stage, two digits) from its first argument; the rest comes from the
# TRY_* settings that tools/exercises.mk exports.
# shellcheck shell=bash disable=SC2034,SC2154  # the scripts read what is set here, and set nn
set -u
set -f  # the nvcc flags hold brackets (code=[sm_90,compute_90]): never glob them

build=${TRY_BUILD:-build}
stage_dir=${TRY_STAGE_DIR:-}
n=${nn#0}
run_suite_too=${TRY_RUN_SUITE:-1}  # 0: the checks that need no GPU only (TRY_RUN=0)

die() {  # one line, exit 2: nothing can be tried (or written)
    echo "error: $*" >&2
    exit 2
}

report_rows() {  # report_rows COMMAND ARGS...: bench/report_rows.py, by the make's PYTHON
    "${TRY_PYTHON:-python3}" bench/report_rows.py "$@"
}

# answer_code ANSWER.md [WANT]: the body of every fenced code block of an assistant's answer (``` or ~~~ at a
# line's start); with WANT, of the one block tagged cuda, cu, c, c++ or cpp that holds WANT, where the answer
# may hold other blocks (napkin math, a diff): exit 3 where none does, 4 where several do
answer_code() {
    awk -v want="${2:-}" '
        /^(```|~~~)/ {
            if (!inside) { inside = 1; body = ""; tag = tolower($0); sub(/^[`~]+[ \t]*/, "", tag); sub(/[^a-z0-9+].*$/, "", tag); next }
            inside = 0
            if (want == "") printf "%s", body
            else if (tag ~ /^(cuda|cu|c|c\+\+|cpp)$/ && index(body, want)) { found++; code = body }
            next
        }
        inside { body = body $0 "\n" }
        END { if (want == "") exit; if (found == 1) printf "%s", code; exit found == 1 ? 0 : (found ? 4 : 3) }' "$1"
}

build_stage() {  # the stage's own objects and drivers, through the Makefile's rules
    "$TRY_MAKE" --no-print-directory -s "$@" ||
        die "stage $nn's own files do not build (see above): try needs them to link and compare"
}

# build_own: what a candidate of stage nn links with, and the drivers only when they will run (tools/try.sh
# before each candidate, tools/grade.sh once before its submissions); sets trainer=vector_add for stage 01. A kernel
# ladder's candidate (tools/try.sh sets ladder to its name, mma_ladder) links with the ladder's own test only.
build_own() {
    local targets=("$build/common/libcommon.a")
    if [ -n "${ladder:-}" ]; then
        targets+=("$build/tests/gpu/test_$ladder.o")
    elif [ "$nn" = 01 ]; then
        trainer=vector_add
        targets+=("$build/tests/gpu/test_vector_add.o")
        [ "$run_suite_too" = 1 ] && targets+=("$build/01/vector_add")
    else
        targets+=("$build/tests/gpu/test_stage.o" "$build/$nn/regression.o" "$build/$nn/mnist.o")
        [ "$run_suite_too" = 1 ] && targets+=("$build/$nn/regression" "$build/$nn/mnist")
    fi
    build_stage "${targets[@]}"
}
