#!/usr/bin/env bash
# tests/cli_smoke.sh: the command-line contract of the drivers and the Makefile, checked end to end.
# Every bad input must give exactly one line on stderr and its documented exit code (common/exit_codes.h).
# Run from the repository root: bash tests/cli_smoke.sh build/02   (make test does this)
set -u
stage_build=${1:-build/02}
passed=0 failed=0 skipped=0

# expect NAME CODE PATTERN -- COMMAND...: exit code CODE, and (for CODE != 0) one stderr line matching PATTERN
expect() {
    local name=$1 code=$2 pattern=$3; shift 4
    local err; err=$(mktemp)
    "$@" >/dev/null 2>"$err"; local got=$?
    local lines; lines=$(wc -l <"$err")
    if [ "$got" -ne "$code" ]; then
        echo "[FAIL] $name: exit $got, expected $code ($(head -c 300 "$err"))"; failed=$((failed + 1))
    elif [ "$code" -ne 0 ] && { [ "$lines" -ne 1 ] || ! grep -qiE "$pattern" "$err"; }; then
        echo "[FAIL] $name: expected one stderr line matching /$pattern/, got $lines: $(head -c 300 "$err")"; failed=$((failed + 1))
    else
        echo "[PASS] $name"; passed=$((passed + 1))
    fi
    rm -f "$err"
}

expect "regression: unknown flag"          2 "unknown"          -- "$stage_build/regression" --frobnicate
expect "regression: zero epochs"           2 "epochs"           -- "$stage_build/regression" --epochs 0
expect "regression: garbage lr"            2 "lr"               -- "$stage_build/regression" --lr 0.1x
expect "regression: MNIST flag"            2 "hidden"           -- "$stage_build/regression" --hidden 128
expect "regression: too few points"        2 "points"           -- "$stage_build/regression" --points 3
expect "mnist: bad hidden list"            2 "hidden"           -- "$stage_build/mnist" --hidden 128,
expect "mnist: unknown variant"            2 "variant"          -- "$stage_build/mnist" --variant nope
expect "mnist: missing data"               3 "make data"        -- "$stage_build/mnist" --data /nonexistent/mnist
expect "regression: --help"                0 ""                 -- "$stage_build/regression" --help
expect "regression: CPU reference trains"  0 ""                 -- "$stage_build/regression" --reference --points 20000 --quiet
expect "make: unknown stage"               2 "unknown stage"    -- make --no-print-directory stage 9
expect "make: unknown verb"                2 "unknown verb"     -- make --no-print-directory stage 2 frobnicate

if nvidia-smi -L >/dev/null 2>&1; then
    echo "[SKIP] no-GPU message: a GPU is visible here"; skipped=$((skipped + 1))
else
    expect "regression: no CUDA device"    4 "no CUDA device"   -- "$stage_build/regression" --points 20000
    expect "mnist: no CUDA device"         4 "no CUDA device"   -- "$stage_build/mnist" --epochs 1
fi

echo "cli: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
