#!/usr/bin/env bash
# tests/grade_smoke.sh: `make grade STAGE=N SUBMISSIONS=dir` (tools/grade.sh) on a folder of fixtures.
#
#     bash tests/grade_smoke.sh          no GPU needed (make check runs it): the verdicts a machine without
#                                        a GPU can give
#     bash tests/grade_smoke.sh --gpu    on a GPU machine: the verdicts the suite and the timed runs give
#
# The fixtures are written into build/grade-smoke/submissions/ from stage 02's files (its regression.cu holds no
# exercise region, so a student copy has it whole too), with a notes file and a subfolder that grading leaves alone:
#
#     fixture            what it is                                        no GPU              GPU
#     correct.cu         02-llm-baseline/regression.cu                     4 UNVERIFIED        0 PASS, a speed
#     wrong.cu           the regression with half the gradient             4 UNVERIFIED        1 FAIL
#     todo-left.cu       02-llm-baseline/mnist.cu's skeleton, markers left 1 FAIL              1 FAIL
#     broken.cu          does not compile                                  2 BAD FILE          2 BAD FILE
#     no-export.cu       compiles, defines neither trainer                 2 BAD FILE          2 BAD FILE
#
# Checked: make exits 0 with one CSV line per fixture, in file-name order, each with try's exit code, its
# verdict, the trainer, the correctness and speed where there are some, the markers left and try's error
# line, and a log that holds try's whole output; a field with a comma and quotes reads back whole (Python's
# csv module); JOBS=1 gives the same lines as several jobs at once; CSV= writes where it says; and bad
# settings are refused with one "error:" line, exit 2 and no CSV. Each check prints one line; the last line
# is "grade: N passed, N failed".
set -u
gpu=0
[ "${1:-}" = --gpu ] && gpu=1
make=${MAKE:-make}
work=build/grade-smoke
rm -rf "$work"
mkdir -p "$work"
log=$work/last.log
log_tail=15
# shellcheck source=tests/smoke_common.sh
source tests/smoke_common.sh

have_gpu=0
nvidia-smi -L >/dev/null 2>&1 && have_gpu=1
if [ $gpu = 1 ] && [ $have_gpu = 0 ]; then
    echo "error: --gpu asked for, but nvidia-smi sees no GPU" >&2
    exit 2
fi

# ----------------------------------------------------------------------------
# the fixtures

subs=$work/submissions
mkdir -p "$subs/older"
stage=02-llm-baseline
cp "$stage/regression.cu" "$subs/correct.cu"
sed 's|double scale = 2.0 / (double)n;|double scale = 1.0 / (double)n;  // deliberately wrong: half the gradient|' \
    "$stage/regression.cu" >"$subs/wrong.cu"
awk -f tools/exercise_cut.awk "$stage/mnist.cu" >"$subs/todo-left.cu"
printf 'int broken = ;\n' >"$subs/broken.cu"
printf '#include "trainer.h"\nint not_a_trainer(void) { return 0; }\n' >"$subs/no-export.cu"
echo "not a submission" >"$subs/notes.txt"
cp "$subs/broken.cu" "$subs/older/ignored.cu"
todo_left=$(grep -c 'TODO(exercise)' "$subs/todo-left.cu")
if grep -q 'deliberately wrong' "$subs/wrong.cu" && [ "$todo_left" -gt 0 ]; then
    ok "fixtures written in $subs (5 submissions, a notes file, a subfolder)"
else
    echo "no 'double scale = 2.0 / (double)n;' in $stage/regression.cu, or no exercise region in $stage/mnist.cu" >"$log"
    bad "fixtures: $stage's files changed; write the wrong and todo-left fixtures anew"
fi

# ----------------------------------------------------------------------------
# make grade on them

# fields CSV: its lines with their fields separated by the unit separator (\x1f; a tab would let read merge
# empty fields), the header first, as Python's csv module reads them
fields() {
    python3 -c 'import csv, sys
for row in csv.reader(open(sys.argv[1], newline="")): print("\x1f".join(row))' "$1"
}
us=$'\x1f'

