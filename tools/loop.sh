#!/usr/bin/env bash
# tools/loop.sh: the work behind `make loop TRAINER=regression|mnist ROUND=k [FROM=answer.md] [MODE=open|guided]`
# (tools/exercises.mk hands over the build settings as TRY_* and the verb's as LOOP_* environment variables).
# Not meant to be run by hand.
#
# The loop improves stage 02's trainer round by round from its own measurements. Round 1's prompt holds
# stage 02's file. Round k (k >= 2) takes FROM, round k-1's answer: its one ```cuda (or ```c) block that
# defines train_TRAINER is the candidate. The candidate is tried as a stage 02 candidate (tools/try.sh:
# the GPU suite, then timed against stage 02), timed against stage 08 with the same flags in the same run,
# and profiled (`make stage 2 profile`'s per-kernel summary, on the candidate's build). Then:
#   - the record of round k-1, in 02-llm-baseline/loop/TRAINER/round-(k-1)/ (a guided run: TRAINER-guided/;
#     LOOP_RECORD_DIR: another folder than 02-llm-baseline/loop):
#     answer.md (FROM, unedited), TRAINER.cu (the candidate), verdict.txt, profile.txt;
#   - the result rows of the three timed runs, appended to results/loop/<gpu>.csv (LOOP_RESULTS_DIR: another folder),
#     the drivers' own rows (schema of common/report.h) with run_id loop-TRAINER-MODE-rK-UTC naming the round;
#   - round k's prompt, build/loop/TRAINER/round-k.md (guided: TRAINER-guided/; tools/loop_template.md), under
#     PROMPT_LIMIT bytes (80 KB: the candidate is whole in it).
# Without a GPU, LOOP_VERDICT and LOOP_PROFILE name files that stand in for try's verdict and the profile
# (and LOOP_ROWS, optionally, for the result rows), so that tests/loop_smoke.sh can feed fixtures.
# Refusals, one "error:" line and exit 2: a bad setting, ROUND past LOOP_ROUNDS (default 8), a round after
# two failed ones in a row (the record of the second is written first), no GPU and no fixtures.

# shellcheck source=tools/prompt.sh
source tools/prompt.sh 02  # its functions, and try_common.sh's (die, build_stage); nn=02: the loop's stage
template=tools/loop_template.md
# A round's prompt holds the answer's whole file, which grows round by round: twice a stage prompt's limit
PROMPT_LIMIT=81920
trainer=${TRY_TRAINER:-} round=${LOOP_ROUND:-} answer_in=${LOOP_FROM:-} mode=${LOOP_MODE:-open}
max_rounds=${LOOP_ROUNDS:-8}
run_name=$trainer  # a guided run keeps its own records and prompts, as TRAINER-guided
[ "$mode" != guided ] || run_name=$trainer-guided
records=${LOOP_RECORD_DIR:-02-llm-baseline/loop}/$run_name
work=$build/loop/$run_name

check_settings() {  # every refusal that needs nothing run
    case $trainer in regression | mnist) ;; *) die "make loop takes one trainer: TRAINER=regression or TRAINER=mnist (not '$trainer')" ;; esac
    case $mode in open | guided) ;; *) die "MODE=$mode: valid are open (the default) and guided" ;; esac
    [[ $round =~ ^[1-9][0-9]*$ ]] || die "ROUND='$round': give the round to write, 1, 2, ... (make loop TRAINER=$trainer ROUND=1)"
    [[ $max_rounds =~ ^[0-9]+$ ]] || die "LOOP_ROUNDS='$max_rounds' is not a number"
    [ "$round" -le "$max_rounds" ] || die "ROUND=$round is past the loop's last round, LOOP_ROUNDS=$max_rounds"
    if [ "$round" = 1 ]; then
        [ -z "$answer_in" ] || die "ROUND=1 starts from stage 02's file: FROM is for rounds 2 on (the answer of the round before)"
        return
    fi
    [ -n "$answer_in" ] || die "ROUND=$round needs FROM=path/to/answer.md, round $((round - 1))'s answer"
    [ -f "$answer_in" ] || die "FROM '$answer_in' is not a file"
    if [ "$have_gpu" != 1 ] && { [ -z "${LOOP_VERDICT:-}" ] || [ -z "${LOOP_PROFILE:-}" ]; }; then
        die "round $round tries round $((round - 1))'s answer on the GPU suite, and no CUDA device is visible: run it on a GPU machine (tests: LOOP_VERDICT=file LOOP_PROFILE=file stand in)"
    fi
    local f
    for f in ${LOOP_VERDICT:-} ${LOOP_PROFILE:-} ${LOOP_ROWS:-}; do [ -f "$f" ] || die "'$f' (LOOP_VERDICT, LOOP_PROFILE or LOOP_ROWS) is not a file"; done
    if [ -f "$records/round-$((round - 1))/answer.md" ] && ! cmp -s "$answer_in" "$records/round-$((round - 1))/answer.md"; then
        die "$records/round-$((round - 1))/answer.md holds another answer: delete that folder to redo round $((round - 1))"
    fi
}

