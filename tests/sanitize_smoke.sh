#!/usr/bin/env bash
# tests/sanitize_smoke.sh [BUILD]: the verdicts and the table of `make stage N sanitize` (tools/robustness.mk),
# from tests/fake_sanitizer.sh instead of compute-sanitizer, so no GPU is needed. Stage 06 is the
# subject: every verdict appears once (see the fake's table). The last line is "sanitize: N passed,
# N failed".
set -u
build=${1:-build}
make=${MAKE:-make}
work=$build/sanitize-smoke
rm -rf "$work" "$work.calls"
passed=0 failed=0

check() {  # check DESCRIPTION PATTERN: PATTERN (grep -E) must match a line of the summary
    if grep -qE -- "$2" "$work/summary.txt" 2>/dev/null; then
        echo "ok    $1"; passed=$((passed + 1))
    else
        echo "FAIL  $1: no line matches '$2'"; failed=$((failed + 1))
    fi
}

# stage-sanitize NN=06 is what `make stage 6 sanitize` runs (called directly: make passes no -o down).
# -o: the stage's binaries are taken as they are, never built (the fake never runs them); DETECTED_ARCH
# stands in for a GPU.
$make --no-print-directory -o $build/06/regression -o $build/06/mnist stage-sanitize NN=06 \
    DETECTED_ARCH=fake COMPUTE_SANITIZER="$PWD/tests/fake_sanitizer.sh" \
    SAN_DIR="$work" SAN_MNIST_DATA="$work/no-data" SAN_RACECHECK_MNIST_DATA="$work/no-data-racecheck" SAN_TIMEOUT=1 \
    SAN_JOBS=8 FAKE_SANITIZER_CALLS="$work.calls" >"$work.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    echo "ok    a matrix with findings fails make (exit $rc)"; passed=$((passed + 1))
else
    echo "FAIL  a matrix with findings made make succeed"; failed=$((failed + 1))
fi
check "clean" "^06 +mnist +clean [0-9]+s"
# racecheck's MNIST runs take their own, smaller cut; the other tools the usual one
for tool in memcheck racecheck synccheck initcheck; do
    want="$work/no-data"; [ $tool != racecheck ] || want="$work/no-data-racecheck"
    if grep -q "^$tool .*/mnist .*--data $want\( \|$\)" "$work.calls" 2>/dev/null; then
        echo "ok    $tool's MNIST run reads $(basename "$want")"; passed=$((passed + 1))
    else
        echo "FAIL  $tool's MNIST run does not read $want: $(grep "^$tool .*/mnist" "$work.calls" 2>/dev/null)"; failed=$((failed + 1))
    fi
done
check "a run past SAN_TIMEOUT is TIMEOUT" "^06 +regression +TIMEOUT [0-9]+s"
check "hazards inside a library kernel only are counted and marked (library)" "^06 +mnist .* 2 errors \(library\) [0-9]+s"
check "an error in the stage's own kernel is not marked (library)" "^06 +mnist .* 1 errors [0-9]+s *$"
check "a program killed by a signal is KILLED" "^06 +mnist .* KILLED \(exit 9\) [0-9]+s"
check "a program that fails with nothing reported is FAILED" "^06 +regression .* FAILED \(exit 4\) [0-9]+s"
check "the (library) note" "^\(library\): every report"
check "the KILLED note" "^KILLED: most often the host's out-of-memory killer"
check "the totals" "^sanitize: 5 of 8 runs not clean"
if ls results/*-sanitize*.txt 2>/dev/null | xargs -r grep -l "fake compute-sanitizer" | grep -q .; then
    echo "FAIL  make stage N sanitize wrote to results/"; failed=$((failed + 1))
else
    echo "ok    make stage N sanitize leaves results/ alone"; passed=$((passed + 1))
fi
[ $failed -eq 0 ] || { echo "--- make's output:"; tail -n 30 "$work.log"; }
echo "sanitize: $passed passed, $failed failed"
[ $failed -eq 0 ]
