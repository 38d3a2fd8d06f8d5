#!/usr/bin/env bash
# tools/try.sh NN FILE: the work behind `make stage N try` (tools/exercises.mk hands over the build
# settings as TRY_* environment variables). FILE replaces the stage trainer it defines (for stage 01:
# vector_add.cu), or is a Markdown answer whose only fenced code block is that file, or, a .c file named as
# one of common/'s (staging.c), replaces that file under the stage's own trainers, or, a .cu file named as one of
# the stage's kernel ladders (mma_ladder.cu), replaces that ladder. Not meant to be run by hand.
#
# First what needs no GPU (every mistake is one "error:" line and exit 2): FILE compiles with the Makefile's
# flags into build/try/NN/, defines with C linkage what the drivers and tests call (nm decides which trainer it
# replaces), and links with the suite and the stage's other trainer, and with the driver (which reports its
# stage as "NN-try"). A `// TODO(exercise)` comment left in FILE never passes. A common/ file links ahead of
# libcommon.a with the stage's own trainers instead, and where tests/exercise/test_<name>.c checks common/<name>.c on the
# CPU, that CPU suite runs on it first, on any machine: its failure is a FAIL. A kernel ladder is compiled as its
# program and without its main (-DLADDER_NO_MAIN), linked with its own test (tests/gpu/test_<name>.c) and, where
# tests/exercise/test_<name>.c checks it on the CPU, with that CPU suite, which runs first in the same way. Then the
# GPU suite on the candidate's trainer only (Criterion --filter; a common/ file: the trainers that include its
# header; a ladder: its test) and, only if it passed, the stage's driver and the candidate's with the same flags,
# and a table of the two result rows with the relative speed (a ladder: the candidate's ladder program, which
# checks every version against the CPU before it times it).
# Verdict on the last line: "try: PASS", "try: FAIL", or "try: UNVERIFIED (no CUDA device)"; exit 0, 1
# or 4 (see tools/exercises.mk). tools/exercise.sh runs this on a skeleton, with TRY_OUT (the folder
# for the build), TRY_INCLUDE_DIR (the stage's folder, where a skeleton cut into build/ finds the
# headers beside its file) and TRY_REGIONS (the exercise regions tried). Without a GPU, a CPU suite whose
# "// whole: name, name" line names every region tried checks the exercise whole: its PASS is the verdict.
# shellcheck disable=SC2086  # the TRY_* flags and ARGS are lists of words
nn=${1:-}
# shellcheck source=tools/try_common.sh
source tools/try_common.sh
[ -n "$nn" ] || die "usage: tools/try.sh NN FILE (run through make stage N try)"
out=${TRY_OUT:-$build/try/$nn}
include_dir=${TRY_INCLUDE_DIR:-}

# ----------------------------------------------------------------------------
# the candidate: checked, compiled, its symbols read, linked

answer_blocks() {  # answer_blocks FILE.md: how many fenced code blocks it holds (``` or ~~~ at a line's start)
    awk '/^(```|~~~)/ { fences++ } END { print fences % 2 ? "unclosed" : fences / 2 }' "$1"
}

stage_ladders() {  # the stage's kernel ladders, "mma_ladder.cu", one a line
    find "$stage_dir" -maxdepth 1 -name '*_ladder.cu' -printf '%f\n' 2>/dev/null | sort
}

