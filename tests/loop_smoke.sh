#!/usr/bin/env bash
# tests/loop_smoke.sh: the rounds of `make loop` (tools/loop.sh), no GPU needed.
#
#     bash tests/loop_smoke.sh
#
# Runs tools/loop.sh as `make loop` does on a machine without a GPU, the GPU's part fed by fixtures
# (LOOP_VERDICT, LOOP_PROFILE, LOOP_ROWS: tests/loop/), its records, rows and prompts under
# build/loop-smoke/, and checks:
#   1. round 1's prompt holds stage 02's file and no verdict; the open one does not name stage 03's idea,
#      the guided one does;
#   2. round 2's prompt holds the candidate (the answer's one ```cuda block that defines train_TRAINER,
#      among other blocks), the verdict, the timing against stages 02 and 08, the profile; open names no
#      idea, guided names stage 04's; the record (answer.md unedited, the .cu, verdict.txt, profile.txt)
#      and the result rows are written;
#   3. an oversized candidate still gives a prompt under 81920 bytes (comments left out), and one whose
#      code alone is too long is refused;
#   4. a failed round comes back with its failure; two failures in a row refuse the next round (its record
#      written first); the refusals (no GPU, past LOOP_ROUNDS, no candidate block, another answer for a
#      recorded round, two trainers) are one "error:" line each.
# Each check prints one line; the last line is "loop: N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
work=build/loop-smoke
rm -rf "$work"
mkdir -p "$work"
log=$work/last.log
fixtures=tests/loop
limit=81920

# shellcheck source=tests/smoke_common.sh
source tests/smoke_common.sh

idea_of() { awk -F'\t' -v s="$1" '$1 == s { print $3 }' tools/stage_ideas.tsv; }

# loop RECORDS TRAINER ROUND MODE [FROM VERDICT [PROFILE]]: tools/loop.sh as make loop runs it without a
# GPU, into $work; its output in $log
loop() {
    TRY_BUILD=$work/build TRY_HAVE_GPU=0 TRY_TRAINER=$2 LOOP_ROUND=$3 LOOP_MODE=$4 LOOP_FROM=${5:-} \
        LOOP_VERDICT=${6:-} LOOP_PROFILE=${7:-${6:+$fixtures/profile.txt}} LOOP_RECORD_DIR=$work/$1 \
        LOOP_RESULTS_DIR=$work/$1-results bash tools/loop.sh >"$log" 2>&1
}

# expect_refused NAME PATTERN LOOP-ARGS...: exit 2 and exactly one "error:" line, matching PATTERN
expect_refused() {
    local name=$1 pattern=$2 status
    shift 2
    loop "$@"
    status=$?
    if [ $status -ne 2 ]; then bad "$name (exit $status, want 2)"; return; fi
    if [ "$(grep -c '^error:' "$log")" -ne 1 ]; then bad "$name (not one 'error:' line)"; return; fi
    if ! grep -Eq "^error: .*$pattern" "$log"; then bad "$name (the error line does not say: $pattern)"; return; fi
    ok "$name: $(grep '^error:' "$log" | cut -c1-110)"
}

# has NAME FILE TEXT...: FILE holds every TEXT (fixed strings)
has() {
    local name=$1 file=$2 text missing=
    shift 2
    for text in "$@"; do grep -qF -- "$text" "$file" || missing="$missing '${text:0:60}'"; done
    : >"$log"
    if [ -z "$missing" ]; then ok "$name"; else bad "$name: missing$missing"; fi
}

lacks() {  # lacks NAME FILE TEXT...: FILE holds none of them
    local name=$1 file=$2 text found=
    shift 2
    for text in "$@"; do grep -qF -- "$text" "$file" && found="$found '${text:0:60}'"; done
    : >"$log"
    if [ -z "$found" ]; then ok "$name"; else bad "$name: holds$found"; fi
}

under_limit() {  # under_limit FILE
    local size
    size=$(wc -c <"$1" 2>/dev/null || echo missing)
    if [ "$size" != missing ] && [ "$size" -lt $limit ]; then ok "$1: $size bytes, under $limit"
    else bad "$1: $size bytes, not under $limit"; fi
}

