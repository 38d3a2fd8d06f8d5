#!/usr/bin/env bash
# tests/run_all.sh test|check BUILD "STAGES" ["LADDER_TESTS"]: the suites of `make test` or `make check`, one line
# each, and one closing tally line. A suite's whole output is shown only when it fails (VERBOSE=1: always).
#   test:  the CPU suites, the command-line contract, citations, the bench tables, the profile summary, and
#          the GPU suites (each stage's and the kernel ladders' LADDER_TESTS), which skip without a GPU;
#   check: the slow smoke suites of the tools: try, prompts, exercises, sanitize's verdicts, the mutants.
set -u
mode=$1 build=$2 stages=$3 ladder_tests=${4:-}
passed=0 failed=0 skipped=0 status=0
log=$(mktemp)

# tally_criterion: add a Criterion binary's "Synthesis" counts and its skip line to the tally
tally_criterion() {
    local synthesis skips
    synthesis=$(grep -a "Synthesis:" "$log" | tail -n1)
    passed=$((passed + $(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' <<<"$synthesis")))
    failed=$((failed + $(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' <<<"$synthesis")))
    failed=$((failed + $(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' <<<"$synthesis")))
    skips=$(grep -aoE "[0-9]+ (of [0-9]+ )?tests SKIPPED" "$log" | tail -n1 | cut -d' ' -f1)
    skipped=$((skipped + ${skips:-0}))
}

# tally_script PREFIX: add a script's closing "PREFIX: N passed, N failed[, N skipped]" line to the tally;
# no such line means the script died, which counts as a failure
tally_script() {
    local line count
    line=$(grep -a "^$1: [0-9]* passed" "$log" | tail -n1)
    count=$(sed -n "s/$1: \([0-9]*\) passed.*/\1/p" <<<"$line")
    passed=$((passed + ${count:-0}))
    count=$(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$line")
    failed=$((failed + ${count:-1}))
    count=$(sed -n 's/.* \([0-9]*\) skipped.*/\1/p' <<<"$line")
    skipped=$((skipped + ${count:-0}))
}

run() {  # run NAME COMMAND...: one line, or the whole output when it fails; remember a failure
    local name=$1 start=$SECONDS code
    shift
    "$@" >"$log" 2>&1
    code=$?
    if [ "$code" -eq 0 ] && [ "${VERBOSE:-0}" != 1 ]; then
        printf 'ok    %-62s %3d s\n' "$name" $((SECONDS - start))
        # what was not checked and why, and the fallbacks a GPU without a feature ran instead (common/gates.h)
        grep -a "tests SKIPPED\|^not checked: \|^note: " "$log" | sort -u | sed 's/^/      /'
    else
        echo "== $name (exit $code)"
        cat "$log"
        [ "$code" -eq 0 ] || status=1
    fi
}

last_stage=${stages##* }
if [ "$mode" = test ]; then
run "CPU suites (common/)" "$build/tests/test_cpu"
tally_criterion

run "command-line contract (stage $last_stage)" bash tests/cli_smoke.sh "$build/$last_stage"
tally_script cli

run "citations (every path a comment or README cites exists)" bash tests/citations.sh
tally_script citations

if command -v python3 >/dev/null; then
    run "bench table generator (Python, stdlib only)" python3 -m unittest discover -s bench -p 'test_*.py'
    ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\}.*/\1/p' "$log" | tail -n1)
    if grep -q "^OK" "$log"; then passed=$((passed + ${ran:-0})); else failed=$((failed + 1)); fi
else
    echo "== bench table generator: SKIPPED (no python3)"; skipped=$((skipped + 1))
fi

run "profile summary (ncu raw CSV, real H100 exports)" bash tests/profile_summary.sh
tally_script profile

for suite in "$build/01/test_vector_add" $(for s in $stages; do echo "$build/$s/test_gpu"; done) $ladder_tests; do
    run "GPU suite $suite" "$suite"
    tally_criterion
done
else
run "try and exercises (CPU side)" bash tests/try_smoke.sh
tally_script try

run "prompts: size, sections, checklists from the code" bash tests/prompt_smoke.sh
tally_script prompt

run "exercise regions: the cutter and make student" bash tests/exercise_smoke.sh
tally_script exercise

run "make sanitize's verdicts (a stand-in compute-sanitizer)" bash tests/sanitize_smoke.sh "$build"
tally_script sanitize

# the deliberate bugs of tests/mutants/ still apply and compile (make test-mutants runs them on a GPU)
run "mutants apply and compile (stage $last_stage)" env NVCC="${NVCC:-nvcc}" bash tests/mutants.sh "$build" "$last_stage" --compile-only
tally_script mutants

fi

rm -f "$log"
[ "$failed" -eq 0 ] || status=1
echo "$mode: $passed passed, $failed failed, $skipped skipped"
exit $status
