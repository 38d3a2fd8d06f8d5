#!/usr/bin/env bash
# tests/run_all.sh test|check BUILD "STAGES" ["LADDER_TESTS"]: the suites of `make test` or `make check`, one line
# each as it finishes (so a slow suite never hides the others' lines), and one closing tally line. A suite's whole
# output is shown only when it fails (VERBOSE=1: always); a suite that checked nothing and skipped something (a GPU
# suite without a GPU) says `skipped`.
#   test:  the CPU suites (and the exercises' CPU checks, tests/exercise/), the command-line contract, citations,
#          history, README words, TEACHING's exercise names, the bench tables, the profile summary, and the GPU suites
#          (each stage's and the kernel ladders' LADDER_TESTS), which skip without a GPU; the GPU suites run one after
#          another, beside the others;
#   check: the slow smoke suites of the tools: try, grading, prompts, loop rounds, exercises, student copies, sanitize's
#          verdicts, the mutants; one at a time, since several of them build into BUILD.
set -u
mode=$1 build=$2 stages=$3 ladder_tests=${4:-}
last_stage=${stages##* }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
names=() tallies=() reported=()
# shellcheck source=tests/stand_in_libraries.sh
source "$(dirname "$0")/stand_in_libraries.sh"
if [ "$mode" = test ]; then max_jobs=$(nproc 2>/dev/null || echo 2); else max_jobs=1; fi

# run_one I COMMAND...: COMMAND's output in $dir/I.log (a Criterion suite's TAP report in $dir/I.tap), its exit
# status and seconds in $dir/I.status, which appears whole (renamed into place) once the suite is done
run_one() {
    local i=$1 start=$SECONDS
    shift
    [ "${tallies[$i]}" != criterion ] || set -- "$@" --tap="$dir/$i.tap"
    "$@" >"$dir/$i.log" 2>&1 </dev/null
    echo "$? $((SECONDS - start))" >"$dir/$i.status.part" && mv "$dir/$i.status.part" "$dir/$i.status"
}

# running_jobs: how many background jobs are still running
running_jobs() { jobs -rp | wc -l; }

# suite NAME TALLY COMMAND...: start COMMAND in the background, at most max_jobs at once. TALLY says how its
# counts are read: criterion, unittest, or a script's line prefix.
suite() {
    local i=${#names[@]}
    names+=("$1")
    tallies+=("$2")
    shift 2
    while [ "$(running_jobs)" -ge "$max_jobs" ]; do report_finished; sleep 0.2; done
    run_one "$i" "$@" &
}

# gpu_suites SUITE...: the GPU suites, one after another in one background job (Criterion already runs each
# suite's tests on every core, and several suites at once would share out the GPU's memory). Without an NVIDIA
# driver, where every one of their tests skips at its first line, they load stand-ins for cuBLAS, cuBLASLt and cuDNN
# (tests/stand_in_libraries.sh); each test still runs in a process of its own and skips on its own.
gpu_suites() {
    local first=${#names[@]} s stubs=
    for s in "$@"; do
        names+=("GPU suite $s")
        tallies+=(criterion)
    done
    if no_nvidia_driver; then stubs=$(stand_in_libraries "$dir/stubs" "$@"); fi
    (
        [ -z "$stubs" ] || export LD_LIBRARY_PATH=$stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        i=$first
        for s in "$@"; do run_one $((i++)) "$s"; done
    ) &
}

passed=0 failed=0 skipped=0 status=0 no_gpu=0
count() { sed -n "$1" <<<"$2" | head -n1; }

# tally LOG TALLY: add a suite's counts to the totals. A script's closing line is "PREFIX: N passed, N failed[, N
# skipped]"; Criterion's TAP report has "ok - NAME", "ok - NAME  # SKIP why" and "not ok - NAME" (a crash too);
# none (no "1..N" plan in it) means the suite died.
tally() {
    local log=$1 kind=$2 line n
    case $kind in
    criterion)
        if ! grep -q '^1\.\.' "${log%.log}.tap" 2>/dev/null; then failed=$((failed + 1)); return; fi
        local p f s
        read -r p f s < <(awk '/^ok .*# SKIP/ { s++; next } /^ok / { p++ } /^not ok / { f++ } END { print p + 0, f + 0, s + 0 }' "${log%.log}.tap")
        passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s)) ;;
    unittest)
        n=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\}.*/\1/p' "$log" | tail -n1)
        if grep -q "^OK" "$log"; then passed=$((passed + ${n:-0})); else failed=$((failed + 1)); fi ;;
    *)
        line=$(grep -a "^$kind: [0-9]* passed" "$log" | tail -n1)
        n=$(count "s/$kind: \([0-9]*\) passed.*/\1/p" "$line"); passed=$((passed + ${n:-0}))
        n=$(count 's/.* \([0-9]*\) failed.*/\1/p' "$line"); failed=$((failed + ${n:-1}))
        n=$(count 's/.* \([0-9]*\) skipped.*/\1/p' "$line"); skipped=$((skipped + ${n:-0})) ;;
    esac
}