# answer CODE OUT: an answer as an assistant writes it: prose, a plain block, a snippet in a cuda block
# that defines nothing, then the whole file
answer() {
    { printf '## Prediction\n\nFewer launches per step.\n\n```\nlaunches: 15 -> 7 per step\n```\n\n'
      printf '```cuda\nstatic __global__ void sketch(float *x) { x[0] = 0; }\n```\n\nThe file:\n\n```cuda\n'
      cat "$1"
      printf '```\n'; } >"$2"
}

rows_fixture() {  # three result rows of the committed H100 file (header first), for LOOP_ROWS
    awk -F, 'NR == 1 || ($1 == "02" && $2 == "mnist" && n++ < 3)' results/nvidia-h100-80gb-hbm3.csv >"$work/rows.csv"
}

# ----------------------------------------------------------------------------
# round 1

out=$work/build/loop/mnist/round-1.md
if loop r mnist 1 open; then ok "round 1, mnist, open: written"; else bad "round 1, mnist, open: loop.sh failed"; fi
under_limit "$out"
has "round 1: stage 02's file in it" "$out" "$(grep -m1 'MNIST_VARIANTS\[\] = ' 02-llm-baseline/mnist.cu)" \
    "## The current file: 02-llm-baseline/mnist.cu" "Make it faster and keep it correct."
lacks "round 1: no verdict, no idea named (open)" "$out" "## Its verdict" "try: " "$(idea_of 03)"
loop r mnist 1 guided
has "round 1, guided: stage 03's idea named, in its own folder" "$work/build/loop/mnist-guided/round-1.md" "$(idea_of 03)"

# ----------------------------------------------------------------------------
# round 2: a passing answer (stage 03's own file as the candidate)

answer 03-fused-kernels/mnist.cu "$work/answer-1.md"
rows_fixture
out=$work/build/loop/mnist/round-2.md
if LOOP_ROWS=$work/rows.csv loop r mnist 2 open "$work/answer-1.md" $fixtures/verdict-pass.txt; then
    ok "round 2, open: written"
else bad "round 2, open: loop.sh failed"; fi
under_limit "$out"
has "round 2: the candidate, its verdict, timing and profile" "$out" \
    "$(grep -m1 'softmax_cross_entropy' 03-fused-kernels/mnist.cu)" "try: PASS, relative loop speed 1.03x" \
    "candidate vs stage 02: loop 1.03x" "candidate vs stage 08: loop 0.06x" \
    "$(sed -n 3p $fixtures/profile.txt)" "## Its profile"
lacks "round 2, open: no idea named, not the sketch block" "$out" "$(idea_of 04)" "sketch(float" "FAILED the suite"
record=$work/r/mnist/round-1
: >"$log"
if cmp -s "$work/answer-1.md" "$record/answer.md" && cmp -s 03-fused-kernels/mnist.cu "$record/mnist.cu" &&
    cmp -s $fixtures/verdict-pass.txt "$record/verdict.txt" && cmp -s $fixtures/profile.txt "$record/profile.txt"; then
    ok "round 1's record: answer.md unedited, mnist.cu, verdict.txt, profile.txt"
else bad "round 1's record is not what was given ($(ls "$record" 2>&1 | tr '\n' ' '))"; fi
if [ "$(wc -l <"$work/r-results/nvidia-h100-80gb-hbm3.csv" 2>/dev/null)" = 4 ] &&
    cmp -s <(head -n1 "$work/rows.csv") <(head -n1 "$work/r-results/nvidia-h100-80gb-hbm3.csv"); then
    ok "the round's rows: results/loop/<gpu>.csv, the drivers' header and 3 rows"
else bad "the round's rows were not appended to $work/r-results/nvidia-h100-80gb-hbm3.csv"; fi
loop g mnist 2 guided "$work/answer-1.md" $fixtures/verdict-pass.txt
has "round 2, guided: stage 04's idea named, round 1 recorded in mnist-guided/" \
    "$work/build/loop/mnist-guided/round-2.md" "$(idea_of 04)"
lacks "round 2, guided: the open run's prompt is its own" "$out" "$(idea_of 04)"
: >"$log"
if [ -f "$work/g/mnist-guided/round-1/verdict.txt" ] && [ ! -e "$work/g/mnist" ]; then ok "the guided record: g/mnist-guided/round-1/"
else bad "the guided run's record is not in g/mnist-guided/round-1/"; fi

