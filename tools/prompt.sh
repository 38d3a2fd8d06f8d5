#!/usr/bin/env bash
# tools/prompt.sh NN: the work behind `make stage N prompt` (tools/exercises.mk hands over the settings
# as TRY_* environment variables): build/prompt/stageNN-TRAINER.md, one per trainer (stage 01:
# build/prompt/stage01.md). Not meant to be run by hand.
#
# The prompt of stage N asks for stage N's one idea, applied to the code it starts from: stage N-1's
# trainer file (stage 02, where the trainers start: its own file, and the task is open). It holds the
# idea (tools/stage_ideas.tsv), stage N's predictions table (NN-*/README.md), a checklist derived from
# the starting file (each later stage's marker found in its code or not), the rules, how the answer is
# checked, the contract (the trainer's part of common/trainer.h, the helpers' usage, the suite's
# tolerances), the starting file and its measurements. Its prose is tools/prompt_template.md; this
# script works out what fills the template's placeholders, under PROMPT_LIMIT bytes (fit_prompt).
# shellcheck disable=SC2086  # the TRY_* flags and ARGS are lists of words
nn=${1:-}
# shellcheck source=tools/try_common.sh
source tools/try_common.sh
[ -n "$nn" ] || die "usage: tools/prompt.sh NN (run through make stage N prompt)"

PROMPT_LIMIT=40960
ideas_file=tools/stage_ideas.tsv
template=tools/prompt_template.md
parts=
trap '[ -z "$parts" ] || rm -rf "$parts"' EXIT  # a refusal leaves no half-filled folder behind

# ----------------------------------------------------------------------------
# the template: every value is a file of the folder $parts, named after its placeholder

put() { printf '%s\n' "$2" >"$parts/$1"; }  # put NAME VALUE: a one-line value

# fill: the template, filled, or exit 2. A {{name}} is its file without the last newline; a line that is only
# {{name}} is its file as it is (code, tables, program output); <!-- if name = a or b --> ... <!-- end if -->
# keeps its lines where the value is one of those words. Ifs nest; the directive lines themselves are left out.
fill() {
    awk -v parts="$parts" -v template="$template" '
        function value(name,   file, line) {  # sets lines, the count of its lines
            file = parts "/" name
            if ((lines = getline line <file) < 0) {
                printf "error: %s: nothing fills {{%s}}\n", template, name >"/dev/stderr"
                exit 2
            }
            text = line
            while ((getline line <file) > 0) { text = text "\n" line; lines++ }
            close(file)
            return text
        }
        /^<!-- if [a-z_]+ = .* -->$/ {
            words = $0
            sub(/^<!-- if [a-z_]+ = /, "", words)
            sub(/ -->$/, "", words)
            if (!off && !index(" " words " ", " " value($3) " ")) off = depth + 1
            depth++
            next
        }
        /^<!-- end if -->$/ { if (off == depth--) off = 0; next }
        off { next }
        /^\{\{[a-z_]+\}\}$/ { text = value(substr($0, 3, length($0) - 4)); if (lines) print text; next }
        {
            done_part = ""
            while (match($0, /\{\{[a-z_]+\}\}/)) {
                done_part = done_part substr($0, 1, RSTART - 1) value(substr($0, RSTART + 2, RLENGTH - 4))
                $0 = substr($0, RSTART + RLENGTH)
            }
            print done_part $0
        }' "$template" || exit 2
}

# ----------------------------------------------------------------------------
# what fills it: the starting code, its checklist, the contract's parts

code_only() {  # code_only FILE: the file without its comments (gcc's preprocessor alone; its line markers dropped)
    "${TRY_CC:-gcc}" -x c++ -fpreprocessed -dD -E "$1" | grep -v '^# [0-9]'
}

squeeze_blank_lines() {  # standard input without trailing blanks, blank lines first and last, runs of them squeezed to one
    awk '{ sub(/[[:space:]]+$/, "") } NF == 0 { blank = 1; next } { if (blank && printed) print ""; blank = 0; printed = 1; print }'
}

stage_folder() {  # stage_folder NN: the stage's folder, empty when there is none (a planned stage)
    find . -maxdepth 1 -type d -name "$1-*" | sed 's|^\./||' | head -n1
}

