# common/try_common.sh: what common/try.sh, common/exercise.sh and common/prompt.sh share. Sourced, after
# the script has set nn (the stage, two digits) from its first argument; the rest comes from the TRY_*
# settings that common/exercises.mk exports.
# shellcheck shell=bash disable=SC2034,SC2154  # the scripts read what is set here, and set nn
set -u
set -f  # the nvcc flags hold brackets (code=[sm_90,compute_90]): never glob them

build=${TRY_BUILD:-build}
stage_dir=${TRY_STAGE_DIR:-}
n=${nn#0}

die() {  # one line, exit 2: nothing can be tried (or written)
    echo "error: $*" >&2
    exit 2
}

report_rows() {  # report_rows COMMAND ARGS...: bench/report_rows.py, by the make's PYTHON
    "${TRY_PYTHON:-python3}" bench/report_rows.py "$@"
}

build_stage() {  # the stage's own objects and drivers, through the Makefile's rules
    if ! "$TRY_MAKE" --no-print-directory -s "$@"; then
        echo "error: stage $nn's own files do not build (see above): try needs them to link and compare" >&2
        exit 2
    fi
}