csv=$work/grades.csv
if "$make" --no-print-directory grade STAGE=2 SUBMISSIONS="$subs" CSV="$csv" >"$log" 2>&1; then
    ok "make grade STAGE=2 exits 0 whatever the verdicts: $(tail -n1 "$log" | cut -c1-100)"
else
    bad "make grade STAGE=2 SUBMISSIONS=$subs exited $?"
fi
cp "$log" "$work/grade.log"
fields "$csv" >"$work/grades.tsv" 2>"$log" || bad "the CSV does not read back"
if [ "$(head -n1 "$work/grades.tsv" | tr "$us" ,)" = "file,exit,verdict,trainer,correctness,speed,todo_left,error,log" ]; then
    ok "the CSV's header: $(head -n1 "$csv")"
else
    head -n1 "$csv" >"$log"; bad "the CSV's header"
fi
if [ "$(tail -n +2 "$work/grades.tsv" | cut -d"$us" -f1 | paste -sd' ')" = "broken.cu correct.cu no-export.cu todo-left.cu wrong.cu" ]; then
    ok "one line per .cu of the folder, in file-name order (notes.txt and older/ left alone)"
else
    cut -d"$us" -f1 "$work/grades.tsv" >"$log"; bad "the CSV's lines are not the five fixtures in file-name order"
fi

# expect FILE EXIT VERDICT TRAINER CORRECTNESS SPEED TODO ERROR: the fixture's line; each of CORRECTNESS, SPEED
# and ERROR an extended regex its field must match ('^$': empty)
expect() {
    local file=$1 want_exit=$2 want_verdict=$3 want_trainer=$4 correctness=$5 speed=$6 todo=$7 error=$8 line
    line=$(awk -F"$us" -v f="$file" '$1 == f' "$work/grades.tsv")
    IFS=$us read -r _ got_exit got_verdict got_trainer got_correctness got_speed got_todo got_error got_log <<<"$line"
    printf '%s\n' "$line" | tr "$us" '\n' >"$log"
    local wrong=
    [ "${got_exit:-}" = "$want_exit" ] || wrong="$wrong exit"
    [ "${got_verdict:-}" = "$want_verdict" ] || wrong="$wrong verdict"
    [ "${got_trainer:-}" = "$want_trainer" ] || wrong="$wrong trainer"
    [[ ${got_correctness:-} =~ $correctness ]] || wrong="$wrong correctness"
    [[ ${got_speed:-} =~ $speed ]] || wrong="$wrong speed"
    [ "${got_todo:-}" = "$todo" ] || wrong="$wrong todo_left"
    [[ ${got_error:-} =~ $error ]] || wrong="$wrong error"
    { [ -n "${got_log:-}" ] && grep -q "^== try: stage 02 with $subs/$file " "$got_log"; } || wrong="$wrong log"
    if [ -z "$wrong" ]; then ok "$file: exit $got_exit, $got_verdict${got_trainer:+ ($got_trainer)}"
    else bad "$file: wrong field(s):$wrong (the line, one field a row:)"; fi
}

none='^$'
if [ $gpu = 1 ]; then
    expect correct.cu 0 PASS regression '^PASS, [0-9]+ tests' '^loop [0-9.]+x .*, e2e [0-9.]+x ' 0 "$none"
    expect wrong.cu 1 FAIL regression '^FAIL, [1-9][0-9]* of [0-9]+ tests' "$none" 0 "$none"
    expect todo-left.cu 1 FAIL mnist '^FAIL, [1-9][0-9]* of [0-9]+ tests' "$none" "$todo_left" "$none"
else
    unchecked='^not checked \(no CUDA device\)$'
    expect correct.cu 4 UNVERIFIED regression "$unchecked" "$none" 0 "$none"
    expect wrong.cu 4 UNVERIFIED regression "$unchecked" "$none" 0 "$none"
    expect todo-left.cu 1 FAIL mnist '^not checked, the suite skipped every test' "$none" "$todo_left" "$none"
