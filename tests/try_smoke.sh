#!/usr/bin/env bash
# tests/try_smoke.sh: the contract of `make stage N try|exercise|prompt` (tools/exercises.mk, tools/try.sh).
#
#     bash tests/try_smoke.sh          CPU side, no GPU needed (CI): every bad candidate is refused with one
#                                      "error:" line; every skeleton `make stage N exercise` cuts from a
#                                      stage file (a trainer or a kernel ladder) or from a file of common/ the
#                                      stage is the first to use (each region alone, and all of a file's
#                                      regions) compiles, links, FAILs on its TODO(exercise) markers and is the
#                                      stage file outside its regions, byte for byte (tests/exercise_paste.awk
#                                      puts the answers back); the stage files pass the same checks; without a
#                                      GPU nothing prints PASS but an exercise whose CPU check covers it whole
#                                      (09's fragment-load-store: its skeleton FAILs that check, its answer PASSes)
#     bash tests/try_smoke.sh --gpu [N ...]   on a GPU machine, in addition: for every stage (or stages N ...)
#                                      every skeleton FAILs the suite and the stage's own files PASS
#                                      `make stage N exercise ANSWER=1`; with stage 2, a deliberately wrong
#                                      candidate FAILs `try`, and stage 03's regression.cu PASSes as a
#                                      stage 02 candidate
#
# The skeleton of one region is compiled for one architecture (CUDA_ARCH=75, in build/smoke-sm75/):
# cutting code cannot make a file depend on the architecture, and it is 4x faster. The skeleton of all a
# file's regions is built with the usual settings, as a plain `make stage N exercise` builds it.
# The cutter's own refusals and `make student` are tested by tests/exercise_smoke.sh.
#
# Pass the build settings as usual (e.g. CUDA_ARCH=90 bash tests/try_smoke.sh). Each check prints one
# line; a failing one shows the tail of what make printed. The last line is "try: N passed, N failed".
set -u
gpu=0 only=
if [ "${1:-}" = --gpu ]; then
    gpu=1
    shift
    only=" $* "  # stage numbers: the GPU part for these stages only (default: every stage)
fi
make=${MAKE:-make}
work=build/try-smoke
rm -rf "$work"
mkdir -p "$work"
log=$work/last.log

log_tail=15
# shellcheck source=tests/smoke_common.sh
source tests/smoke_common.sh

# expect NAME PATTERN MAKE-ARGS...: make must exit non-zero, print exactly one "error:" line, and that
# line must match PATTERN (an extended regex); no verdict line may follow a refusal
expect_refused() {
    local name=$1 pattern=$2
    shift 2
    if "$make" --no-print-directory "$@" >"$log" 2>&1; then bad "$name (make exited 0)"; return; fi
    local errors
    errors=$(grep -c '^error:' "$log")
    if [ "$errors" -ne 1 ]; then bad "$name ($errors 'error:' lines, want 1)"; return; fi
    if ! grep -Eq "^error: .*$pattern" "$log"; then bad "$name (the error line does not say: $pattern)"; return; fi
    if grep -q '^try: ' "$log"; then bad "$name (a verdict after a refusal)"; return; fi
    ok "$name: $(grep '^error:' "$log" | cut -c1-110)"
}

# expect_verdict NAME VERDICT MAKE-ARGS...: the last "try:" line must start with VERDICT; "try: PASS" only
# where VERDICT asks for it
expect_verdict() {
    local name=$1 want=$2
    shift 2
    "$make" --no-print-directory "$@" >"$log" 2>&1
    local status=$? got
    got=$(grep '^try: ' "$log" | tail -n1)
    case $got in
    "try: $want"*) ;;
    *) bad "$name (verdict '${got:-none}', want 'try: $want')"; return ;;
    esac
    if [ "$want" = PASS ] && [ $status -ne 0 ]; then bad "$name (PASS, but make exited $status)"; return; fi
    if [ "$want" != PASS ] && [ "$want" != "NOT RUN" ] && [ $status -eq 0 ]; then bad "$name ($want, but make exited 0)"; return; fi
    ok "$name: $got"
}

have_gpu=0
nvidia-smi -L >/dev/null 2>&1 && have_gpu=1
if [ $gpu = 1 ] && [ $have_gpu = 0 ]; then
    echo "error: --gpu asked for, but nvidia-smi sees no GPU" >&2
    exit 2
fi

# ----------------------------------------------------------------------------
# bad candidates: one clear line each, before anything runs

