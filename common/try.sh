#!/usr/bin/env bash
# common/try.sh: the work behind `make stage N try|exercise|prompt` (see common/exercises.mk, which hands
# over the build settings as TRY_* environment variables). Not meant to be run by hand.
#
#   try.sh try NN FILE     FILE replaces the stage trainer it defines (for stage 01: vector_add.cu)
#   try.sh exercise NN     try on the skeleton cut from the stage's file(s) by common/exercise_cut.awk into
#                          build/exercise/NN/ (TRY_EXERCISE picks a region; TRY_ANSWER=1: the stage's file)
#   try.sh prompt NN       writes build/prompt/stageNN-TRAINER.md, one per trainer (stage 01: stage01.md)
#
# try, step by step (every mistake is one "error:" line and exit 2, before anything runs on a GPU):
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

answer_blocks() {  # answer_blocks FILE.md: how many fenced code blocks it holds (``` or ~~~ at a line's start)
    awk '/^(```|~~~)/ { fences++ } END { print fences % 2 ? "unclosed" : fences / 2 }' "$1"
}

answer_code() {  # answer_code FILE.md: the body of its fenced code blocks (try_file has checked there is one)
    awk '/^(```|~~~)/ { inside = !inside; next } inside' "$1"
}

try_file() {
    file=$1
    [ -n "$file" ] || die "no candidate given: make stage $n try FILE=path/to/regression.cu (a .cu file that replaces one of stage $nn's trainers)"
    [ -e "$file" ] || die "FILE '$file' does not exist"
    [ -f "$file" ] || die "FILE '$file' is not a regular file"
    local answer=
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
    if [ -n "$answer" ]; then  # an assistant's answer as it came: its one fenced code block is the candidate
        local name
        name=$(basename "$answer" .md)
        file=$out/${name%.answer}.cu
        answer_code "$answer" >"$file"
        echo "== try: the fenced code block of $answer, written to $file"
    fi
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
# prompt: build/prompt/stageNN-TRAINER.md, one per trainer (stage 01: build/prompt/stage01.md)
#
# The prompt of stage N asks for stage N's one idea, applied to the code it starts from: stage N-1's
# trainer file (stage 02, where the trainers start: its own file, and the task is open). It holds the
# idea (common/stage_ideas.tsv), stage N's predictions table (NN-*/README.md), a checklist derived from
# the starting file (each later stage's marker found in its code or not), the rules, how the answer is
# checked, the contract (the trainer's part of common/trainer.h, the helpers' usage, the suite's
# tolerances), the starting file and its measurements. Every prompt stays under PROMPT_LIMIT bytes:
# when the starting file does not fit whole, its whole-line comments are left out, then all its comments,
# then this run's measurements; a prompt that still does not fit is an error (exit 2).

PROMPT_LIMIT=40960
ideas_file=common/stage_ideas.tsv

fence() {  # fence LANG FILE: FILE in a fenced block long enough not to be closed by its contents
    echo '````'"$1"
    cat "$2"
    echo '````'
}

code_only() {  # code_only FILE: the file with its // and /* */ comments removed (what the markers read)
    awk '{
        line = $0; out = ""
        while (line != "") {
            if (in_block) {
                i = index(line, "*/")
                if (!i) { line = ""; break }
                line = substr(line, i + 2); in_block = 0; continue
            }
            s = index(line, "/*"); d = index(line, "//")
            if (d && (!s || d < s)) { out = out substr(line, 1, d - 1); break }
            if (s) { out = out substr(line, 1, s - 1); line = substr(line, s + 2); in_block = 1; continue }
            out = out line; line = ""
        }
        print out
    }' "$1"
}

squeeze_blank_lines() {  # standard input without trailing blanks, runs of blank lines squeezed to one
    awk '{ sub(/[[:space:]]+$/, "") } NF == 0 { if (blank++) next } NF { blank = 0 } { print }'
}

without_comment_lines() {  # FILE: without its whole-line // comments
    grep -v '^[[:space:]]*//' "$1" | squeeze_blank_lines
}

stage_folder() {  # stage_folder NN: the stage's folder, empty when there is none (a planned stage)
    find . -maxdepth 1 -type d -name "$1-*" | sed 's|^\./||' | head -n1
}