fi
expect broken.cu 2 "BAD FILE" "" "$none" "$none" 0 'broken\.cu does not compile'
expect no-export.cu 2 "BAD FILE" "" "$none" "$none" 0 'no-export\.cu defines neither train_regression nor train_mnist.*"trainer\.h"'
if grep -q '^no-export\.cu,2,BAD FILE,,,,0,".*""trainer\.h"".*",' "$csv"; then
    ok "a field with commas and quotes is quoted, its quotes doubled"
else
    grep '^no-export' "$csv" >"$log"; bad "the error field of no-export.cu is not quoted as CSV quotes"
fi

# one job at a time gives the same lines (the log paths aside: each run writes them anew); without a GPU only,
# since two GPU runs time the speeds twice and the speeds differ
if [ $gpu = 0 ]; then
    if "$make" --no-print-directory grade STAGE=02 SUBMISSIONS="$subs" CSV="$work/one-job.csv" JOBS=1 >"$log" 2>&1 &&
        cmp -s "$csv" "$work/one-job.csv"; then
        ok "JOBS=1 and STAGE=02 give the same CSV, byte for byte"
    else
        diff "$csv" "$work/one-job.csv" >>"$log" 2>&1; bad "JOBS=1 gives another CSV"
    fi
fi

# ----------------------------------------------------------------------------
# refusals: one error: line, exit 2 (make's own line aside), no CSV

# refused NAME PATTERN MAKE-ARGS...
refused() {
    local name=$1 pattern=$2 status
    shift 2
    rm -f "$work/refused.csv"
    "$make" --no-print-directory grade "$@" >"$log" 2>&1
    status=$?
    if [ $status -ne 2 ]; then bad "$name (exit $status, want 2)"; return; fi
    if [ "$(grep -c '^error:' "$log")" -ne 1 ] || [ "$(grep -cvE '^error:|^make(\[[0-9]+\])?: ' "$log")" -ne 0 ]; then
        bad "$name (want one error: line and nothing else)"; return
    fi
    if ! grep -Eq "^error: .*$pattern" "$log"; then bad "$name (the error line does not say: $pattern)"; return; fi
    if [ -e "$work/refused.csv" ]; then bad "$name (a CSV was written)"; return; fi
    ok "$name: $(grep '^error:' "$log" | cut -c1-100)"
}
refused "make grade without STAGE" "needs STAGE=N" SUBMISSIONS="$subs" CSV="$work/refused.csv"
refused "make grade STAGE=12" "STAGE=12: unknown stage" STAGE=12 SUBMISSIONS="$subs" CSV="$work/refused.csv"
refused "make grade without SUBMISSIONS" "needs SUBMISSIONS=dir" STAGE=2 CSV="$work/refused.csv"
refused "make grade on a missing folder" "is not a folder" STAGE=2 SUBMISSIONS="$work/nothing" CSV="$work/refused.csv"
mkdir -p "$work/empty" "$work/no-cu"
echo "not a submission" >"$work/no-cu/notes.txt"
refused "make grade on a folder without .cu" "holds no \.cu file" STAGE=2 SUBMISSIONS="$work/no-cu" CSV="$work/refused.csv"
refused "make grade on an empty folder" "holds no \.cu file" STAGE=2 SUBMISSIONS="$work/empty" CSV="$work/refused.csv"
refused "make grade JOBS=0" "JOBS=0" STAGE=2 SUBMISSIONS="$subs" CSV="$work/refused.csv" JOBS=0
refused "make grade JOBS=x" "JOBS=x" STAGE=2 SUBMISSIONS="$subs" CSV="$work/refused.csv" JOBS=x
refused "make grade CSV that is not .csv" "name a \.csv file" STAGE=2 SUBMISSIONS="$subs" CSV="$work/refused.txt"
"$make" --no-print-directory grade STAGE=2 SUBMISSIONS="$subs;true" >"$log" 2>&1
if [ $? -eq 2 ] && grep -q 'SUBMISSIONS holds a character a shell would act on' "$log"; then
    ok "make grade SUBMISSIONS='dir;true' is refused before any shell sees it"
else
    bad "make grade SUBMISSIONS='dir;true'"
fi

echo "grade: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
