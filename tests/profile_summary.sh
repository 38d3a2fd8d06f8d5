#!/usr/bin/env bash
# tests/profile_summary.sh: the per-kernel summary of `make stage N profile` (bench/report_rows.py profile),
# read from raw CSV exports of a real H100 run, trimmed: tests/bench/fixtures/ncu-raw-02-regression.csv (times
# in ms, grid sizes with thousands separators, no dram column: the SpeedOfLight section did not collect
# it) and tests/bench/fixtures/ncu-raw-06-mnist.csv (cuBLAS kernels with template arguments). Variants of the
# first, made here, check other time units, a dram column in another position, a missing time column,
# and the refusals. No GPU, no ncu. The last line is "profile: N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
work=build/profile-smoke
rm -rf "$work"
mkdir -p "$work"
passed=0 failed=0
regression=tests/bench/fixtures/ncu-raw-02-regression.csv
mnist=tests/bench/fixtures/ncu-raw-06-mnist.csv

summarize() {  # summarize CSV OUT: the summary of CSV into OUT (stderr too); returns the report's status
    "${PYTHON:-python3}" bench/report_rows.py profile "$1" >"$2" 2>&1
}

# expect DESCRIPTION SUMMARY KERNEL GRID COLUMN WANT: in SUMMARY, the line of KERNEL (last field) launched
# as GRID (field 6) has WANT in field COLUMN (1 share, 2 launches, 3 median µs, 4 min, 5 max, 7 dram %, 8 sm %)
expect() {
    local got
    got=$(awk -v k="$3" -v g="$4" -v c="$5" '$NF == k && $6 == g { print $c; exit }' "$2")
    if [ "$got" = "$6" ]; then
        echo "ok    $1"; passed=$((passed + 1))
    else
        echo "FAIL  $1: $3 $4 column $5 is '$got', want '$6'"; failed=$((failed + 1))
    fi
}

check() {  # check DESCRIPTION COMMAND...: COMMAND must succeed
    local description=$1
    shift
    if "$@"; then echo "ok    $description"; passed=$((passed + 1)); else echo "FAIL  $description"; failed=$((failed + 1)); fi
}

# --- the export as ncu wrote it: times in ms, grid sizes "15,625", no dram column
summarize "$regression" "$work/ms.txt"
check "a real export is summarized (exit 0)" test $? -eq 0
expect "ms are converted to µs" "$work/ms.txt" gradient_kernel 15625x256 3 14039
expect "thousands separators are stripped (grid 3,907)" "$work/ms.txt" predict_kernel 3907x256 2 3
expect "median of an odd count" "$work/ms.txt" predict_kernel 3907x256 3 5.38
expect "minimum" "$work/ms.txt" predict_kernel 3907x256 4 5.34
expect "maximum" "$work/ms.txt" predict_kernel 3907x256 5 5.60
expect "median of an even count: the mean of the middle two" "$work/ms.txt" sgd_update_kernel 1x1 3 2.93
expect "one line per launch shape: the test-set call apart" "$work/ms.txt" squared_error_kernel 3907x256 3 1757
expect "a missing dram column prints -" "$work/ms.txt" gradient_kernel 15625x256 7 -
expect "sm % is the median" "$work/ms.txt" predict_kernel 15625x256 8 34.7
expect "share of the summed time" "$work/ms.txt" gradient_kernel 15625x256 1 59.2%
check "lines sorted by summed time, largest first" \
    test "$(awk 'NR == 2 { print $NF } NR == 3 { print $NF }' "$work/ms.txt" | tr '\n' ' ')" = "gradient_kernel squared_error_kernel "
check "the closing line counts every launch" grep -q "^14 launches, 47442 µs in all$" "$work/ms.txt"

# --- the same numbers in other units, and in "msecond" (the unit names of older ncu versions)
sed '2s/"ms"/"us"/' "$regression" >"$work/us.csv"
summarize "$work/us.csv" "$work/us.txt"
expect "us stay µs" "$work/us.txt" gradient_kernel 15625x256 3 14.0
sed '2s/"ms"/"s"/' "$regression" >"$work/s.csv"
summarize "$work/s.csv" "$work/s.txt"
expect "s are converted to µs" "$work/s.txt" gradient_kernel 15625x256 3 14039072
sed '2s/"ms"/"msecond"/' "$regression" >"$work/msecond.csv"
summarize "$work/msecond.csv" "$work/msecond.txt"
expect "older unit names are read (msecond)" "$work/msecond.txt" gradient_kernel 15625x256 3 14039

# --- a dram column where ncu would put it (before gpu__time_duration: alphabetical), values with separators
sed -E '1s/"gpu__time_duration/"dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration/;
        2s/"ms"/"%","ms"/; 3,$s/^(("[^"]*",){11})/\1"1,2.5",/' "$regression" >"$work/dram.csv"
summarize "$work/dram.csv" "$work/dram.txt"
expect "a dram column is found by its name" "$work/dram.txt" gradient_kernel 15625x256 7 12.5
expect "columns after it are still found by name" "$work/dram.txt" gradient_kernel 15625x256 3 14039

# --- no time column: times and shares print -, nothing crashes
# (split at '","', not ',': every field is quoted and the kernel names hold commas)
awk -F'","' '{ line = $1; for (i = 2; i <= NF; i++) if (i != 12) line = line "\",\"" $i; print line }' "$regression" >"$work/notime.csv"
summarize "$work/notime.csv" "$work/notime.txt"
check "a missing time column: exit 0" test $? -eq 0
expect "a missing time column prints - for the median" "$work/notime.txt" gradient_kernel 15625x256 3 -
expect "and for the share" "$work/notime.txt" gradient_kernel 15625x256 1 -

# --- kernel names: no "void", template arguments or parameter list; cutlass's Kernel2<NAME> is NAME
summarize "$mnist" "$work/names.txt"
expect "Kernel2<cutlass_...> is named by its argument" "$work/names.txt" cutlass_80_simt_sgemm_128x32_8x5_nn_align1 48x128 2 1
expect "a namespace stays, template arguments go" "$work/names.txt" cublasLt::splitKreduce_kernel 32x512 2 1
expect "void and a template of types go" "$work/names.txt" softmax_fw_small_kernel 8x128 2 1
expect "a name without parameters stays whole" "$work/names.txt" \
    sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas 100x64 2 1
expect "separators in a six-digit grid" "$work/names.txt" scale_pixels_kernel 183750x256 3 176
check "no name keeps a parenthesis, angle bracket or 'void '" \
    test -z "$(awk 'NR > 1 && !/ in all$/ && ($NF ~ /[()<>]/ || /void /)' "$work/names.txt")"

# --- refusals: one error line, exit 2
printf 'a,b\n1,2\n3,4\n' >"$work/other.csv"
summarize "$work/other.csv" "$work/other.txt"
check "a CSV that is no ncu export: exit 2" test $? -eq 2
check "... and says so" grep -q '^error: .*not an ncu raw CSV export' "$work/other.txt"
sed '2s/"ms"/"fortnights"/' "$regression" >"$work/unit.csv"
summarize "$work/unit.csv" "$work/unit.txt"
check "an unknown time unit: exit 2" test $? -eq 2
check "... and names it" grep -q "^error: .*unknown time unit 'fortnights'" "$work/unit.txt"

echo "profile: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