# check_candidate FILE: sets file, answer where it is a Markdown answer, common_name where a .c file of common/,
# ladder where a kernel ladder of the stage (mma_ladder); or exits 2
check_candidate() {
    file=$1 answer= common_name= ladder=
    local ladders trainers=1
    ladders=$(stage_ladders | paste -sd' ')
    [ "$nn" = 01 ] || { [ -f "$stage_dir/regression.cu" ] && [ -f "$stage_dir/mnist.cu" ]; } || trainers=0
    [ -n "$file" ] || [ $trainers = 1 ] ||
        die "no candidate given: make stage $n try FILE=mine/${ladders%% *} (stage $nn has no trainers: try takes one of its kernel ladders, $ladders)"
    [ -n "$file" ] || die "no candidate given: make stage $n try FILE=path/to/regression.cu (a .cu file that replaces one of stage $nn's trainers)"
    [ -e "$file" ] || die "FILE '$file' does not exist"
    [ -f "$file" ] || die "FILE '$file' is not a regular file"
    case ${file##*/} in
    *_ladder.cu)
        [[ " $ladders " == *" ${file##*/} "* ]] ||
            die "FILE '$file' is named as a kernel ladder, and stage $nn has no ${file##*/}${ladders:+ (its ladders: $ladders)}"
        ladder=${file##*/}
        ladder=${ladder%.cu}
        return ;;
    esac
    [ $trainers = 1 ] ||
        die "stage $nn has no trainers: try takes one of its kernel ladders, named as it is (${ladders:-none here}), not '$file'"
    case $file in
    *.cu) ;;
    *.md)
        answer=$file
        local blocks
        blocks=$(answer_blocks "$answer")
        [ "$blocks" = 1 ] || die "$answer holds $blocks fenced code blocks: try takes an answer with exactly one (the complete file)"
        ;;
    *.c)
        local name=${file##*/}
        [ -f "common/$name" ] && [ "${name%_main.c}" = "$name" ] ||
            die "FILE '$file' is a C file that replaces none of common/: a .c candidate is named as the common/ file it replaces (e.g. staging.c)"
        [ "$nn" != 01 ] || die "stage 01 uses no file of common/ that a candidate may replace: try takes its vector_add.cu"
        common_name=${name%.c}
        ;;
    *) die "FILE '$file' is not a CUDA source: try takes a .cu file, a Markdown answer holding one, or a .c file of common/" ;;
    esac
}

compile_candidate() {  # compile_candidate OUT.o [FLAGS...]
    local object=$1
    shift
    $TRY_NVCC $TRY_NVCCFLAGS ${include_dir:+"-I$include_dir"} "$@" -c "$file" -o "$object" ||
        die "$file does not compile (see the compiler output above)"
}

# link_candidate OUT WHY OBJECTS...: OBJECTS and libcommon.a linked into OUT (as LINK_TEST does), or "FILE does not link WHY"
link_candidate() {
    local program=$1 why=$2
    shift 2
    $TRY_NVCC "$@" "$build/common/libcommon.a" -o "$program" $TRY_LDFLAGS $TRY_CRITERION_LIBS $TRY_LDLIBS ||
        die "$file does not link $why"
}

defined_symbols() {  # the global symbols an object defines, one per line
    nm --defined-only "$1" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[A-Z]$/ { print $3 }'
}

has() { grep -qx "$1" <<<"$2"; }

# sets trainer (regression|mnist), other (the stage trainer that stays) and required, or exits 2
pick_trainer() {
    local symbols=$1 t s found=
    declare -A exports=([regression]="train_regression REGRESSION_VARIANTS" [mnist]="train_mnist MNIST_VARIANTS MNIST_PRECISIONS")
    for t in regression mnist; do
        for s in ${exports[$t]}; do has "$s" "$symbols" && { found="$found $t"; break; }; done
    done
    [ "$found" != " regression mnist" ] ||
        die "$file defines symbols of both trainers (train_regression ... and train_mnist ...): a candidate replaces one; split it into regression.cu and mnist.cu"
    case $found$(basename "$file") in  # neither: the file name says what it meant to be
    " "*) trainer=${found# } ;;
    *mnist*) trainer=mnist ;;
    *regression*) trainer=regression ;;
    *) die "$file defines neither train_regression nor train_mnist with C linkage: keep a signature of common/trainer.h and #include \"trainer.h\" (it declares them extern \"C\")" ;;
    esac
    other=mnist required=${exports[$trainer]}
    [ "$trainer" = regression ] || other=regression
    for s in $required; do
        has "$s" "$symbols" ||
            die "$file does not define $s with C linkage, which the $trainer driver and tests need (common/trainer.h declares it: #include \"trainer.h\" and keep its signature)"
    done
    ! has main "$symbols" || die "$file defines main: a trainer file must not (the drivers in common/ own main)"
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
    link_candidate "$out/test_vector_add" "with tests/gpu/test_vector_add.c (see the linker output above)" \
        "$build/tests/gpu/test_vector_add.o" "$out/candidate_versions.o"
    link_candidate "$out/vector_add" "into the vector_add program (see the linker output above)" "$out/candidate.o"
    echo "   compiles, defines main and vector_add_version_count/_name/_run, links: $out/test_vector_add, $out/vector_add"
}