# prompt_checklist START_FILE: one line per idea of common/stage_ideas.tsv, [x] where its marker is in
# the starting file's code, [ ] where it is not; the idea of this prompt's stage is marked as the task
prompt_checklist() {
    local code stage marker idea removes found line
    code=$(code_only "$1")
    while IFS=$'\t' read -r stage marker idea removes; do
        case $stage in '#'* | '') continue ;; esac
        line="**stage $stage**"
        [ -n "$(stage_folder "$stage")" ] || line="$line (planned: no folder yet)"
        [ "$stage" = "$nn" ] && line="$line ← the task of this prompt"
        found=$(grep -oE -m1 -- "$marker" <<<"$code" | head -n1)
        if [ -n "$found" ]; then
            echo "- [x] $line: $idea. In the starting code: \`$found\`."
        else
            echo "- [ ] $line: $idea. Open (no \`$marker\` in the code). It removes $removes."
        fi
    done <"$ideas_file"
    local kernels launches atomics syncs copies
    kernels=$(grep -cE '__global__' <<<"$code")
    launches=$(grep -oE '<<<' <<<"$code" | wc -l)
    atomics=$(grep -oE 'atomic[A-Z][A-Za-z]*[[:space:]]*\(' <<<"$code" | wc -l)
    syncs=$(grep -oE 'cuda(Device|Stream|Event)Synchronize[[:space:]]*\(' <<<"$code" | wc -l)
    copies=$(grep -oE 'cudaMemcpy[[:space:]]*\(' <<<"$code" | wc -l)
    echo
    echo "Counted in the starting file's code (places in the source, not calls per step): kernels defined $kernels;"
    echo "launch sites (\`<<<\`) $launches; atomic call sites $atomics; host synchronizations (\`cuda*Synchronize\`)"
    echo "$syncs; blocking \`cudaMemcpy\` calls $copies."
}

prompt_predictions() {  # prompt_predictions README TRAINER: the predictions table's header and the trainer's rows
    awk -v t="$2" '/<!-- predictions end -->/ { on = 0 }
        on { n++; split($0, cell, "|"); gsub(/ /, "", cell[2]); if (n <= 2 || cell[2] == t) print }
        /<!-- predictions begin -->/ { on = 1 }' "$1"
}

trainer_h_part() {  # trainer_h_part TRAINER: common/trainer.h without the other trainer's section
    awk -v t="$1" '/^\/\/ -----/ { rule = $0; next }
        rule != "" {
            skip = (t == "regression" && /^\/\/ MNIST/) || (t == "mnist" && /^\/\/ regression/)
            if (skip) print "// (the " (t == "regression" ? "MNIST" : "regression") " section is left out: this prompt is about the " t ")"
            else print rule
            rule = ""
        }
        /^#ifdef __cplusplus/ { skip = 0 }
        !skip' common/trainer.h
}

tolerances_part() {  # tolerances_part TRAINER: the suite's tolerances that apply to that trainer
    awk -v t="$1" '/^\/\/ tolerances/ { on = 1 } /^\/\/ no GPU/ { exit } !on || /^\/\/ -+$/ { next }
        /^\/\/ Regression, fp32/ { part = "regression" } /^\/\/ MNIST, per precision/ { part = "mnist" }
        part == "" || part == t' tests/gpu/test_stage.c
}

helpers_usage() {  # how a trainer uses common/timing.h, check.h and host.h: timing.h's opening comment, the calls
    echo '````c'
    awk '/^\/\// { print; next } { exit }' common/timing.h
    echo
    echo "// common/check.h: each prints one line and exits 4 on a failed call"
    grep -oE '^#define [a-zA-Z]+Check\([a-z]*\)' common/check.h | sed 's/^#define //'
    echo "// common/host.h"
    grep -E '^[a-z].*\);' common/host.h
    echo '````'
}