# checklist_parts START_FILE: one line per idea of tools/stage_ideas.tsv, [x] where its marker is in
# the starting file's code, [ ] where it is not (the idea of this prompt's stage is marked as the task);
# and the counts of kernels, launches, atomics, syncs and copies in that code
checklist_parts() {
    local code stage marker idea removes found line
    code=$(code_only "$1")
    while IFS=$'\t' read -r stage marker idea removes; do
        case $stage in '#'* | '') continue ;; esac
        line="**stage $stage**"
        [ -n "$(stage_folder "$stage")" ] || line="$line (planned: no folder yet)"
        [ "$stage" = "$nn" ] && line="$line ← the task of this prompt"
        found=$(grep -oE -m1 -- "$marker" <<<"$code" | head -n1)
        if [ -n "$found" ]; then
            echo "- [x] $line: $idea. In the starting code: \`$found\`."
        else
            echo "- [ ] $line: $idea. Open (no \`$marker\` in the code). It removes $removes."
        fi
    done <"$ideas_file" >"$parts/checklist"
    put kernels "$(grep -cE '__global__' <<<"$code")"
    put launches "$(grep -oE '<<<' <<<"$code" | wc -l)"
    put atomics "$(grep -oE 'atomic[A-Z][A-Za-z]*[[:space:]]*\(' <<<"$code" | wc -l)"
    put syncs "$(grep -oE 'cuda(Device|Stream|Event)Synchronize[[:space:]]*\(' <<<"$code" | wc -l)"
    put copies "$(grep -oE 'cudaMemcpy[[:space:]]*\(' <<<"$code" | wc -l)"
}

prompt_predictions() {  # prompt_predictions README TRAINER: the predictions table's header and the trainer's rows
    awk -v t="$2" '/<!-- predictions end -->/ { on = 0 }
        on { n++; split($0, cell, "|"); gsub(/ /, "", cell[2]); if (n <= 2 || cell[2] == t) print }
        /<!-- predictions begin -->/ { on = 1 }' "$1"
}

trainer_h_part() {  # trainer_h_part TRAINER: common/trainer.h without the other trainer's section
    awk -v t="$1" '/^\/\/ -----/ { rule = $0; next }
        rule != "" {
            skip = (t == "regression" && /^\/\/ MNIST/) || (t == "mnist" && /^\/\/ regression/)
            if (skip) print "// (the " (t == "regression" ? "MNIST" : "regression") " section is left out: this prompt is about the " t ")"
            else print rule
            rule = ""
        }
        /^#ifdef __cplusplus/ { skip = 0 }
        !skip' common/trainer.h
}

tolerances_part() {  # tolerances_part TRAINER: the suite's tolerances that apply to that trainer
    awk -v t="$1" '/^\/\/ tolerances/ { on = 1 } /^\/\/ no GPU/ { exit } !on || /^\/\/ -+$/ { next }
        /^\/\/ Regression, fp32/ { part = "regression" } /^\/\/ MNIST, per precision/ { part = "mnist" }
        part == "" || part == t' tests/gpu/test_stage.c
}

helpers_parts() {  # how a trainer uses common/timing.h, check.h and host.h: timing.h's opening comment, the calls
    awk '/^\/\// { print; next } { exit }' common/timing.h >"$parts/timing_h_comment"
    grep -oE '^#define [a-zA-Z]+Check\([a-z]*\)' common/check.h | sed 's/^#define //' >"$parts/check_macros"
    grep -E '^[a-z].*\);' common/host.h >"$parts/host_functions"
}