# report I: suite I's line, "ok", "skipped" (it checked nothing and skipped something) or, with its whole output,
# "== NAME (exit N, S s)"; its counts go into the totals. A runner killed before it wrote a status counts as failed.
report() {
    local i=$1 log="$dir/$i.log" code=1 seconds=0 before_p=$passed before_f=$failed before_s=$skipped verdict=ok
    [ -e "$dir/$i.status" ] && read -r code seconds <"$dir/$i.status"
    tally "$log" "${tallies[$i]}"
    if [ "$code" -eq 0 ] && [ "$failed" -eq "$before_f" ] && [ "${VERBOSE:-0}" != 1 ]; then
        [ "$passed" -eq "$before_p" ] && [ "$skipped" -gt "$before_s" ] && verdict=skipped
        printf '%-7s %-62s %3d s\n' "$verdict" "${names[$i]}" "$seconds"
        # what was not checked and why, and the fallbacks a GPU without a feature ran instead (common/gates.h);
        # a machine without a GPU is said once, at the end
        grep -a "tests SKIPPED\|^not checked: \|^note: " "$log" | grep -v "no CUDA device" | sort -u | sed 's/^/        /'
        grep -aq "SKIPPED.*no CUDA device" "$log" && no_gpu=$((no_gpu + 1))
    else
        echo "== ${names[$i]} (exit $code, $seconds s)"
        cat "$log"
    fi
    [ "$code" -eq 0 ] || status=1
}

# report_finished [all]: report every suite that has finished since the last call (all: every one not reported yet)
report_finished() {
    local i
    for i in "${!names[@]}"; do
        [ -z "${reported[$i]:-}" ] && { [ -e "$dir/$i.status" ] || [ "${1:-}" = all ]; } || continue
        reported[$i]=1
        report "$i"
    done
}

if [ "$mode" = test ]; then
    gpu_suites "$build/01/test_vector_add" $(for s in $stages; do echo "$build/$s/test_gpu"; done) $ladder_tests
    suite "CPU suites (common/)" criterion "$build/tests/test_cpu"
    # the CPU checks of the exercises in common/ and in kernel ladders (tests/exercise/): in a student copy, only once
    # the student's file has no TODO(exercise) marker left (until then `make stage N exercise` says what is left)
    for t in "$build"/tests/exercise/test_*; do
        [ -x "$t" ] || continue
        file=common/${t##*/test_}.c
        if [[ $t == *_ladder ]]; then  # a kernel ladder's: NN-*/NAME_ladder.cu
            file=
            for f in 0[1-9]-*/"${t##*/test_}.cu"; do [ -f "$f" ] && file=$f && break; done
            [ -n "$file" ] || continue
        fi
        if [ -f STUDENT.md ] && grep -q '// TODO(exercise)' "$file" 2>/dev/null; then
            printf '%-7s %-62s\n' skipped "exercise CPU check: $file"
            echo "        not checked: $file is an exercise of this copy, not written yet"
            skipped=$((skipped + 1))
            continue
        fi
        suite "exercise CPU check: $file" criterion "$t"
    done
    suite "command-line contract (stage $last_stage)" cli bash tests/cli_smoke.sh "$build/$last_stage"
    suite "citations (every path a comment or README cites exists)" citations bash tests/citations.sh
    suite "prose describes the code as it is (no issue numbers, no change log)" history bash tests/history_smoke.sh
    suite "READMEs short enough to read (words of prose)" words bash tests/readme_words.sh
    suite "TEACHING.md names exercises by region or title, each one there" teaching bash tests/teaching_refs.sh
    if command -v python3 >/dev/null; then
        suite "bench table generator (Python, stdlib only)" unittest python3 -m unittest discover -s tests/bench
    else
        echo "skipped bench table generator: no python3"; skipped=$((skipped + 1))
    fi
    suite "profile summary (ncu raw CSV, real H100 exports)" profile bash tests/profile_summary.sh
else
    suite "try and exercises (CPU side)" try bash tests/try_smoke.sh
    suite "make grade on a folder of fixtures (CPU side)" grade bash tests/grade_smoke.sh
    suite "prompts: size, sections, checklists from the code" prompt bash tests/prompt_smoke.sh
    suite "loop rounds: prompts, records, refusals (fixtures)" loop bash tests/loop_smoke.sh
    suite "exercise regions: the cutter and make student" exercise bash tests/exercise_smoke.sh
    suite "student copies: whole, no answer left in them (every UPTO)" student bash tests/student_smoke.sh
    suite "make sanitize's verdicts (a stand-in compute-sanitizer)" sanitize bash tests/sanitize_smoke.sh "$build"
    # the deliberate bugs of tests/mutants/ still apply and compile (make test-mutants runs them on a GPU)
    suite "mutants apply and compile (stage $last_stage)" mutants \
        env NVCC="${NVCC:-nvcc}" bash tests/mutants.sh "$build" "$last_stage" --compile-only
    for ladder_dir in 0[2-9]-*/; do  # and those of a stage of kernel ladders only (its ladder's bugs)
        ladder_dir=${ladder_dir%/}
        [ -f "$ladder_dir/mnist.cu" ] || ! compgen -G "$ladder_dir/*_ladder.cu" >/dev/null && continue
        suite "mutants apply and compile (stage ${ladder_dir%%-*})" mutants \
            env NVCC="${NVCC:-nvcc}" bash tests/mutants.sh "$build" "${ladder_dir%%-*}" --compile-only
    done
fi
# the GPU suites' job finishes only with its last suite: poll, so that each line comes when its suite is done
while [ "$(running_jobs)" -gt 0 ]; do report_finished; sleep 0.2; done
wait
report_finished all

[ "$no_gpu" -eq 0 ] || echo "        $no_gpu GPU suites skipped every test: no CUDA device here (they run where nvidia-smi lists a GPU)"
[ "$failed" -eq 0 ] || status=1
echo "$mode: $passed passed, $failed failed, $skipped skipped"
exit $status