# prompt_write FILE FORM MEASURED: the prompt of one trainer ($trainer, from $start), FORM = whole, lean
# (the starting file without its whole-line comments) or bare (without any comment), MEASURED = the file
# of this run's measurements, empty when left out
prompt_write() {
    local out=$1 form=$2 measured=$3 shown
    shown=$start
    if [ "$form" != whole ]; then
        shown=$build/prompt/.$form-$(basename "$start")
        if [ "$form" = lean ]; then without_comment_lines "$start"; else code_only "$start" | squeeze_blank_lines; fi >"$shown"
    fi
    {
        echo "# Stage $nn$([ "$nn" != 01 ] && echo ", $trainer"): a prompt for an assistant or a student"
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
        elif [ "$nn" = 02 ]; then
            cat <<EOF
Below is \`$start\`, the $trainer trainer of stage 02 of cuda-stages, a CUDA C tutorial that trains the
same two models faster stage by stage (a full-batch linear regression on 5,000,000 points, the first 80%
training and the rest test, and an MLP on MNIST). Stage 02 is where the trainers start: a naive, correct first port. Make it faster by removing
**one** open item of the checklist below. First write your prediction with napkin math (bytes moved,
launches, syncs, FLOPs, and the time each costs), naming the item. Then answer with the complete new
\`$trainer.cu\`, nothing left out: it replaces the stage's file as a whole.

Stage 02 is the baseline and predicts nothing; each later stage's README predicts what its idea buys.
EOF
        else
            cat <<EOF
Below is \`$start\`, the $trainer trainer of stage $prev of cuda-stages, a CUDA C tutorial that trains
the same two models faster stage by stage (a full-batch linear regression on 5,000,000 points, the first
80% training and the rest test, and an MLP on MNIST). Stage $nn adds **one** idea to it:

> $idea

Write stage $nn's \`$trainer.cu\`: the starting file with this one idea applied, nothing else changed.
First write your prediction with napkin math (bytes moved, launches, syncs, FLOPs, and the time each
costs) against the starting file's measurements below. Then answer with the complete new file, nothing
left out: it replaces the stage's file as a whole.

### Stage $nn's own prediction

EOF
            local rows
            rows=$(prompt_predictions "$stage_dir/README.md" "$trainer")
            if [ "$(wc -l <<<"$rows")" -gt 2 ]; then
                echo "Made before measuring, in \`$stage_dir/README.md\` (\"Prediction\" holds the napkin math). Speedups are"
                echo "stage $prev ÷ stage $nn: \`speedup_epoch\` of the median ms per epoch, \`speedup_loop\` of the loop,"
                echo "\`speedup_e2e\` of e2e; \`loop_ms\` is a time. Write your own before you read the code twice."
                echo
                echo "$rows"
            else
                echo "\`$stage_dir/README.md\` predicts nothing for the $trainer trainer; write your own."
            fi
        fi
        echo
        if [ "$nn" != 01 ]; then
            echo "## Checklist: what the starting code leaves open"
            echo
            echo "Derived from \`$start\` with the table of \`$ideas_file\`: each stage's idea and the code marker"
            echo "that shows it. [x]: the marker is in the starting code; [ ]: open."
            echo
            prompt_checklist "$start"
            echo
        fi
        echo "## Rules a candidate must keep"
        echo
        if [ "$nn" = 01 ]; then
            cat <<'EOF'
1. **Same interface.** Keep `main` (under `#ifndef VECTOR_ADD_NO_MAIN`) with its flags and table, and the
   three functions with C linkage that the test suite calls: `vector_add_version_count`,
   `vector_add_version_name`, `vector_add_run` (same signatures). Keep the existing versions' names and
   numbers; new versions go at the end.
2. **Same results.** Every version must produce c = a + b bit for bit; the output is poisoned with NaN
   before every run, so every element must be written.
3. **Honest timing.** Keep the CUDA-event timing and the two columns (kernel only, with transfers).
4. **One file.** CUDA runtime, cuRAND and the headers in `common/` only (`check.h`, `device.h`,
   `report.h`, as the file includes them); it must build with `nvcc -O3 -std=c++17` in this repository.
EOF
        else
            local exports="\`train_regression\` and \`REGRESSION_VARIANTS\`"
            [ "$trainer" = mnist ] && exports="\`train_mnist\`, \`MNIST_VARIANTS\` and \`MNIST_PRECISIONS\`"
            cat <<EOF
1. **Same interface.** Export with C linkage what \`common/trainer.h\` (below) declares: $exports;
   \`#include "trainer.h"\` (it makes them \`extern "C"\`). The first variant is the default and the one
   timed; every variant and precision you list is tested. No \`main\`. Make every other function and
   kernel \`static\` or give it a name of your own (the file is linked with the stage's other trainer).
2. **Same results within tolerance.** A GPU suite (\`tests/gpu/test_stage.c\`) compares every variant
   and precision with a double-precision CPU reference trained on the same data, initial parameters
   and batch order, with the tolerances below. Outputs are filled with NaN before each call: write
   every output; NaN or Inf anywhere fails.
3. **Same work.** Same epochs, steps, batch order, learning rate and loss; nothing skipped or reused
   across calls; every reported loss computed from the parameters of its own epoch or step.
4. **Honest timing.** Keep the \`TrainClock\` calls (\`common/timing.h\`): e2e from the training data in host
   memory to the trained parameters in host memory, loop from the data on the device. Only set-up a
   real program does once (allocations, handles, plans, graph instantiation) may go before
   \`train_clock_e2e_start\`; it is reported as \`setup_ms\`. \`--breakdown\` must still fill \`phase_ms\`.
5. **One file.** CUDA runtime, cuBLAS, cuBLASLt, cuDNN, cuRAND and the headers in \`common/\` only;
   it must build with \`nvcc -O3 -std=c++17\` as part of this repository.
EOF
        fi
        echo
        echo "## How the answer is checked"
        echo
        cat <<EOF
Save the answer as a file and run, on the GPU machine:

    make stage $n try FILE=path/to/$(basename "$start")

\`try\` compiles it in place of stage $nn's file, checks that it exports what the drivers need, runs the
GPU suite on it, and only if it passes times it against stage $nn's own file with the same flags. Its
last line is the verdict: \`try: PASS\` with the relative speed, or \`try: FAIL\` with why.
EOF
        if [ -n "$prev" ]; then
            echo
            echo "\`make stage ${prev#0} try FILE=path/to/$trainer.cu\` times the same answer against the starting"
            echo "file, stage $prev: that ratio is the one the prediction is about."
        fi
        echo
        if [ "$nn" != 01 ]; then
            echo "## The interface: common/trainer.h"
            echo
            echo '````c'
            trainer_h_part "$trainer"
            echo '````'
            echo
            echo "## Helpers: common/timing.h, common/check.h, common/host.h (their usage)"
            echo
            helpers_usage
            echo
            echo "## The tolerances of the test suite (tests/gpu/test_stage.c)"
            echo
            echo '````c'
            tolerances_part "$trainer"
            echo '````'
            echo
        fi
        echo "## The starting code: $start"
        echo
        case $form in
        lean) echo "Whole-line comments are left out to keep this prompt under $((PROMPT_LIMIT / 1024)) KB; the repository's file has them." && echo ;;
        bare) echo "Comments are left out to keep this prompt under $((PROMPT_LIMIT / 1024)) KB; the repository's file has them." && echo ;;
        esac
        fence cuda "$shown"
        echo
        echo "## Measured: the starting code"
        echo
        echo "### Result rows of stage ${prev:-$nn} in results/ (the newest of each configuration)"
        echo
        local csvs
        csvs=$(set +f; for f in results/*.csv; do case $f in *-curves.csv | *-breakdown.csv) ;; *) [ -f "$f" ] && echo "$f" ;; esac; done)
        if [ -n "$csvs" ]; then
            # shellcheck disable=SC2086
            awk -v stage="${prev:-$nn}" -v mode=results -f common/csv.awk -f common/try_report.awk $csvs |
                awk -v t="$trainer" -v nn="$nn" 'nn == "01" || !/^\| / { print; next }
                    { split($0, cell, "|"); gsub(/ /, "", cell[3]) } cell[3] == t || cell[3] == "trainer" || cell[3] ~ /^-+$/'
        else
            echo "None yet (\`make bench\` on a GPU machine writes them)."
        fi
        echo
        echo "### This run"
        echo
        if [ "$have_gpu" != 1 ]; then
            echo "No GPU was visible when this prompt was written, so nothing was measured here: run"
            echo "\`make stage $n prompt\` on the GPU machine for the breakdown and the Nsight Compute summary."
        elif [ -z "$measured" ]; then
            echo "Left out to keep this prompt under $((PROMPT_LIMIT / 1024)) KB: run \`make stage ${prev#0} run TRAINER=$trainer ARGS=--breakdown\`"
            echo "and \`make stage ${prev#0} profile TRAINER=$trainer\` for them."
        else
            cat "$measured"
        fi
    } >"$out"
    [ "$form" = whole ] || rm -f "$shown"
}

# prompt_measure FILE: this run's measurements of the starting code ($trainer of stage ${prev:-$nn}), capped
prompt_measure() {
    local from=${prev:-$nn}
    {
        if [ "$nn" = 01 ]; then
            echo '```'
            # shellcheck disable=SC2086  # ARGS is a list of flags
            "$build/01/vector_add" --repeat 5 ${TRY_ARGS:-} 2>&1 | tail -n 30
            echo '```'
        else
            echo "\`$build/$from/$trainer --quiet --breakdown ${TRY_ARGS:-}\` (each phase synchronizes, so the total grows):"
            echo
            echo '```'
            # shellcheck disable=SC2086
            "$build/$from/$trainer" --quiet --breakdown ${TRY_ARGS:-} 2>&1 | tail -n 12
            echo '```'
            echo
            if command -v ncu >/dev/null 2>&1; then
                echo "Nsight Compute (\`make stage ${from#0} profile TRAINER=$trainer\`; reading it: docs/PROFILING.md):"
                echo
                echo '```'
                "$TRY_MAKE" --no-print-directory stage-profile NN="$from" TRAINER="$trainer" 2>&1 | tail -n 14
                echo '```'
            else
                echo "ncu was not available on this machine."
            fi
        fi
    } >"$1"
}