link_trainer() {  # stages 02 on: the file replaces one trainer, beside the stage's other one
    compile_candidate "$out/candidate.o"
    pick_trainer "$(defined_symbols "$out/candidate.o")"
    link_candidate "$out/test_gpu" "with stage $nn's $other.o and the test suite (see the linker output above): make its helpers and kernels static" \
        "$build/tests/gpu/test_stage.o" "$out/candidate.o" "$build/$nn/$other.o"
    $TRY_CC $TRY_CFLAGS -DSTAGE_NAME="\"$nn-try\"" -c "common/${trainer}_main.c" -o "$out/${trainer}_main.o" ||
        die "the $trainer driver does not compile (see above)"
    link_candidate "$out/$trainer" "into the $trainer driver (see the linker output above)" "$out/${trainer}_main.o" "$out/candidate.o"
    echo "   replaces stage $nn's $trainer: compiles, defines ${required// /, }, links: $out/test_gpu, $out/$trainer"
    suite_filter='regression/*'
    [ "$trainer" = mnist ] && suite_filter='mnist*/*'
}

# link_ladder: a kernel ladder, which is its own program; without its main (-DLADDER_NO_MAIN) its versions are what its
# test calls (tests/gpu/test_<name>.c) and, where tests/exercise/test_<name>.c checks it on the CPU, that check
link_ladder() {
    compile_candidate "$out/candidate.o"
    compile_candidate "$out/candidate_versions.o" -DLADDER_NO_MAIN
    has main "$(defined_symbols "$out/candidate.o")" ||
        die "$file does not define main: it replaces $stage_dir/$ladder.cu as a whole, the program included (main only under #ifndef LADDER_NO_MAIN)"
    link_candidate "$out/test_$ladder" "with tests/gpu/test_$ladder.c (see the linker output above): keep the extern \"C\" functions of $stage_dir/$ladder.cu" \
        "$build/tests/gpu/test_$ladder.o" "$out/candidate_versions.o"
    link_candidate "$out/$ladder" "into the $ladder program (see the linker output above)" "$out/candidate.o"
    trainer=$ladder cpu_suite='' cpu_test=tests/exercise/test_$ladder.c
    if [ -f "$cpu_test" ]; then
        build_stage "$build/tests/exercise/test_$ladder.o"
        link_candidate "$out/test_cpu" "with $cpu_test (see the linker output above): keep the extern \"C\" functions of $stage_dir/$ladder.cu" \
            "$build/tests/exercise/test_$ladder.o" "$out/candidate_versions.o"
        cpu_suite=$out/test_cpu
    fi
    echo "   replaces stage $nn's $ladder: compiles, defines main, links: $out/test_$ladder, $out/$ladder${cpu_suite:+, $cpu_suite}"
}