expect_refused "try without FILE" "no candidate given" stage 3 try
expect_refused "try on a missing file" "does not exist" stage 3 try FILE=$work/nothing-here.cu
expect_refused "try on a file that is not .cu" "not a CUDA source" stage 3 try FILE=Makefile
printf '# two blocks\n```cuda\nint a;\n```\n```cuda\nint b;\n```\n' >"$work/two-blocks.md"
expect_refused "try on an answer with two fenced blocks" "holds 2 fenced code blocks" stage 3 try FILE=$work/two-blocks.md
printf '# cut short\n```cuda\nint a;\n```\n```cuda\nint b;\n' >"$work/unclosed.md"
expect_refused "try on an answer whose last block is never closed" "holds unclosed fenced code blocks" stage 3 try FILE=$work/unclosed.md

# the assistants' answers as committed: their one fenced block compiles, exports and links (NN-*/assistant/)
for answer in 0[2-7]-*/assistant/*.answer.md; do
    [ -f "$answer" ] || continue
    n=${answer:0:2}
    expect_verdict "assistant answer $answer: passes the CPU-side checks" "NOT RUN" stage "${n#0}" try FILE="$answer" TRY_RUN=0
done

printf 'int x;\n' >"$work/elsewhere.c"
expect_refused "try on a C file that replaces none of common/" "replaces none of common/" stage 5 try FILE=$work/elsewhere.c
cp common/staging.c "$work/staging.c"
expect_refused "try on a common/ file as a stage 01 candidate" "stage 01 uses no file of common/" stage 1 try FILE=$work/staging.c

printf 'int broken = ;\n' >"$work/broken.cu"
expect_refused "try on a file that does not compile" "does not compile \(see the compiler output above\)" \
    stage 3 try FILE=$work/broken.cu

mkdir -p "$work/no-train"
cat >"$work/no-train/mnist.cu" <<'EOF'
#include <stddef.h>
#include "trainer.h"
const char *const MNIST_VARIANTS[] = {"none", NULL};
const char *const MNIST_PRECISIONS[] = {"fp32", NULL};
EOF
expect_refused "try on a file without train_mnist" "does not define train_mnist" stage 3 try FILE=$work/no-train/mnist.cu

mkdir -p "$work/no-variants"
cat >"$work/no-variants/regression.cu" <<'EOF'
#include "trainer.h"
int train_regression(const RegressionConfig *cfg, const RegressionData *data, RegressionResult *out) {
    (void)cfg, (void)data, (void)out;
    return 1;
}
EOF
expect_refused "try on a file without REGRESSION_VARIANTS" "does not define REGRESSION_VARIANTS" \
    stage 3 try FILE=$work/no-variants/regression.cu

mkdir -p "$work/no-extern-c"
cat >"$work/no-extern-c/regression.cu" <<'EOF'
// the signature without trainer.h: C++ linkage, so the drivers cannot find it
int train_regression(const void *cfg, const void *data, void *out) { return cfg && data && out; }
EOF
expect_refused "try on a file without C linkage" "neither train_regression nor train_mnist|does not define train_regression" \
    stage 3 try FILE=$work/no-extern-c/regression.cu

cat >"$work/both.cu" <<'EOF'
#include <stddef.h>
#include "trainer.h"
const char *const REGRESSION_VARIANTS[] = {"x", NULL};
const char *const MNIST_VARIANTS[] = {"x", NULL};
EOF
expect_refused "try on a file of both trainers" "both trainers" stage 3 try FILE=$work/both.cu

mkdir -p "$work/with-main"
{ cat 03-fused-kernels/regression.cu; printf 'int main(void) { return 0; }\n'; } >"$work/with-main/regression.cu"
expect_refused "try on a trainer that defines main" "defines main" stage 3 try FILE=$work/with-main/regression.cu

expect_refused "exercise with an unknown EXERCISE" "no such exercise" stage 1 exercise EXERCISE=nonesuch
printf 'int x;\n' >"$work/nonesuch_ladder.cu"
expect_refused "try on a file named as a kernel ladder the stage has not" "stage 04 has no nonesuch_ladder.cu" \
    stage 4 try FILE=$work/nonesuch_ladder.cu

# ----------------------------------------------------------------------------
# exercises, CPU side (TRY_RUN=0: compile, exports, link, markers): every skeleton make stage N exercise
# cuts from a stage file, and the stage files themselves

one_arch=(BUILD=build/smoke-sm75 CUDA_ARCH=75)

# skeleton_is_cut NAME STAGE_FILE SKELETON CUT: SKELETON must be STAGE_FILE with CUT (a region, or "all")
# replaced by its TODO block and nothing else changed: putting the answer back gives STAGE_FILE again
skeleton_is_cut() {
    local name=$1 stage_file=$2 skeleton=$3 cut=$4
    if [ ! -f "$skeleton" ]; then echo "no $skeleton" >"$log"; bad "$name (no skeleton written)"; return; fi
    if ! awk -v cut="$cut" -f tests/exercise_paste.awk "$stage_file" "$skeleton" >"$work/rebuilt" 2>"$log"; then
        bad "$name"
        return
    fi
    if ! cmp -s "$work/rebuilt" "$stage_file"; then
        diff "$stage_file" "$work/rebuilt" >"$log"
        bad "$name (with its answers put back it is not $stage_file: it differs outside its regions)"
        return
    fi
    ok "$name"
}

# new_warnings SKELETON_LOG ANSWER_LOG: the compiler warnings of the skeleton that the stage file has not
new_warnings() {
    comm -23 <(grep -o 'warning: .*' "$1" | sort -u) <(grep -o 'warning: .*' "$2" | sort -u) | paste -sd';'
}

exercises=  # n:file:name, n:file:ALL, n:file:ANSWER: what the GPU part runs
regions_found=0 notes=0
student_copy=0
[ -f STUDENT.md ] && student_copy=1  # a copy written by make student: the regions are cut already
for stage_dir in 0[1-9]-*; do
    [ -d "$stage_dir" ] || continue
    nn=${stage_dir%%-*}
    n=${nn#0}
    if [ "$nn" = 01 ]; then trainers=" vector_add.cu "; else trainers=" regression.cu mnist.cu "; fi
    for path in "$stage_dir"/*_ladder.cu; do [ -f "$path" ] && trainers="$trainers${path##*/} "; done  # and its kernel ladders
    stage_has=0
    for path in "$stage_dir"/*.cu; do
        [ -f "$path" ] || continue
        file=${path##*/}
        if [ $student_copy = 1 ]; then
            grep -q "^- \`$path\`: " STUDENT.md || continue
            stage_has=1
            expect_verdict "student copy, stage $n $file: compiles, links, FAILs on its markers" FAIL \
                stage "$n" exercise EXERCISE="$file" TRY_RUN=0
            expect_refused "student copy, stage $n $file: ANSWER=1 is refused" "student copy" \
                stage "$n" exercise EXERCISE="$file" ANSWER=1 TRY_RUN=0
            continue
        fi
        if ! names=$(awk -v list=1 -f tools/exercise_cut.awk "$path" 2>"$log"); then
            bad "stage $n: the exercise markers of $path"
            continue
        fi
        [ -n "$names" ] || continue
        if [[ "$trainers" != *" $file "* ]]; then
            echo "$names" >"$log"
            bad "stage $n: $path has exercise regions, but make stage $n exercise looks only in$trainers"
            continue
        fi
        stage_has=1
        count=$(wc -l <<<"$names")
        regions_found=$((regions_found + count))
        for name in $names; do
            expect_verdict "stage $n skeleton $name ($file, sm_75): compiles, links, FAILs on its marker" FAIL \
                stage "$n" exercise EXERCISE="$name" TRY_RUN=0 "${one_arch[@]}"
            grep -q "^  1 TODO(exercise) marker left" "$log" || bad "stage $n skeleton $name: the verdict does not count its one marker"
            skeleton_is_cut "stage $n skeleton $name: $path outside the region, byte for byte" \
                "$path" "build/smoke-sm75/exercise/$nn/$file" "$name"
            exercises="$exercises $n:$file:$name"
        done
        # all the file's regions, as a plain make stage N exercise cuts them (the usual build settings)
        expect_verdict "stage $n skeleton of $file ($count region(s) cut): compiles, links, FAILs on its markers" FAIL \
            stage "$n" exercise EXERCISE="$file" TRY_RUN=0
        grep -q "^  $count TODO(exercise) markers\{0,1\} left" "$log" || bad "stage $n skeleton of $file: the verdict does not count $count markers"
        cp "$log" "$work/skeleton.log"
        skeleton_is_cut "stage $n skeleton of $file: $path outside its regions, byte for byte" \
            "$path" "build/exercise/$nn/$file" all
        expect_verdict "stage $n answer $path: compiles, links, no markers" "NOT RUN" \
            stage "$n" exercise EXERCISE="$file" ANSWER=1 TRY_RUN=0
        warnings=$(new_warnings "$work/skeleton.log" "$log")
        if [ -n "$warnings" ]; then  # reported, not failed: a skeleton may leave a parameter unused
            echo "note  stage $n skeleton of $file: compiler warnings $path has not: ${warnings:0:300}"
            notes=$((notes + 1))
        fi
        exercises="$exercises $n:$file:ALL $n:$file:ANSWER"
    done
    # the .c files of common/ whose regions are the stage's (the first stage to use them: tools/exercise.sh --list)
    for path in $(TRY_STAGE_DIR=$stage_dir bash tools/exercise.sh "$nn" --list 2>/dev/null | awk '$1 ~ /^common\// && !seen[$1]++ { print $1 }'); do
        file=${path##*/}
        stage_has=1
        if [ $student_copy = 1 ]; then
            expect_verdict "student copy, stage $n $path: compiles, links, FAILs on its markers" FAIL \
                stage "$n" exercise EXERCISE="$file" TRY_RUN=0
            expect_refused "student copy, stage $n $path: ANSWER=1 is refused" "student copy" \
                stage "$n" exercise EXERCISE="$file" ANSWER=1 TRY_RUN=0
            continue
        fi
        names=$(awk -v list=1 -f tools/exercise_cut.awk "$path")
        count=$(wc -l <<<"$names")
        regions_found=$((regions_found + count))
        for name in $names; do
            expect_verdict "stage $n skeleton $name ($path, sm_75): compiles, links, FAILs on its marker" FAIL \
                stage "$n" exercise EXERCISE="$name" TRY_RUN=0 "${one_arch[@]}"
            grep -q "^  1 TODO(exercise) marker left" "$log" || bad "stage $n skeleton $name: the verdict does not count its one marker"
            skeleton_is_cut "stage $n skeleton $name: $path outside the region, byte for byte" \
                "$path" "build/smoke-sm75/exercise/$nn/$file" "$name"
            exercises="$exercises $n:$file:$name"
        done
        expect_verdict "stage $n skeleton of $path ($count region(s) cut): compiles, links, FAILs on its markers" FAIL \
            stage "$n" exercise EXERCISE="$file" TRY_RUN=0
        skeleton_is_cut "stage $n skeleton of $path: $path outside its regions, byte for byte" \
            "$path" "build/exercise/$nn/$file" all
        expect_verdict "stage $n answer $path: compiles, links, no markers" "NOT RUN" \
            stage "$n" exercise EXERCISE="$file" ANSWER=1 TRY_RUN=0
        exercises="$exercises $n:$file:ALL $n:$file:ANSWER"
    done
    if [ $stage_has = 0 ]; then
        expect_refused "stage $n has no exercise region: one line says so" "no exercise region" stage "$n" exercise
    fi
done
if [ $student_copy = 0 ] && [ $regions_found = 0 ]; then
    echo "FAIL  no exercise region in any stage file (// EXERCISE(name) begin: task ... // EXERCISE end)"
    failed=$((failed + 1))
fi

# A deliberately wrong candidate: stage 02's regression with half the gradient. It compiles and exports
# what it must, so only a GPU run can reject it.
mkdir -p "$work/wrong"
sed 's|double scale = 2.0 / (double)n;|double scale = 1.0 / (double)n;  // deliberately wrong: half the gradient|' \
    02-llm-baseline/regression.cu >"$work/wrong/regression.cu"
if grep -q 'deliberately wrong' "$work/wrong/regression.cu"; then
    expect_verdict "wrong candidate $work/wrong/regression.cu: passes the CPU-side checks" "NOT RUN" \
        stage 2 try FILE=$work/wrong/regression.cu TRY_RUN=0
else
    echo "FAIL  could not make the wrong candidate (02-llm-baseline/regression.cu changed its update)"
    failed=$((failed + 1))
fi

# Without a GPU the suite skips everything: the verdict must say so, and never PASS.
if [ $have_gpu = 0 ]; then
    expect_verdict "stage 3's own regression.cu without a GPU" "UNVERIFIED" stage 3 try FILE=03-fused-kernels/regression.cu
    expect_verdict "the wrong candidate without a GPU" "UNVERIFIED" stage 2 try FILE=$work/wrong/regression.cu
    expect_verdict "stage 1 skeleton without a GPU: FAIL from its markers" FAIL stage 1 exercise
    # an exercise whose CPU check covers its region whole (tests/exercise/test_mma_ladder.c, "// whole:"): that check
    # is the verdict without a GPU, FAIL on the skeleton and PASS on the answer; try on the same file, which may
    # differ anywhere, stays UNVERIFIED
    if [ $student_copy = 0 ] && [ -f 09-tensor-cores/mma_ladder.cu ] && grep -q '// EXERCISE(fragment-load-store)' 09-tensor-cores/mma_ladder.cu; then
        expect_verdict "stage 9 skeleton fragment-load-store without a GPU: FAIL from its CPU check" FAIL \
            stage 9 exercise EXERCISE=fragment-load-store
        grep -q '^  CPU check: FAIL' "$log" || bad "stage 9 skeleton fragment-load-store: the FAIL is not the CPU check's"
        expect_verdict "stage 9 answer fragment-load-store without a GPU: PASS, its CPU check covers it whole" PASS \
            stage 9 exercise EXERCISE=fragment-load-store ANSWER=1
        grep -q '^  correctness: the CPU check covers fragment-load-store whole' "$log" ||
            bad "stage 9 answer fragment-load-store: the PASS does not say the CPU check covers the region whole"
        expect_verdict "stage 9 try on its own mma_ladder.cu without a GPU: the CPU check, then UNVERIFIED" UNVERIFIED \
            stage 9 try FILE=09-tensor-cores/mma_ladder.cu
        grep -q '^  CPU check: PASS' "$log" || bad "stage 9 try on mma_ladder.cu: no CPU check PASS line"
    fi
fi

# prompt: make stage 3 prompt writes its file, on any machine (tests/prompt_smoke.sh checks what is in
# every stage's prompts). Its path is the one make reports ("wrote PATH"): build/prompt/stage03-regression.md,
# or build-asan/prompt/stage03-regression.md under make test SANITIZE=1
prompt_file=
if "$make" --no-print-directory stage 3 prompt TRAINER=regression >"$log" 2>&1; then
    prompt_file=$(sed -n 's|^wrote \([^ ]*/prompt/stage03-regression\.md\) .*|\1|p' "$log" | tail -n1)
fi
if [ -n "$prompt_file" ] && [ -f "$prompt_file" ] && grep -qF "## The starting code: 02-llm-baseline/regression.cu" "$prompt_file"; then
    ok "stage 3 prompt: make wrote $prompt_file, starting from stage 02's regression.cu"
else
    bad "stage 3 prompt did not write its file (build*/prompt/stage03-regression.md) from stage 02's regression.cu"
fi

# ----------------------------------------------------------------------------
# GPU: the real verdicts

if [ $gpu = 1 ]; then
    for entry in $exercises; do  # n:file:name, n:file:ALL or n:file:ANSWER
        n=${entry%%:*} rest=${entry#*:}
        file=${rest%%:*} name=${rest#*:}
        [ "$only" = "  " ] || [[ "$only" == *" $n "* ]] || continue
        case $name in
        ANSWER)
            expect_verdict "GPU: stage $n's own $file PASSes" PASS stage "$n" exercise EXERCISE="$file" ANSWER=1
            cp "$log" "$work/stage$n-${file%.cu}-answer.log" ;;
        ALL)
            expect_verdict "GPU: stage $n skeleton of $file (every region cut) FAILs" FAIL stage "$n" exercise EXERCISE="$file"
            cp "$log" "$work/stage$n-${file%.cu}-skeleton.log" ;;
        *)  # the suite itself must fail, not only the marker count
            expect_verdict "GPU: stage $n skeleton $name ($file) FAILs" FAIL stage "$n" exercise EXERCISE="$name"
            grep -q "correctness: FAIL\|CPU check: FAIL" "$log" ||
                bad "GPU: stage $n skeleton $name passes the suite: the tests do not see what the region does"
            cp "$log" "$work/stage$n-$name-skeleton.log" ;;
        esac
    done
    if [ "$only" = "  " ] || [[ "$only" == *" 2 "* ]]; then
        expect_verdict "GPU: the wrong candidate FAILs" FAIL stage 2 try FILE=$work/wrong/regression.cu
        cp "$log" "$work/wrong.log"
        # a right candidate: stage 03's own file, one idea ahead of stage 02
        expect_verdict "GPU: stage 03's regression.cu as a stage 02 candidate" PASS stage 2 try FILE=03-fused-kernels/regression.cu
        cp "$log" "$work/example-02.log"
    fi
    echo "      logs: $work/*.log (example-02.log: stage 03's regression.cu tried as a stage 02 candidate)"
fi

if [ "$notes" -gt 0 ]; then echo "try: $passed passed, $failed failed, $notes note(s) above"
else echo "try: $passed passed, $failed failed"; fi
[ "$failed" -eq 0 ]