# ----------------------------------------------------------------------------
# sizes: a candidate with 100 KB of comments fits without them; one with 95 KB of code does not

{ sed -n '1,10p' 02-llm-baseline/mnist.cu
  for i in $(seq 1000); do echo "// padding comment $i: a long explanation an assistant wrote, one line of about a hundred bytes."; done
  sed -n '11,$p' 02-llm-baseline/mnist.cu; } >"$work/padded.cu"
answer "$work/padded.cu" "$work/answer-padded.md"
loop big mnist 2 open "$work/answer-padded.md" $fixtures/verdict-pass.txt
under_limit "$out"
has "an oversized candidate: its comments left out" "$out" "comments are left out to keep this prompt under 80 KB"
{ cat 02-llm-baseline/mnist.cu
  echo "static const float padding_table[] = {"
  for i in $(seq 3000); do echo "    0.0f, 1.0f, 2.0f, 3.0f, 4.0f,"; done
  echo "};"; } >"$work/huge.cu"
answer "$work/huge.cu" "$work/answer-huge.md"
expect_refused "a candidate too long even without comments" "over the limit of 81920" \
    huge mnist 2 open "$work/answer-huge.md" $fixtures/verdict-pass.txt

# ----------------------------------------------------------------------------
# failures: round 2's answer fails, round 3's prompt shows it; round 3's fails too, round 4 is refused

loop chain mnist 2 open "$work/answer-1.md" $fixtures/verdict-pass.txt
answer 02-llm-baseline/mnist.cu "$work/answer-2.md"
out=$work/build/loop/mnist/round-3.md
if loop chain mnist 3 open "$work/answer-2.md" $fixtures/verdict-fail.txt; then ok "round 3 after a failed round 2: written"
else bad "round 3 after a failed round 2: loop.sh failed"; fi
has "round 3: the failure and its messages" "$out" "The current file FAILED the suite" \
    "[FAIL] mnist_fp32::hidden_128" "test loss rel 3.2e-02 exceeds" "try: FAIL" \
    "$(grep -m1 'MNIST_VARIANTS\[\] = ' 02-llm-baseline/mnist.cu)"
rm -f "$work/build/loop/mnist/round-4.md"
expect_refused "two failures in a row" "rounds 2 and 3 both failed" \
    chain mnist 4 open "$work/answer-2.md" $fixtures/verdict-fail.txt
: >"$log"
if [ -f "$work/chain/mnist/round-3/verdict.txt" ] && [ ! -f "$work/build/loop/mnist/round-4.md" ]; then
    ok "the refused round: round 3's record written, no round 4 prompt"
else bad "the refused round: round 3's record missing or a round 4 prompt written"; fi

# ----------------------------------------------------------------------------
# the other refusals

expect_refused "no GPU and no fixtures" "no CUDA device" nogpu mnist 2 open "$work/answer-1.md"
LOOP_ROUNDS=3 expect_refused "past LOOP_ROUNDS" "past the loop's last round" r mnist 4 open "$work/answer-1.md" $fixtures/verdict-pass.txt
printf 'No code, only words.\n\n```cuda\nint main() { return 0; }\n```\n' >"$work/answer-none.md"
expect_refused "an answer without a trainer block" "no \`\`\`cuda" none mnist 2 open "$work/answer-none.md" $fixtures/verdict-pass.txt
expect_refused "another answer for a recorded round" "holds another answer" r mnist 2 open "$work/answer-2.md" $fixtures/verdict-pass.txt
expect_refused "two trainers" "one trainer" r "regression mnist" 1 open

# make loop itself: the verb reaches the script with its settings
if make --no-print-directory loop TRAINER=regression ROUND=1 MODE=guided BUILD=$work/make >"$log" 2>&1 &&
    grep -qF "$(idea_of 03)" "$work/make/loop/regression-guided/round-1.md"; then
    ok "make loop TRAINER=regression ROUND=1 MODE=guided: $work/make/loop/regression-guided/round-1.md"
else bad "make loop TRAINER=regression ROUND=1 MODE=guided"; fi

echo "loop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
