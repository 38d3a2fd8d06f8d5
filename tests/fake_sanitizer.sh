#!/usr/bin/env bash
# tests/fake_sanitizer.sh: a stand-in for compute-sanitizer, for tests/sanitize_smoke.sh. It runs
# nothing: it writes the log a real run would leave, chosen by tool and trainer, so that every verdict
# of `make sanitize` can be checked on a machine without a GPU:
#
#   tool        mnist                                   regression
#   memcheck    clean                                   runs past the time limit (TIMEOUT)
#   racecheck   hazards in a cuBLASLt kernel only       clean
#   initcheck   an uninitialized read in our kernel     clean
#   synccheck   killed by a signal (KILLED)             exits 4 with nothing reported (FAILED)
set -u
if [ "${1:-}" = --version ]; then echo "fake compute-sanitizer Version 0.0"; exit 0; fi
tool= log=/dev/null bin=
while [ $# -gt 0 ]; do
    case $1 in
        --tool) tool=$2; shift 2 ;;
        --log-file) log=$2; shift 2 ;;
        */regression | */mnist | */vector_add) bin=$1; break ;;
        *) shift ;;  # the tool's other options and their values
    esac
done
# FAKE_SANITIZER_CALLS: a file that gets one line a call, the tool and the command it would have run
[ -z "${FAKE_SANITIZER_CALLS:-}" ] || echo "$tool $*" >>"$FAKE_SANITIZER_CALLS"
say() { printf '========= %s\n' "$@" >>"$log"; }
: >"$log"
say "COMPUTE-SANITIZER"
case $tool-$(basename "$bin") in
    memcheck-mnist) say "ERROR SUMMARY: 0 errors" ;;
    memcheck-regression) sleep 5; say "ERROR SUMMARY: 0 errors" ;;
    racecheck-mnist)
        say "Error: Race reported between Read access at nvjet_sm90_tss_64x80_64x11_1x2_h_bz_relubias_NNT+0xa50" \
            "    and Write access at nvjet_sm90_tss_64x80_64x11_1x2_h_bz_relubias_NNT+0x60d0 [8 hazards]" "" \
            "RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)" ;;
    racecheck-regression) say "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" ;;
    initcheck-mnist)
        say "Uninitialized __global__ memory read of size 4 bytes" \
            "    at gather_batch_kernel(float *, unsigned char *, const float *, const int *, int, int)+0xb30" \
            "    by thread (32,0,0) in block (0,0,0)" \
            "    Saved host backtrace up to driver entry point at kernel launch time" "" \
            "ERROR SUMMARY: 1 error" ;;
    initcheck-regression) say "ERROR SUMMARY: 0 errors" ;;
    synccheck-mnist)
        say "Error: process didn't terminate successfully" "Target application returned an error" \
            "ERROR SUMMARY: 0 errors"
        exit 9 ;;
    synccheck-regression) echo "error: something the program reports"; say "ERROR SUMMARY: 0 errors"; exit 4 ;;
    *) echo "fake_sanitizer: no scenario for $tool on $bin" >&2; exit 1 ;;
esac
