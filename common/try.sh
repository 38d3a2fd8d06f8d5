#!/usr/bin/env bash
# common/try.sh: the work behind `make stage N try|exercise|prompt` (see common/exercises.mk, which hands
# over the build settings as TRY_* environment variables). Not meant to be run by hand.
#
#   try.sh try NN FILE     FILE replaces the stage trainer it defines (for stage 01: vector_add.cu)
#   try.sh exercise NN     try on the skeleton cut from the stage's file(s) by common/exercise_cut.awk into
#                          build/exercise/NN/ (TRY_EXERCISE picks a region; TRY_ANSWER=1: the stage's file)
#   try.sh prompt NN       writes build/prompt/stageNN.md
#
# try, step by step (every mistake is one "error:" line and exit 2, before anything runs on a GPU):
#   1. FILE exists and is a .cu file; the stage's own objects are built (make, as usual);
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
# Verdict on the last line: "try: PASS", "try: FAIL", or "try: UNVERIFIED (no CUDA device)".
set -u
set -f  # the nvcc flags hold brackets (code=[sm_90,compute_90]): never glob them

cmd=${1:-} nn=${2:-}
build=${TRY_BUILD:-build}
stage_dir=${TRY_STAGE_DIR:-}
n=${nn#0}
out=$build/try/$nn

die() {  # one line, exit 2: the file cannot be a candidate
    echo "error: $*" >&2
    exit 2
}

# ----------------------------------------------------------------------------
# building

build_stage() {  # the stage's own objects and drivers, through the Makefile's rules
    if ! "$TRY_MAKE" --no-print-directory -s "$@"; then
        echo "error: stage $nn's own files do not build (see above): try needs them to link and compare" >&2
        exit 2
    fi
}

include_dir=  # exercise: the stage's folder, where a skeleton cut into build/ finds the headers beside its file
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

# sets trainer (regression|mnist) and other (the stage trainer that stays), or exits 2
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

# ----------------------------------------------------------------------------
# the suite and the verdict

# run_suite BINARY [ARGS...]: shows the output, keeps it in $out/suite.log, sets tested/failed/suite_rc
run_suite() {
    echo "== correctness: $* (every variant against the CPU reference)"
    "$@" 2>&1 | tee "$out/suite.log"
    suite_rc=${PIPESTATUS[0]}
    local synthesis
    synthesis=$(sed 's/\x1b\[[0-9;]*m//g' "$out/suite.log" | grep -a "Synthesis:" | tail -n1)
    if [ -z "$synthesis" ]; then  # the runner itself died: that is a failure, not a skip
        tested=0 failed=1
        return
    fi
    local failing crashing
    tested=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' <<<"$synthesis")
    failing=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$synthesis")
    crashing=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$synthesis")
    tested=${tested:-0}
    failed=${failing:-0}  # Criterion counts a crash as failing too
    [ "${crashing:-0}" -gt "$failed" ] && failed=$crashing
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

# ----------------------------------------------------------------------------
# try

try_file() {
    file=$1
    [ -n "$file" ] || die "no candidate given: make stage $n try FILE=path/to/regression.cu (a .cu file that replaces one of stage $nn's trainers)"
    [ -e "$file" ] || die "FILE '$file' does not exist"
    [ -f "$file" ] || die "FILE '$file' is not a regular file"
    case $file in *.cu) ;; *) die "FILE '$file' is not a CUDA source: try takes a .cu file" ;; esac
    local run_suite_too=${TRY_RUN_SUITE:-1}

    local targets=("$build/common/libcommon.a")  # the drivers only when they will run
    if [ "$nn" = 01 ]; then
        trainer=vector_add
        targets+=("$build/tests/gpu/test_vector_add.o")
        [ "$run_suite_too" = 1 ] && targets+=("$build/01/vector_add")
    else
        targets+=("$build/tests/gpu/test_stage.o" "$build/$nn/regression.o" "$build/$nn/mnist.o")
        [ "$run_suite_too" = 1 ] && targets+=("$build/$nn/regression" "$build/$nn/mnist")
    fi
    build_stage "${targets[@]}"
    rm -rf "$out"
    mkdir -p "$out"
    echo "== try: stage $nn with $file ($out/)"

    # compile, check what it exports, link
    local symbols
    if [ "$nn" = 01 ]; then
        compile_candidate "$out/candidate.o"
        compile_candidate "$out/candidate_versions.o" -DVECTOR_ADD_NO_MAIN
        symbols=$(defined_symbols "$out/candidate_versions.o")
        local s
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
    else
        compile_candidate "$out/candidate.o"
        symbols=$(defined_symbols "$out/candidate.o")
        pick_trainer "$symbols"
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
    fi
    todo=$(grep -c "// TODO(exercise)" "$file")

    if [ "$run_suite_too" != 1 ]; then
        echo "== verdict for $file (stage $nn $trainer), CPU-side checks only (TRY_RUN=0)"
        if [ "$todo" -gt 0 ]; then
            echo "  $(todo_note)"
            echo "try: FAIL"
            exit 1
        fi
        echo "  compiles, exports what the drivers need, links; the suite did not run (TRY_RUN=0): nothing was checked"
        echo "try: NOT RUN"
        exit 0
    fi

    # the suite, on the candidate's trainer only
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

    # speed: the stage's driver, then the candidate's, the same flags
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
    awk -v stage="$nn" -v mode=speed -f common/csv.awk -f common/try_report.awk "$out/stage.csv" "$out/candidate.csv"
}

