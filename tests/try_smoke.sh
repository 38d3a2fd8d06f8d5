#!/usr/bin/env bash
# tests/try_smoke.sh: the contract of `make stage N try|exercise|prompt` (common/exercises.mk, common/try.sh).
#
#     bash tests/try_smoke.sh          CPU side, no GPU needed (CI): every bad candidate is refused with one
#                                      "error:" line; every shipped skeleton compiles, links and FAILs on
#                                      its TODO(exercise) markers; the stage files they were cut from pass
#                                      the same checks; without a GPU nothing ever prints PASS
#     bash tests/try_smoke.sh --gpu [N ...]   on a GPU machine, in addition: for every stage (or stages N ...)
#                                      the skeleton FAILs the suite and the stage's own file PASSes
#                                      `make stage N exercise`; with stage 2, a deliberately wrong candidate
#                                      FAILs `try`, and the round of 02-llm-baseline/README.md is recorded
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
passed=0 failed=0
log=$work/last.log

ok() { echo "ok    $1"; passed=$((passed + 1)); }
bad() {
    echo "FAIL  $1"
    sed 's/^/      | /' "$log" | tail -n 15
    failed=$((failed + 1))
}

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
expect_refused "try on a file that is not .cu" "not a CUDA source" stage 3 try FILE=README.md

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

expect_refused "exercise with an unknown EXERCISE" "no such skeleton" stage 3 exercise EXERCISE=nonesuch

# ----------------------------------------------------------------------------
# the skeletons and the stage files they were cut from, CPU side (TRY_RUN=0: compile, exports, link, markers)

stages_with_skeletons=
for dir in 0[1-7]-*/exercise; do
    [ -d "$dir" ] || continue
    for skeleton in "$dir"/*.cu; do
        [ -f "$skeleton" ] || continue
        nn=${dir%%-*}
        n=${nn#0}
        stage_dir=${dir%/exercise}
        name=$(basename "$skeleton" .cu)
        stages_with_skeletons="$stages_with_skeletons $n:$name"
        expect_verdict "stage $n skeleton $skeleton: compiles, links, FAILs on its markers" FAIL \
            stage "$n" exercise EXERCISE="$name" TRY_RUN=0
        grep -q 'TODO(exercise) marker' "$log" || bad "stage $n skeleton: the verdict does not name the markers"
        expect_verdict "stage $n answer $stage_dir/$name.cu: compiles, links, no markers" "NOT RUN" \
            stage "$n" exercise EXERCISE="$name" ANSWER=1 TRY_RUN=0
    done
done
[ -n "$stages_with_skeletons" ] || { echo "FAIL  no skeleton found (0[1-7]-*/exercise/*.cu)"; failed=$((failed + 1)); }

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
    expect_verdict "stage 3 skeleton without a GPU: FAIL from its markers" FAIL stage 3 exercise
fi

# prompt: a file with every section, on any machine. Its path is the one make reports ("wrote PATH"):
# build/prompt/stage03.md, or build-asan/prompt/stage03.md under make test SANITIZE=1
prompt_file=
if "$make" --no-print-directory stage 3 prompt TRAINER=regression >"$log" 2>&1; then
    prompt_file=$(sed -n 's|^wrote \([^ ]*/prompt/stage03\.md\) .*|\1|p' "$log" | tail -n1)
fi
if [ -n "$prompt_file" ] && [ -f "$prompt_file" ]; then
    missing=
    for section in "## The task" "## Rules a candidate must keep" "## How the answer is checked" \
        "## The interface: common/trainer.h" "### 03-fused-kernels/regression.cu" "## Measured" \
        "## Checklist of known inefficiencies"; do
        grep -qF "$section" "$prompt_file" || missing="$missing '$section'"
    done
    if [ -z "$missing" ]; then ok "stage 3 prompt: $prompt_file has every section"
    else bad "stage 3 prompt: missing$missing"; fi
else
    bad "stage 3 prompt did not write its file (build*/prompt/stage03.md)"
fi

# ----------------------------------------------------------------------------
# GPU: the real verdicts

if [ $gpu = 1 ]; then
    for entry in $stages_with_skeletons; do
        n=${entry%%:*} name=${entry#*:}
        [ "$only" = "  " ] || [[ "$only" == *" $n "* ]] || continue
        expect_verdict "GPU: stage $n skeleton $name.cu FAILs" FAIL stage "$n" exercise EXERCISE="$name"
        cp "$log" "$work/stage$n-skeleton.log"
        expect_verdict "GPU: stage $n's own $name.cu PASSes" PASS stage "$n" exercise EXERCISE="$name" ANSWER=1
        cp "$log" "$work/stage$n-answer.log"
    done
    if [ "$only" = "  " ] || [[ "$only" == *" 2 "* ]]; then
        expect_verdict "GPU: the wrong candidate FAILs" FAIL stage 2 try FILE=$work/wrong/regression.cu
        cp "$log" "$work/wrong.log"
        # the round recorded in 02-llm-baseline/README.md ("One round of the profile-to-prompt loop")
        expect_verdict "GPU: stage 03's regression.cu as a stage 02 candidate" PASS stage 2 try FILE=03-fused-kernels/regression.cu
        cp "$log" "$work/example-02.log"
    fi
    echo "      logs: $work/*.log (example-02.log is the verdict block for 02-llm-baseline/README.md)"
fi

echo "try: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
