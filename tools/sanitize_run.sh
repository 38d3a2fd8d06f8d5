#!/bin/sh
# tools/sanitize_run.sh STAGE TRAINER VARIANT PRECISION TOOL: one run of `make sanitize` (tools/robustness.mk, which
# exports the settings read here: BUILD, SAN_DIR, SAN_TIMEOUT, COMPUTE_SANITIZER, SAN_*_ARGS, SAN_*MNIST_DATA and
# SAN_FLAGS_<tool>). VARIANT and PRECISION: - for the default. It appends one line to $SAN_DIR/results: the stage,
# the row label, the tool, the seconds taken and the verdict:
#   clean; N errors / N warnings (racecheck's hazards of either kind), with " (library)" when every report is
#   inside a library's kernel; TIMEOUT; KILLED (exit N) when the program died of a signal; FAILED (exit N) when it
#   failed with nothing reported, or no sanitizer summary was written.
stage=$1 trainer=$2 variant=$3 precision=$4 tool=$5
bin=$BUILD/$stage/$trainer
case $trainer in
    regression) args=$SAN_REGRESSION_ARGS ;;
    mnist) data=$SAN_MNIST_DATA; [ "$tool" != racecheck ] || data=$SAN_RACECHECK_MNIST_DATA
        args="$SAN_MNIST_ARGS --data $data" ;;
    *) args=$SAN_VECTOR_ADD_ARGS ;;
esac
label=$trainer
[ "$variant" = - ] || { args="$args --variant $variant"; label="$label/$variant"; }
[ "$precision" = - ] || { args="$args --precision $precision"; label="$label/$precision"; }
eval "flags=\${SAN_FLAGS_$tool:-}"
log=$SAN_DIR/logs/$stage-$(echo "$label" | tr / -)-$tool
start=$(date +%s)
# shellcheck disable=SC2086 # flags and args are lists of words
timeout -k 10 "$SAN_TIMEOUT" "$COMPUTE_SANITIZER" --tool "$tool" $flags --log-file "$log.log" "$bin" $args \
    >"$log.out" 2>&1
rc=$?
secs=$(($(date +%s) - start))
errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$log.log" 2>/dev/null | tail -n 1)
warnings=0
races=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9][0-9]*\) errors*, \([0-9][0-9]*\) warnings*).*/\1 \2/p' "$log.log" 2>/dev/null | tail -n 1)
[ -z "$races" ] || { errors=${races% *}; warnings=${races#* }; }
# The kernels the reports name ("at KERNEL+0x..", "access at KERNEL+0x.."): some, and none of them defined in the
# stage's own .cu files, means every report is inside a library's kernel (cuBLASLt, cuDNN)
kernels=$(sed -n -e 's/^=========  *at \(void \)\{0,1\}\([A-Za-z_][A-Za-z_0-9:]*\).*/\2/p' \
    -e 's/.* access at \(void \)\{0,1\}\([A-Za-z_][A-Za-z_0-9:]*\).*/\2/p' "$log.log" 2>/dev/null | sort -u)
whose=""; [ -z "$kernels" ] || whose=" (library)"
for kernel in $kernels; do grep -q "__global__ void $kernel(" "$stage"-*/*.cu 2>/dev/null && whose=""; done
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict="TIMEOUT"
elif grep -q "process didn't terminate successfully" "$log.log" 2>/dev/null; then verdict="KILLED (exit $rc)"
elif [ -z "$errors" ]; then verdict="FAILED (exit $rc)"
elif [ "$errors" -gt 0 ]; then verdict="$errors errors$whose"
elif [ "$warnings" -gt 0 ]; then verdict="$warnings warnings$whose"
elif [ $rc -ne 0 ]; then verdict="FAILED (exit $rc)"
else verdict="clean"
fi
echo "$stage $label $tool $secs $verdict" >>"$SAN_DIR/results"
echo "  $stage $label $tool: $verdict ($secs s)"