# extract_candidate ANSWER OUT: the one ```cuda block that defines train_TRAINER, written to OUT; or exit 2
extract_candidate() {
    local status=0
    answer_code "$1" "train_$trainer(" >"$2" || status=$?
    [ "$status" != 3 ] || die "$1 holds no \`\`\`cuda (or \`\`\`c) block that defines train_$trainer: the answer must end with the complete $trainer.cu"
    [ "$status" = 0 ] || die "$1 holds several \`\`\`cuda blocks that define train_$trainer: the candidate must be one"
}

gpu_header() {  # the verdict's header, as results/<gpu>-try-NN-TRAINER.txt names its run
    local dirty=unknown
    case ${TRY_GIT_DIRTY:-} in 0) dirty=clean ;; 1) dirty=dirty ;; esac
    echo "# make loop TRAINER=$trainer ROUND=$round FROM=$answer_in MODE=$mode: round $((round - 1))'s answer, tried"
    echo "# commit $commit ($dirty), $device, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1), $(date -u +%Y-%m-%d); run $CUDA_STAGES_RUN_ID"
}

# try_candidate CANDIDATE: try.sh on it as a stage 02 candidate, its output shown indented (so that a line
# of its own, "error: ...", is not mistaken for the loop's) and kept in $work/try.log; sets try_rc.
# A candidate try refuses (does not compile, export or link: exit 2 with an error line naming it) is a
# failed round; a stage that does not build, or no device, is the loop's error.
try_candidate() {
    echo "== loop: make stage 2 try on $1 (output in $work/try.log)"
    TRY_OUT=$work/try TRY_RUN_SUITE=1 bash tools/try.sh 02 "$1" 2>&1 | tee "$work/try.log" | sed 's/^/  | /'
    try_rc=${PIPESTATUS[0]}
    case $try_rc in
    0 | 1) grep -q '^try: ' "$work/try.log" || die "try ended with exit $try_rc and no verdict line (see $work/try.log)" ;;
    2) grep -q "^error: $1 " "$work/try.log" || die "try could not check the candidate (its error is above, in $work/try.log)" ;;
    *) die "try ended with exit $try_rc (see $work/try.log): no verdict to record" ;;
    esac
}