# link_common: stages 02 on, a .c file that replaces common/<name>.c: the stage's own trainers link with it ahead of
# libcommon.a (whose <name>.o the linker then leaves out). The trainers that include <name>.h are the ones tested, and
# the first of them is timed (neither: both tested, the regression timed); tests/exercise/test_<name>.c, where there is one,
# links with it into the CPU check.
link_common() {
    local t users=()
    cpu_test=tests/exercise/test_$common_name.c
    $TRY_CC $TRY_CFLAGS ${include_dir:+"-I$include_dir"} -c "$file" -o "$out/candidate.o" ||
        die "$file does not compile (see the compiler output above)"
    for t in regression mnist; do
        grep -q "^#include \"$common_name.h\"" "$stage_dir/$t.cu" 2>/dev/null && users+=("$t")
    done
    [ ${#users[@]} -gt 0 ] || users=(regression mnist)
    trainer=${users[0]} suite_filter=
    if [ ${#users[@]} = 1 ]; then
        suite_filter='regression/*'
        [ "$trainer" = mnist ] && suite_filter='mnist*/*'
    fi
    link_candidate "$out/test_gpu" "with stage $nn's trainers and the test suite in place of common/$common_name.c (see the linker output above): keep every function common/$common_name.h declares, and make the others static" \
        "$build/tests/gpu/test_stage.o" "$build/$nn/regression.o" "$build/$nn/mnist.o" "$out/candidate.o"
    $TRY_CC $TRY_CFLAGS -DSTAGE_NAME="\"$nn-try\"" -c "common/${trainer}_main.c" -o "$out/${trainer}_main.o" ||
        die "the $trainer driver does not compile (see above)"
    link_candidate "$out/$trainer" "into the $trainer driver with stage $nn's $trainer (see the linker output above)" \
        "$out/${trainer}_main.o" "$build/$nn/$trainer.o" "$out/candidate.o"
    cpu_suite=
    if [ -f "$cpu_test" ]; then
        build_stage "$build/tests/exercise/test_$common_name.o"
        link_candidate "$out/test_cpu" "with $cpu_test (see the linker output above)" "$build/tests/exercise/test_$common_name.o" "$out/candidate.o"
        cpu_suite=$out/test_cpu
    fi
    echo "   replaces common/$common_name.c under stage $nn's ${users[*]}: compiles, links: $out/test_gpu, $out/$trainer${cpu_suite:+, $cpu_suite}"
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

# verdict WORD STATUS LINE...: the verdict block, "try: WORD" its last line, and exit STATUS
verdict() {
    local word=$1 status=$2 line
    shift 2
    echo "== verdict for $file (stage $nn $trainer)${scope:-}"
    [ -z "${cpu_note:-}" ] || echo "  $cpu_note"
    for line in "$@"; do echo "  $line"; done
    echo "try: $word"
    exit "$status"
}

# cpu_check: a common/ file's or a ladder's CPU suite (tests/exercise/test_<name>.c), on any machine and before anything
# else runs; returns only where it passed, with cpu_note saying so
cpu_check() {
    cpu_note=
    [ -n "${cpu_suite:-}" ] || return 0
    local t=0 f=1 rc what=$cpu_test
    echo "== CPU check: $cpu_suite ($what on $file; no GPU needed)"
    rm -f "$out/cpu.tap"
    "$cpu_suite" --tap="$out/cpu.tap" 2>&1 | tee "$out/cpu.log"
    rc=${PIPESTATUS[0]}
    if grep -q '^1\.\.' "$out/cpu.tap" 2>/dev/null; then
        read -r t f < <(awk '/^ok .*# SKIP/ { next } /^ok / { t++ } /^not ok / { t++; f++ } END { print t + 0, f + 0 }' "$out/cpu.tap")
    fi
    if [ "$f" -gt 0 ] || [ "$rc" -ne 0 ]; then
        local reasons=("CPU check: FAIL, $f of $t tests of $what failed or crashed (the output above; kept in $out/cpu.log)")
        [ "$todo" -gt 0 ] && reasons+=("$todo_note")
        verdict FAIL 1 "${reasons[@]}"
    fi
    cpu_note="CPU check: PASS, $t tests of $what"
}

# cpu_whole: the CPU check passed and checks every region tried whole (its "// whole: name, name" line names each
# of TRY_REGIONS, which tools/exercise.sh sets): where no GPU runs the suite, its verdict is the exercise's
cpu_whole() {
    local r whole
    [ -n "${cpu_note:-}" ] && [ -n "${TRY_REGIONS:-}" ] || return 1
    whole=" $(sed -n 's|^// whole: ||p' "$cpu_test" | tr ',' ' ' | paste -sd' ') "
    for r in $TRY_REGIONS; do [[ $whole == *" $r "* ]] || return 1; done
}

verdict_not_run() {  # TRY_RUN=0: the CPU-side checks are all there is
    local scope=", CPU-side checks only (TRY_RUN=0)"
    [ "$todo" -eq 0 ] || verdict FAIL 1 "$todo_note"
    verdict "NOT RUN" 0 "compiles, exports what the drivers need, links; the suite did not run (TRY_RUN=0): nothing was checked${cpu_note:+ but the CPU check}"
}

suite_verdict() {  # the suite, on the candidate's trainer only; returns only where it passed
    if [ "$nn" = 01 ]; then
        run_suite "$out/test_vector_add"
    elif [ -n "$ladder" ]; then
        run_suite "$out/test_$ladder"
    else
        if [ "$suite_filter" != 'regression/*' ] && [ "${TRY_HAVE_GPU:-0}" = 1 ] && [ -z "${MNIST_DIR:-}" ]; then
            "$TRY_MAKE" --no-print-directory -s data/mnist/train-images-idx3-ubyte || exit 3
        fi
        if [ -n "$suite_filter" ]; then run_suite "$out/test_gpu" --filter "$suite_filter"; else run_suite "$out/test_gpu"; fi
    fi
    if [ "$failed" -gt 0 ] || [ "$suite_rc" -ne 0 ]; then
        local reasons=("correctness: FAIL, $failed of ${tested:-?} tests failed or crashed (the output above; kept in $out/suite.log)")
        [ "$todo" -gt 0 ] && reasons+=("$todo_note")
        verdict FAIL 1 "${reasons[@]}"
    fi
    if [ "${tested:-0}" -eq 0 ]; then
        [ "$todo" -gt 0 ] && verdict FAIL 1 "$todo_note" "correctness: not checked, the suite skipped every test (no CUDA device)"
        cpu_whole && verdict PASS 0 "correctness: the CPU check covers ${TRY_REGIONS// /, } whole; the suite skipped every test (no CUDA device): on a GPU the same command runs it as well"
        verdict "UNVERIFIED (no CUDA device)" 4 \
            "compiles, exports what the drivers need, links; the suite skipped every test (no CUDA device): nothing was checked${cpu_note:+ but the CPU check}"
    fi
    [ "$todo" -gt 0 ] && verdict FAIL 1 "correctness: the suite passed, but $todo_note"
}

ladder_verdict() {  # the candidate's ladder program: every version checked against the CPU, then timed; the PASS
    local flags="--repeat 3 ${TRY_ARGS:-}"
    echo "== the ladder: $out/$ladder $flags (each version checked against the CPU in double precision, then timed)"
    "$out/$ladder" $flags ||
        verdict FAIL 1 "correctness: PASS on the suite" "the ladder: FAIL, $out/$ladder exited $? (see above)"
    echo "== verdict for $file (stage $nn $ladder)"
    [ -z "${cpu_note:-}" ] || echo "  $cpu_note"
    echo "  correctness: PASS, $tested tests against the CPU (output above; kept in $out/suite.log), and the ladder's own check of each version"
    echo "  speed: the ladder's table above (make stage $n ladder times the stage's own)"
    echo "try: PASS"
    exit 0
}

speed_verdict() {  # the stage's driver, then the candidate's, the same flags; the PASS table
    local flags
    if [ "$nn" = 01 ]; then flags="--repeat 5"; else flags="--quiet --repeat 3"; fi
    flags="$flags ${TRY_ARGS:-}"
    echo "== speed: $build/$nn/$trainer and $out/$trainer, each with: $flags"
    rm -f "$out/stage.csv" "$out/candidate.csv"
    "$build/$nn/$trainer" $flags --csv "$out/stage.csv" ||
        die "stage $nn's own $trainer failed with these flags (see above): no speed to compare with"
    "$out/$trainer" $flags --csv "$out/candidate.csv" ||
        verdict FAIL 1 "correctness: PASS on the suite" "speed: the candidate's $trainer failed with these flags (see above): $flags"
    echo "== verdict for $file (stage $nn $trainer)"
    [ -z "${cpu_note:-}" ] || echo "  $cpu_note"
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
cpu_test=
if [ -n "$ladder" ]; then link_ladder; elif [ "$nn" = 01 ]; then link_vector_add; elif [ -n "$common_name" ]; then link_common; else link_trainer; fi
todo=$(grep -c "// TODO(exercise)" "$file")
todo_note="$todo TODO(exercise) marker$([ "$todo" = 1 ] || echo s) left in $file: the exercise is not done \
(delete each marker once its code is written)"
cpu_check
[ "$run_suite_too" = 1 ] || verdict_not_run
suite_verdict
[ -z "$ladder" ] || ladder_verdict
speed_verdict