# ----------------------------------------------------------------------------
# exercise: try on the skeleton cut from the stage's file (or, with ANSWER=1, on the stage's file itself)
#
# An exercise is a region of a stage file, `// EXERCISE(name) begin: task` ... `// EXERCISE end`; its
# skeleton is the file with the region replaced by `// TODO(exercise): name: task` (common/exercise_cut.awk),
# written to build/exercise/NN/FILE. Only the files try can check hold regions: the trainers (stage 01:
# vector_add.cu). In a copy written by `make student` (STUDENT.md lists what was cut), the stage's file
# is the student's work: it is tried in place, and ANSWER=1 is refused.

cutter=common/exercise_cut.awk

exercise_files() {  # the stage's files that may hold regions
    if [ "$nn" = 01 ]; then echo vector_add.cu; else printf '%s\n' regression.cu mnist.cu; fi
}

verdict_word() {  # verdict_word RC: the verdict a try_file exit status stands for
    case $1 in
    0) if [ "${TRY_RUN_SUITE:-1}" = 1 ]; then echo PASS; else echo "NOT RUN"; fi ;;
    1) echo FAIL ;;
    *) echo UNVERIFIED ;;
    esac
}

exercise() {
    local f name names index='' mode=cut
    if [ -f STUDENT.md ]; then  # "- `NN-stage/file.cu`: name, name" lines
        mode=student
        index=$(awk -v dir="$stage_dir/" 'match($0, /^- `[^`]+`: /) {
                path = substr($0, 4, RLENGTH - 6)
                if (index(path, dir) != 1) next
                n = split(substr($0, RLENGTH + 1), names, /, */)
                for (i = 1; i <= n; i++) if (names[i] != "") print substr(path, length(dir) + 1), names[i]
            }' STUDENT.md)
        [ -n "$index" ] || die "stage $nn had no exercise region when this student copy was written (STUDENT.md lists none for $stage_dir)"
    else
        for f in $(exercise_files); do
            [ -f "$stage_dir/$f" ] || continue
            names=$(awk -v list=1 -f "$cutter" "$stage_dir/$f") || exit 2
            for name in $names; do index="$index$f $name"$'\n'; done
        done
        index=${index%$'\n'}
        [ -n "$index" ] ||
            die "stage $nn has no exercise region: no '// EXERCISE(name) begin: task' line in $(exercise_files | sed "s|^|$stage_dir/|" | tr '\n' ' ')(see $stage_dir/exercises.md)"
        local twice
        twice=$(awk '{ print $2 }' <<<"$index" | sort | uniq -d | head -n1)
        [ -z "$twice" ] ||
            die "stage $nn has two exercise regions named '$twice', in $(awk -v n="$twice" '$2 == n { printf "%s%s", sep, $1; sep = " and " }' <<<"$index"): a name is unique within a stage"
    fi

    # EXERCISE=name: the file holding that region, only it cut; EXERCISE=file (mnist, mnist.cu): every
    # region of that file; neither: every file with a region, every region cut
    local picks=() pick_name=
    if [ -n "${TRY_EXERCISE:-}" ]; then
        f=$(awk -v n="$TRY_EXERCISE" '$2 == n { print $1; exit }' <<<"$index")
        if [ -n "$f" ]; then
            pick_name=$TRY_EXERCISE
        else
            f=$(awk -v n="$TRY_EXERCISE" '$1 == n || $1 == n ".cu" { print $1; exit }' <<<"$index")
        fi
        [ -n "$f" ] ||
            die "EXERCISE=$TRY_EXERCISE: stage $nn has no such exercise; it has: $(awk '{ printf "%s%s", sep, $2; sep = ", " }' <<<"$index") (or name a file: $(awk '!seen[$1]++ { printf "%s%s", sep, $1; sep = ", " }' <<<"$index"))"
        picks=("$f")
    else
        mapfile -t picks < <(awk 'NF && !seen[$1]++ { print $1 }' <<<"$index")
    fi
    local answer=0
    [ -n "${TRY_ANSWER:-}" ] && [ "$TRY_ANSWER" != 0 ] && answer=1
    [ $mode = student ] && [ $answer = 1 ] &&
        die "ANSWER=1: this is a student copy (STUDENT.md): make student cut the answers out of it"

    local worst=0 rc summary='' path regions
    for f in "${picks[@]}"; do
        regions=${pick_name:-$(awk -v f="$f" '$1 == f { printf "%s%s", sep, $2; sep = ", " }' <<<"$index")}
        if [ $mode = student ]; then
            path=$stage_dir/$f
            echo "== exercise ($regions): $path, your file (a student copy: every TODO(exercise) marker in it counts, and the speed compares it with itself)"
        elif [ $answer = 1 ]; then
            path=$stage_dir/$f
            echo "== exercise ($regions): the answer, $path (the stage's own file: it must pass)"
        else
            path=$build/exercise/$nn/$f
            mkdir -p "$build/exercise/$nn"
            awk -v exercise="$pick_name" -f "$cutter" "$stage_dir/$f" >"$path.tmp" || { rm -f "$path.tmp"; exit 2; }
            mv "$path.tmp" "$path"
            echo "== exercise ($regions): $path, the skeleton cut from $stage_dir/$f (the task: $stage_dir/exercises.md; ANSWER=1 tries the answer)"
        fi
        (out=$build/exercise/$nn/${f%.cu} include_dir=$stage_dir && try_file "$path")
        rc=$?
        case $rc in 0 | 1 | 4) ;; *) exit $rc ;; esac  # refused (2) or no data (3): nothing more to try
        summary="$summary${summary:+, }$f: $(verdict_word $rc)"
        if [ $rc = 1 ] || { [ $rc = 4 ] && [ $worst = 0 ]; }; then worst=$rc; fi
    done
    if [ ${#picks[@]} -gt 1 ]; then
        echo "== exercise: stage $nn, every file with an exercise"
        echo "try: $(verdict_word $worst) ($summary)"
    fi
    exit $worst
}

# ----------------------------------------------------------------------------
# prompt: build/prompt/stageNN.md

fence() {  # fence LANG FILE: FILE in a fenced block long enough not to be closed by its contents
    echo '````'"$1"
    cat "$2"
    echo '````'
}

prompt() {
    local targets sources prompt_file=$build/prompt/stage$nn.md t
    if [ "$nn" = 01 ]; then
        targets=vector_add sources="vector_add.cu"
    else
        targets=
        for t in ${TRY_TRAINER:-regression mnist}; do
            case $t in regression | mnist) targets="$targets $t" ;; *) die "TRAINER=$t: valid are regression, mnist" ;; esac
        done
        targets=${targets# }
        [ -n "$targets" ] || targets="regression mnist"
        sources=$(for t in $targets; do echo "$t.cu"; done)
    fi
    mkdir -p "$build/prompt"
    local have_gpu=${TRY_HAVE_GPU:-0}
    if [ "$have_gpu" = 1 ]; then
        if [ "$nn" = 01 ]; then build_stage "$build/01/vector_add"
        else
            local drivers=()
            for t in $targets; do drivers+=("$build/$nn/$t"); done
            build_stage "${drivers[@]}"
        fi
        case " $targets " in *" mnist "*) [ -f data/mnist/train-images-idx3-ubyte ] || "$TRY_MAKE" --no-print-directory data || exit 3 ;; esac
    fi
    local device="no GPU (none was visible when this prompt was written)"
    [ "$have_gpu" = 1 ] && device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
    local commit
    commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

    {
        echo "# Make stage $nn faster: a prompt for an assistant or a student"
        echo
        echo "Written by \`make stage $n prompt\` from commit $commit on $(date -u +%Y-%m-%d); device: $device."
        echo "Everything the task needs is in this file."
        echo
        echo "## The task"
        echo
        if [ "$nn" = 01 ]; then
            cat <<EOF
Below is \`01-vector-add/vector_add.cu\` of cuda-stages, a CUDA C tutorial: nine versions of c = a + b,
each timed and checked bit for bit against the CPU. Make one or more of its GPU versions faster on this
GPU, or add a better one. First write your prediction with napkin math (bytes moved, bandwidth, time),
then answer with the complete new \`vector_add.cu\`, nothing left out.
EOF
        else
            cat <<EOF
Below is stage $nn of cuda-stages, a CUDA C tutorial that trains the same two models faster stage by
stage: a full-batch linear regression on 5,000,000 points and an MLP on MNIST. Make **one** trainer
faster on this GPU: $(if [ "$targets" = "regression mnist" ]; then echo "\`regression.cu\` or \`mnist.cu\`, whichever you choose"; else echo "\`$targets.cu\`"; fi).
First write your prediction with napkin math (bytes moved, launches, syncs, FLOPs, and the time each
costs), naming which item of the checklist below you remove. Then answer with the complete new file,
nothing left out: it replaces the stage's file as a whole.
EOF
        fi
        echo
        echo "## Rules a candidate must keep"
        echo
        if [ "$nn" = 01 ]; then
            cat <<'EOF'
1. **Same interface.** Keep `main` (under `#ifndef VECTOR_ADD_NO_MAIN`) with its flags and table, and the
   three functions with C linkage that the test suite calls: `vector_add_version_count`,
   `vector_add_version_name`, `vector_add_run` (same signatures). Keep the existing versions' names and
   numbers; new versions go at the end.
2. **Same results.** Every version must produce c = a + b bit for bit (one fp32 addition rounds the same
   on both processors); the output is poisoned with NaN before every run, so every element must be written.
3. **Honest timing.** Keep the CUDA-event timing and the two columns (kernel only, with transfers).
4. **One file.** CUDA runtime, cuRAND and the headers in `common/` only; it must build with
   `nvcc -O3 -std=c++17` as part of this repository.
EOF
        else
            cat <<'EOF'
1. **Same interface.** Export with C linkage exactly what `common/trainer.h` (below) declares for the
   trainer you replace: `train_regression` and `REGRESSION_VARIANTS`, or `train_mnist`, `MNIST_VARIANTS`
   and `MNIST_PRECISIONS`. `#include "trainer.h"` (it makes them `extern "C"`). The first variant is the
   default and the one that is timed; every variant you list is tested. No `main`: the drivers own it.
   Make every other function and kernel `static` or give it a name of your own (the file is linked with
   the stage's other trainer).
2. **Same results within tolerance.** A GPU test suite (`tests/gpu/test_stage.c`) compares every variant
   (and every precision) with a double-precision CPU reference trained on the same data, initial
   parameters and batch order: regression w, b and every logged loss; MNIST every step loss, the
   parameters and the test loss and accuracy of every epoch, and one epoch of the real digits above an
   accuracy floor. Its tolerances are quoted below. Outputs are filled with NaN before each call, so
   write every output; NaN or Inf anywhere fails.
3. **Same work.** Same epochs, steps, batch order, learning rate and loss; no epoch or step skipped, no
   result reused across calls, every reported loss computed from the parameters of its own epoch or step.
4. **Honest timing.** Keep the `TrainClock` calls of `common/timing.h`: e2e from the training data in host
   memory to the trained parameters in host memory, loop from the data on the device. Only set-up that
   a real program would do once (allocations, handles, plans, graph instantiation) may go before
   `train_clock_e2e_start`, and it is reported as `setup_ms`. `--breakdown` must still fill `phase_ms`.
5. **One file.** CUDA runtime, cuBLAS, cuBLASLt, cuDNN, cuRAND and the headers in `common/` only;
   it must build with `nvcc -O3 -std=c++17` as part of this repository.
EOF
        fi
        echo
        echo "## How the answer is checked"
        echo
        cat <<EOF
Save the answer as a file and run, on the GPU machine:

    make stage $n try FILE=path/to/$(head -n1 <<<"$sources")

\`try\` compiles it in place of the stage's file, checks that it exports what the drivers need, runs the
stage's GPU test suite on it, and only if it passes times it against the stage's own file with the same
flags. Its last line is the verdict: \`try: PASS\` with the relative speed, or \`try: FAIL\` with why.
EOF
        echo
        if [ "$nn" != 01 ]; then
            echo "## The interface: common/trainer.h"
            echo
            fence c common/trainer.h
            echo
            echo "## Timing and error checks: common/timing.h, common/check.h"
            echo
            fence c common/timing.h
            echo
            fence c common/check.h
            echo
            echo "## The tolerances of the test suite (tests/gpu/test_stage.c)"
            echo
            echo '````c'
            awk '/^\/\/ tolerances/ { on = 1 } /^\/\/ no GPU/ { exit } on && !/^\/\/ -+$/' tests/gpu/test_stage.c
            echo '````'
            echo
        else
            echo "## Helpers it includes: common/check.h, common/device.h, common/report.h"
            echo
            fence c common/check.h
            echo
            fence c common/device.h
            echo
            fence c common/report.h
            echo
        fi
        echo "## The source of stage $nn"
        for t in $sources; do
            echo
            echo "### $stage_dir/$t"
            echo
            fence cuda "$stage_dir/$t"
        done
        echo
        echo "## Measured"
        echo
        echo "### Result rows of stage $nn in results/ (the newest of each configuration)"
        echo
        local csvs
        csvs=$(set +f; for f in results/*.csv; do case $f in *-curves.csv | *-breakdown.csv) ;; *) [ -f "$f" ] && echo "$f" ;; esac; done)
        if [ -n "$csvs" ]; then
            # shellcheck disable=SC2086
            awk -v stage="$nn" -v mode=results -f common/csv.awk -f common/try_report.awk $csvs
        else
            echo "None yet (\`make bench\` on a GPU machine writes them)."
        fi
        echo
        echo "### This run: $(if [ "$nn" = 01 ]; then echo "every version"; else echo "per-phase breakdown"; fi)"
        echo
        if [ "$have_gpu" != 1 ]; then
            echo "No GPU was available when this prompt was written, so nothing was measured here:"
            echo "run \`make stage $n prompt\` on the GPU machine for a measured breakdown."
        elif [ "$nn" = 01 ]; then
            echo '```'
            # shellcheck disable=SC2086  # ARGS is a list of flags
            "$build/01/vector_add" --repeat 5 ${TRY_ARGS:-} 2>&1
            echo '```'
        else
            for t in $targets; do
                echo "\`$build/$nn/$t --breakdown ${TRY_ARGS:-}\` (each phase synchronizes, so the total grows):"
                echo
                echo '```'
                # shellcheck disable=SC2086
                "$build/$nn/$t" --breakdown ${TRY_ARGS:-} 2>&1
                echo '```'
                echo
            done
            echo "### Nsight Compute summary"
            echo
            if command -v ncu >/dev/null 2>&1; then
                for t in $targets; do
                    echo '```'
                    "$TRY_MAKE" --no-print-directory stage-profile NN="$nn" TRAINER="$t" 2>&1 | tail -n 40
                    echo '```'
                done
            else
                echo "ncu was not available on this machine."
            fi
        fi
        echo
        echo "## Checklist of known inefficiencies (from 02-llm-baseline/README.md)"
        echo
        if [ "$nn" = 01 ]; then
            echo "The checklist is written for the trainers of stages 02–07; for a vector add, the items on"
            echo "pageable copies and host syncs are the ones that apply."
            echo
        fi
        if [ "$nn" != 01 ] && [ "$nn" != 02 ]; then
            echo "Items ticked [x] point at stage $nn or an earlier one: this stage's code has already removed them"
            echo "(where an item names two stages, the first). The unticked ones are open."
            echo
        fi
        # shellcheck disable=SC2016
        awk -v nn="$nn" '/^## Known inefficiencies/ { on = 1; next } on && /^## / { exit }
            on && /^- \[ \] / && match($0, /→ stage 0[0-9]/) && substr($0, RSTART + RLENGTH - 2, 2) + 0 <= nn + 0 {
                sub(/^- \[ \] /, "- [x] ")
            }
            on' 02-llm-baseline/README.md
    } >"$prompt_file"
    echo "wrote $prompt_file ($(wc -l <"$prompt_file") lines): give it to an assistant or a student;"
    echo "the answer goes back through: make stage $n try FILE=path/to/$(head -n1 <<<"$sources")"
}

case $cmd in
try) try_file "${3:-}" ;;
exercise) exercise ;;
prompt) prompt ;;
*) die "usage: common/try.sh try|exercise|prompt NN [FILE] (run through make stage N try|exercise|prompt)" ;;
esac