prompt() {
    local t targets
    mkdir -p "$build/prompt"
    if [ "$nn" = 01 ]; then
        targets=vector_add
    else
        targets=
        for t in ${TRY_TRAINER:-regression mnist}; do
            case $t in regression | mnist) targets="$targets $t" ;; *) die "TRAINER=$t: valid are regression, mnist" ;; esac
        done
        [ -n "$targets" ] || targets="regression mnist"
    fi
    # the stage the code starts from: the one before (stage 02 and 01: their own file)
    prev=
    [ "$nn" = 01 ] || [ "$nn" = 02 ] || prev=$(printf '%02d' $((10#$nn - 1)))
    local from_dir=$stage_dir
    [ -z "$prev" ] || from_dir=$(stage_folder "$prev")
    have_gpu=${TRY_HAVE_GPU:-0}
    device="no GPU (none was visible when this prompt was written)"
    [ "$have_gpu" = 1 ] && device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
    commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
    idea=$(awk -F'\t' -v s="$nn" '$1 == s { print $3 }' "$ideas_file")

    local out measured size form
    for trainer in $targets; do
        if [ "$nn" = 01 ]; then
            start=01-vector-add/vector_add.cu out=$build/prompt/stage01.md
        else
            start=$from_dir/$trainer.cu out=$build/prompt/stage$nn-$trainer.md
        fi
        measured=
        if [ "$have_gpu" = 1 ]; then
            if [ "$nn" = 01 ]; then build_stage "$build/01/vector_add"; else build_stage "$build/${prev:-$nn}/$trainer"; fi
            [ "$trainer" != mnist ] || [ -f data/mnist/train-images-idx3-ubyte ] || "$TRY_MAKE" --no-print-directory data || exit 3
            measured=$build/prompt/.measured-$nn-$trainer
            prompt_measure "$measured"
        fi
        for form in whole lean bare unmeasured; do
            if [ "$form" = unmeasured ]; then form=bare measured=; fi
            prompt_write "$out" "$form" "$measured"
            size=$(wc -c <"$out")
            [ "$size" -lt "$PROMPT_LIMIT" ] && break
        done
        rm -f "$build/prompt/.measured-$nn-$trainer"
        if [ "$size" -ge "$PROMPT_LIMIT" ]; then
            rm -f "$out"
            die "the stage $nn prompt for $trainer would be $size bytes, over the limit of $PROMPT_LIMIT even without comments and measurements: shorten $start"
        fi
        local note=
        [ "$form" = lean ] && note=", whole-line comments left out"
        [ "$form" = bare ] && note=", comments left out"
        [ "$have_gpu" = 1 ] && [ -z "$measured" ] && note="$note, this run's measurements left out"
        echo "wrote $out ($size bytes, $(wc -l <"$out") lines; starting code: $start$note)"
    done
    echo "give one to an assistant or a student; the answer goes back through:"
    for trainer in $targets; do echo "    make stage $n try FILE=path/to/$trainer.cu"; done
}

case $cmd in
try) try_file "${3:-}" ;;
exercise) exercise ;;
prompt) prompt ;;
*) die "usage: common/try.sh try|exercise|prompt NN [FILE] (run through make stage N try|exercise|prompt)" ;;
esac