results_parts() {  # the newest result rows of stage $from in results/, the trainer's only
    local csvs
    csvs=$(set +f; for f in results/*.csv; do case $f in *-curves.csv | *-breakdown.csv) ;; *) [ -f "$f" ] && echo "$f" ;; esac; done)
    if [ -z "$csvs" ]; then put results_table "None yet (\`make bench\` on a GPU machine writes them)."; return; fi
    report_rows try-results "$from" $csvs |
        awk -v t="$trainer" -v nn="$nn" 'nn == "01" || !/^\| / { print; next }
            { split($0, cell, "|"); gsub(/ /, "", cell[3]) } cell[3] == t || cell[3] == "trainer" || cell[3] ~ /^-+$/' \
            >"$parts/results_table"
}

# measure_parts: this run's measurements of the starting code ($trainer of stage $from), capped; sets
# measured=1 (they are what the form "unmeasured" leaves out)
measure_parts() {
    if [ "$nn" = 01 ]; then
        "$build/01/vector_add" --repeat 5 ${TRY_ARGS:-} 2>&1 | tail -n 30 >"$parts/vector_add_output"
    else
        "$build/$from/$trainer" --quiet --breakdown ${TRY_ARGS:-} 2>&1 | tail -n 12 >"$parts/breakdown_output"
        if command -v ncu >/dev/null 2>&1; then
            put ncu found
            "$TRY_MAKE" --no-print-directory stage-profile NN="$from" TRAINER="$trainer" 2>&1 | tail -n 14 >"$parts/ncu_output"
        else
            put ncu none
        fi
    fi
    measured=1
}

# ----------------------------------------------------------------------------
# the prompts

# trainer_parts: every value of one trainer's prompt ($trainer, from $start) but the form's
trainer_parts() {
    local rows exports="\`train_regression\` and \`REGRESSION_VARIANTS\`"
    [ "$trainer" = mnist ] && exports="\`train_mnist\`, \`MNIST_VARIANTS\` and \`MNIST_PRECISIONS\`"
    put exports "$exports"
    put stage_label "$nn$([ "$nn" != 01 ] && echo ", $trainer")"
    put n "$n"; put nn "$nn"; put trainer "$trainer"; put prev "$prev"; put prev_n "${prev#0}"
    put from "$from"; put from_n "${from#0}"; put kind "$kind"; put idea "$idea"
    put start "$start"; put start_name "$(basename "$start")"; put stage_dir "$stage_dir"
    put commit "$commit"; put date "$(date -u +%Y-%m-%d)"; put device "$device"
    put limit_kb "$((PROMPT_LIMIT / 1024))"; put build "$build"; put args "${TRY_ARGS:-}"
    [ "$kind" = vector-add ] && return
    if [ "$kind" = later ]; then
        rows=$(prompt_predictions "$stage_dir/README.md" "$trainer")
        if [ "$(wc -l <<<"$rows")" -gt 2 ]; then put predictions table; else put predictions none; fi
        put prediction_rows "$rows"
    fi
    checklist_parts "$start"
    trainer_h_part "$trainer" >"$parts/trainer_h"
    helpers_parts
    tolerances_part "$trainer" >"$parts/tolerances"
}

# fit_prompt OUT WHAT HINT: the template filled in the first form that fits under PROMPT_LIMIT: the starting
# code whole, lean, bare, then bare without the measurements (measured emptied); sets size and note (what was
# left out). A prompt that never fits is removed: exit 2, WHAT and HINT saying what is too long.
fit_prompt() {
    local out=$1 had=$measured form left_out
    for form in whole lean bare unmeasured; do
        [ "$form" != unmeasured ] || form=bare measured=
        put form "$form"
        case $form in  # the {{code}} part: the starting file whole, without its whole-line comments, or without any
        whole) cp "$start" "$parts/code" ;;
        lean) grep -v '^[[:space:]]*//' "$start" | squeeze_blank_lines >"$parts/code" ;;
        bare) code_only "$start" | squeeze_blank_lines >"$parts/code" ;;
        esac
        left_out=$([ "$form" = lean ] && echo "Whole-line comments" || echo Comments)  # what the form leaves out
        put left_out "$left_out"
        if [ -n "$measured" ]; then put run measured
        elif [ "$have_gpu" != 1 ]; then put run no-gpu
        else put run left-out; fi
        fill >"$out"
        size=$(wc -c <"$out")
        [ "$size" -lt "$PROMPT_LIMIT" ] && break
    done
    rm -rf "$parts"
    if [ "$size" -ge "$PROMPT_LIMIT" ]; then
        rm -f "$out"
        die "$2 would be $size bytes, over the limit of $PROMPT_LIMIT even without comments and measurements: $3"
    fi
    note=
    [ "$form" = whole ] || note=", ${left_out,} left out"
    [ -z "$had" ] || [ -n "$measured" ] || note="$note, this run's measurements left out"
}

# prompt_trainer: one trainer's prompt, in the first form that fits under PROMPT_LIMIT, or exit 2
prompt_trainer() {
    local start=$from_dir/$trainer.cu out=$build/prompt/stage$nn-$trainer.md
    [ "$nn" != 01 ] || out=$build/prompt/stage01.md
    if [ "$have_gpu" = 1 ]; then  # what this run measures: built (and its data fetched) first
        build_stage "$build/$from/$trainer"
        [ "$trainer" != mnist ] || "$TRY_MAKE" --no-print-directory -s data/mnist/train-images-idx3-ubyte || exit 3
    fi
    parts=$build/prompt/.parts-$nn-$trainer
    rm -rf "$parts"
    mkdir -p "$parts"
    trainer_parts
    results_parts
    measured=
    [ "$have_gpu" = 1 ] && measure_parts
    fit_prompt "$out" "the stage $nn prompt for $trainer" "shorten $start"
    echo "wrote $out ($size bytes, $(wc -l <"$out") lines; starting code: $start$note)"
}

# ----------------------------------------------------------------------------
# tools/loop.sh sources this file for its functions (the template filler, the contract's parts) and for
# what names the machine and the commit: the rest is this script's own work
have_gpu=${TRY_HAVE_GPU:-0}
device="no GPU (none was visible when this prompt was written)"
[ "$have_gpu" = 1 ] && device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
commit=${TRY_GIT_COMMIT_ID:-unknown}
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

mkdir -p "$build/prompt"
targets=${TRY_TRAINER:-regression mnist}  # the Makefile has checked TRAINER
# the stage the code starts from: the one before (stage 02 and 01: their own file)
case $nn in
01) targets=vector_add kind=vector-add prev= ;;
02) kind=baseline prev= ;;
*) kind=later prev=$(printf '%02d' $((10#$nn - 1))) ;;
esac
from=${prev:-$nn}
from_dir=$stage_dir
[ -z "$prev" ] || from_dir=$(stage_folder "$prev")
idea=$(awk -F'\t' -v s="$nn" '$1 == s { print $3 }' "$ideas_file")

for trainer in $targets; do prompt_trainer; done
echo "give one to an assistant or a student; the answer goes back through:"
for trainer in $targets; do echo "    make stage $n try FILE=path/to/$trainer.cu"; done
