#!/usr/bin/env bash
# tests/mutants.sh BUILD NN [--compile-only]: proves the GPU suite bites. Each tests/mutants/*.sed is a
# deliberate bug; it is applied to one trainer file of stage NN, the suite is linked against the broken
# trainer, and it must FAIL, in every precision the stage offers for an MNIST bug (TEST_PRECISION), or in
# those its `# precisions:` line names (a bug in code that only they run). A `# stages:` line limits a bug to
# the stages that have its code. A bug in a kernel ladder (`# file: NAME_ladder.cu`) is linked, compiled with
# -DLADDER_NO_MAIN, into the ladder's own test, tests/gpu/test_NAME_ladder.c, which must FAIL.
#   --compile-only  (make test, no GPU needed): every mutant still applies (changes its file) and the
#                   broken file compiles; nothing is run
# Environment from make: NVCC, NVCCFLAGS, LDFLAGS, LDLIBS, CRITERION_LIBS. Exit 0 only when every mutant
# applied, compiled and (unless --compile-only) was caught.
set -u
build=$1 nn=$2 mode=${3:-run}
stage_dir=$(ls -d "$nn"-*/ 2>/dev/null | head -n1); stage_dir=${stage_dir%/}
[ -n "$stage_dir" ] || { echo "error: no stage folder $nn-*" >&2; exit 2; }
compiled=0 caught=0 survived=0 broken=0
for mutant in tests/mutants/*.sed; do
    name=$(basename "$mutant" .sed)
    file=$(sed -n 's/^# file: *//p' "$mutant")
    what=$(sed -n 's/^# what: *//p' "$mutant")
    # a bug in code that only some stages have (stage 08's persistent kernel) names them
    stages=$(sed -n 's/^# stages: *//p' "$mutant")
    case " ${stages:-$nn} " in *" $nn "*) ;; *) echo "skipped  $name: stage $nn has no such code (# stages: $stages)"; continue ;; esac
    [ -f "$stage_dir/$file" ] || { echo "skipped  $name: stage $nn has no $file"; continue; }
    dir=$build/mutants/$nn/$name
    mkdir -p "$dir"
    sed -f "$mutant" "$stage_dir/$file" >"$dir/$file"
    if cmp -s "$stage_dir/$file" "$dir/$file"; then
        echo "BROKEN   $name: no longer applies to $stage_dir/$file (update the .sed to the file's code)"
        broken=$((broken + 1)); continue
    fi
    ladder=; case $file in *_ladder.cu) ladder=-DLADDER_NO_MAIN ;; esac
    if [ "$mode" = --compile-only ]; then
        if "$NVCC" -std=c++17 -Icommon -I"$stage_dir" $ladder -arch=sm_90 -c "$dir/$file" -o "$dir/${file%.cu}.o" \
            2>"$dir/compile.log"; then
            compiled=$((compiled + 1)); echo "compiles $name: $what"
        else
            broken=$((broken + 1)); echo "BROKEN   $name: does not compile ($dir/compile.log)"
        fi
        continue
    fi
    other=regression; [ "$file" = regression.cu ] && other=mnist
    if [ -n "$ladder" ]; then suite="$build/tests/gpu/test_${file%.cu}.o"; others=
    else suite="$build/tests/gpu/test_stage.o"; others="$build/$nn/$other.o"; fi
    if ! "$NVCC" $NVCCFLAGS -I"$stage_dir" $ladder -c "$dir/$file" -o "$dir/${file%.cu}.o" 2>"$dir/compile.log" ||
       ! "$NVCC" "$suite" "$dir/${file%.cu}.o" $others "$build/common/libcommon.a" \
            -o "$dir/test_gpu" $LDFLAGS $CRITERION_LIBS $LDLIBS 2>>"$dir/compile.log"; then
        broken=$((broken + 1)); echo "BROKEN   $name: does not build ($dir/compile.log)"; continue
    fi
    precisions=all
    [ "$file" = mnist.cu ] && precisions=$("$build/$nn/mnist" --list-variants | sed -n 's/^precision //p')
    # a bug in code that only some precisions run (stage 08's persistent kernel: fp32) names them
    only=$(sed -n 's/^# precisions: *//p' "$mutant")
    [ -z "$only" ] || precisions=$(for p in $precisions; do case " $only " in *" $p "*) echo "$p" ;; esac; done)
    if [ -z "$precisions" ]; then  # a name the stage does not offer: the mutant would run nowhere
        echo "BROKEN   $name: no precision of stage $nn is in its '# precisions: $only' line"
        broken=$((broken + 1)); continue
    fi
    for p in $precisions; do
        label="$name${p:+ ($p)}"; [ "$p" = all ] && label=$name
        TEST_PRECISION=$([ "$p" = all ] || echo "$p") timeout 600 "$dir/test_gpu" --fail-fast >"$dir/run-$p.log" 2>&1
        status=$?
        if grep -q "SKIPPED (no CUDA device)" "$dir/run-$p.log"; then
            echo "error: no CUDA device: make test-mutants needs a GPU (make test only checks that they compile)" >&2; exit 4
        elif [ $status -ne 0 ]; then
            caught=$((caught + 1))  # with the first failed check's message, as the suite printed it
            echo "caught   $label: $(grep -a -A4 'Assertion Failed' "$dir/run-$p.log" |
                sed -n 's/^\[----\]   *\([a-z].*\)/\1/p' | head -n1)"
        else
            survived=$((survived + 1)); echo "SURVIVED $label: $what (the suite passed: $dir/run-$p.log)"
        fi
    done
done
if [ "$mode" = --compile-only ]; then
    echo "mutants: $compiled passed, $broken failed (each applies to stage $nn and compiles; make test-mutants runs them)"
    [ $broken -eq 0 ]; exit
fi
echo "mutants: $caught caught, $survived survived, $broken broken (stage $nn)"
[ $survived -eq 0 ] && [ $broken -eq 0 ]