# gpu_verdict CANDIDATE: $work/verdict.txt and $work/profile.txt measured here, $work/rows.csv the timed rows
gpu_verdict() {
    export CUDA_STAGES_RUN_ID
    CUDA_STAGES_RUN_ID=loop-$trainer-$mode-r$((round - 1))-$(date -u +%Y%m%dT%H%M%SZ)  # every row of this round's runs
    build_stage "$build/08/$trainer"
    rm -rf "$work/try" "$work/profile-$trainer.txt" "$work/stage08.csv"
    try_candidate "$1"
    local flags="--quiet --repeat 3 ${TRY_ARGS:-}"  # try.sh's speed_verdict flags
    {
        gpu_header
        if [ "$try_rc" != 0 ]; then  # the failing checks' messages, then try's verdict block
            sed 's/\x1b\[[0-9;]*m//g' "$work/try.log" | grep -aE '^\[(----|FAIL)\]|CRASH|[Ee]rror|Assertion' | head -n 40 | cut -c1-300
        fi
        grep -aE '^stage 02(-try)? .* on ' "$work/try.log"
        sed -n '/^== verdict for /,$p' "$work/try.log"
        [ "$try_rc" = 2 ] && echo "try: FAIL (the candidate was refused before the suite ran: the error above)"
    } >"$work/verdict.txt"
    if [ "$try_rc" = 0 ]; then  # stage 08 after the candidate, the same flags, the same run
        # shellcheck disable=SC2086
        "$build/08/$trainer" $flags --csv "$work/stage08.csv" >"$work/stage08.log" 2>&1 ||
            die "stage 08's own $trainer failed with these flags: $flags (see $work/stage08.log)"
        cat "$work/stage08.log" >>"$work/verdict.txt"
        { echo "== against stage 08, the best hand-written stage (same flags, same run)"
          report_rows try-speed 08 "$work/stage08.csv" "$work/try/candidate.csv" |
              grep -v '^try: '; } >>"$work/verdict.txt"
        awk 'NR == 1 || FNR > 1' "$work/try/stage.csv" "$work/try/candidate.csv" "$work/stage08.csv" >"$work/rows.csv"
    fi
    gpu_profile
}

gpu_profile() {  # the profile recipe on the candidate's build (none when it did not link)
    if [ ! -x "$work/try/$trainer" ]; then echo "(no profile: the candidate did not build)" >"$work/profile.txt"; return; fi
    echo "== loop: make stage 2 profile on $work/try/$trainer"
    "$TRY_MAKE" --no-print-directory stage-profile NN=02 TRAINER="$trainer" PROFILE_BIN="$work/try" \
        PROFILE_OUT="$work/profile" >"$work/profile.log" 2>&1 || echo "(the profile run failed: the end of its output)" >>"$work/profile.log"
    if [ -f "$work/profile-$trainer.txt" ]; then cp "$work/profile-$trainer.txt" "$work/profile.txt"
    else tail -n 30 "$work/profile.log" >"$work/profile.txt"; fi  # no ncu: the recipe's --breakdown run
    cat "$work/profile.txt"
}

# append_rows CSV: its data rows at the end of $results/<gpu>.csv (named after their device column, spelt by
# report_rows gpu-slug), a header first where the file is new; a file of another header is refused
append_rows() {
    local rows=$1 results=${LOOP_RESULTS_DIR:-results/loop} device slug out
    device=$(report_rows column device "$rows")
    [ -n "$device" ] || return 0
    slug=$(report_rows gpu-slug "$device")
    out=$results/$slug.csv
    mkdir -p "$results"
    if [ -s "$out" ]; then
        [ "$(head -n1 "$out")" = "$(head -n1 "$rows")" ] || die "$out has another header than these rows: move it aside"
        tail -n +2 "$rows" >>"$out"
    else cp "$rows" "$out"; fi
    echo "result rows: $(($(wc -l <"$rows") - 1)) appended to $out"
}

verdict_of() {  # verdict_of FILE: REPLY = pass or fail, from its last "try:" line (no subshell: it may die)
    local last
    last=$(grep -a '^try: ' "$1" | tail -n1)
    [ -n "$last" ] || die "$1 holds no 'try:' line: it is not a verdict of make stage 2 try"
    case $last in 'try: PASS'*) REPLY=pass ;; *) REPLY=fail ;; esac
}

# record_round: the record of round k-1 from $work, then the two-failures rule (after it, so that the
# second failure is on record too)
record_round() {
    local prev=$((round - 1)) dir=$records/round-$((round - 1)) before
    verdict_of "$work/verdict.txt"  # a verdict, or nothing is recorded
    verdict=$REPLY
    mkdir -p "$dir"
    cp "$answer_in" "$dir/answer.md"
    cp "$work/$trainer.cu" "$work/verdict.txt" "$work/profile.txt" "$dir/"
    echo "recorded round $prev in $dir/: answer.md, $trainer.cu, verdict.txt, profile.txt"
    [ ! -s "$work/rows.csv" ] || append_rows "$work/rows.csv"
    [ "$prev" -ge 2 ] && [ "$verdict" = fail ] || return 0
    before=$records/round-$((prev - 1))/verdict.txt
    [ -f "$before" ] || die "no record of round $((prev - 1)) ($before): the loop runs its rounds in order"
    verdict_of "$before"
    [ "$REPLY" = pass ] ||
        die "rounds $((prev - 1)) and $prev both failed the suite (records in $records/): the loop stops after two failures in a row, round $round is not written"
}

