# tests/smoke_common.sh: sourced by the smoke suites of the tools (try, exercise, prompt, loop). Each check
# prints one line; ok and bad count them. bad shows the last log_tail lines (default 10) of $log, the check's
# output, where there is one.
passed=0 failed=0
ok() { echo "ok    $1"; passed=$((passed + 1)); }
bad() {
    echo "FAIL  $1"
    [ -s "$log" ] && sed 's/^/      | /' "$log" | tail -n "${log_tail:-10}"
    failed=$((failed + 1))
}