# ----------------------------------------------------------------------------
# the prompt: tools/loop_template.md, filled by prompt.sh's fill; its rules and contract are the stage
# prompt's own sections (tools/prompt_template.md), filled as stage 02's, so that the two never drift

# filled_section FROM TO: tools/prompt_template.md from the heading FROM to the one before TO, filled
filled_section() {
    local template=$parts/section.tpl  # what fill reads
    awk -v from="$1" -v to="$2" '$0 == to { on = 0 } $0 == from { on = 1 } on' tools/prompt_template.md >"$template"
    fill | squeeze_blank_lines
}

# loop_parts START: every value of round k's prompt but the form's
loop_parts() {
    # what trainer_parts of prompt.sh reads: stage 02's prompt, the baseline
    n=2 nn=02 prev='' from=02 kind=baseline idea='' start=$1 stage_dir=02-llm-baseline
    trainer_parts
    filled_section "## Rules a candidate must keep" "## How the answer is checked" >"$parts/rules"
    filled_section "## The interface: common/trainer.h" "## The starting code: {{start}}" >"$parts/contract"
    put round "$round"; put prev_round "$((round - 1))"; put next_round "$((round + 1))"; put mode "$mode"
    put record "$records/round-$((round - 1))"
    put guided no
    if [ "$mode" = guided ]; then  # round k names stage k+2's idea: round 1 stage 03's, as make stage 3 prompt does
        put idea_stage "$(printf '%02d' $((round + 2)))"
        idea=$(awk -F'\t' -v s="$(printf '%02d' $((round + 2)))" '$1 == s { print $3 }' "$ideas_file")
        put idea "$idea"
        if [ -n "$idea" ]; then put guided yes; else put guided exhausted; fi
    fi
    if [ "$round" = 1 ]; then
        put round_kind first
        results_parts
    else
        put round_kind later
        put verdict "$verdict"
        sed 's/\x1b\[[0-9;]*m//g' "$records/round-$((round - 1))/verdict.txt" | cut -c1-400 >"$parts/verdict_text"
        head -n 60 "$records/round-$((round - 1))/profile.txt" | cut -c1-400 >"$parts/profile_text"
    fi
}

# loop_prompt START OUT: round k's prompt, in the first form that fits (prompt.sh's fit_prompt), or exit 2
loop_prompt() {
    local start=$1 out=$2
    parts=$work/.parts-$round
    rm -rf "$parts"
    mkdir -p "$parts"
    loop_parts "$start"
    measured=1
    fit_prompt "$out" "round $round's prompt" "the current file ($start) is too long"
    echo "wrote $out ($size bytes; current file: $start$note)"
}

# ----------------------------------------------------------------------------

check_settings
mkdir -p "$work"
if [ "$round" = 1 ]; then
    current=02-llm-baseline/$trainer.cu
else
    rm -f "$work/rows.csv"
    extract_candidate "$answer_in" "$work/$trainer.cu"
    if [ "$have_gpu" = 1 ]; then
        gpu_verdict "$work/$trainer.cu"
    else  # the fixtures stand in for try's verdict and the profile
        cp "$LOOP_VERDICT" "$work/verdict.txt"
        cp "$LOOP_PROFILE" "$work/profile.txt"
        [ -z "${LOOP_ROWS:-}" ] || cp "$LOOP_ROWS" "$work/rows.csv"
    fi
    record_round
    current=$records/round-$((round - 1))/$trainer.cu
fi
loop_prompt "$current" "$work/round-$round.md"
echo "give it to an assistant; its answer comes back through:"
echo "    make loop TRAINER=$trainer ROUND=$((round + 1)) FROM=path/to/answer.md MODE=$mode"
