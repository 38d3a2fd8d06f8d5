#!/usr/bin/env bash
# tests/prompt_smoke.sh: the prompts of `make stage N prompt` (tools/prompt.sh), no GPU needed.
#
#     bash tests/prompt_smoke.sh
#
# Writes every stage's prompts (stage 01's and, for each trainer stage, one per trainer) the way
# `make stage N prompt` does on a machine without a GPU, into build/prompt-smoke/, and checks each:
#   1. it is under 40960 bytes;
#   2. it has every section, and the starting file: stage N-1's trainer (stage 02: its own);
#   3. its checklist is the code's: an item is ticked exactly when its marker (tools/stage_ideas.tsv) is
#      in the starting file's code, no item of stage N or later is ticked, and stage N's item is the task;
#   4. the checklists of one trainer differ from stage to stage;
#   5. every row of stage N's predictions table (NN-*/README.md) for the trainer is in it.
# A self-test first: the checklist check must catch an open item ticked. Each check prints one line;
# the last line is "prompt: N passed, N failed".
set -u
cd "$(dirname "$0")/.." || exit 1
work=build/prompt-smoke
rm -rf "$work"
mkdir -p "$work"
log=$work/last.log
ideas=tools/stage_ideas.tsv
limit=40960

# shellcheck source=tests/smoke_common.sh
source tests/smoke_common.sh

stage_dir() { find . -maxdepth 1 -type d -name "$1-*" | sed 's|^\./||' | head -n1; }

# check_checklist PROMPT START NN: writes what is wrong to $log, returns 1 when anything is
check_checklist() {
    local prompt=$1 start=$2 stage=$3 code line item ticked marker found
    : >"$log"
    code=$(sed 's|//.*||' "$start")  # the trainers hold no /* */ comments
    grep -q '^- \[[x ]\] \*\*stage ' "$prompt" || echo "no checklist items" >>"$log"
    while IFS= read -r line; do
        item=$(sed -n 's/^- \[[x ]\] \*\*stage \([0-9][0-9]\)\*\*.*/\1/p' <<<"$line")
        ticked=0
        [[ $line == "- [x]"* ]] && ticked=1
        marker=$(awk -F'\t' -v s="$item" '$1 == s { print $2 }' "$ideas")
        found=0
        grep -qE -- "$marker" <<<"$code" && found=1
        [ $ticked = $found ] || echo "stage $item: ticked $ticked, marker found $found in $start" >>"$log"
        if [ "$stage" != 02 ] && [ "$((10#$item))" -ge "$((10#$stage))" ] && [ $ticked = 1 ]; then
            echo "stage $item is ticked in the stage $stage prompt: it is not done before stage $stage" >>"$log"
        fi
        if [ "$item" = "$stage" ] && [[ $line != *"← the task of this prompt"* ]]; then
            echo "stage $item is not marked as the task" >>"$log"
        fi
    done < <(grep '^- \[[x ]\] \*\*stage ' "$prompt")
    [ ! -s "$log" ]
}

checklist_of() { grep '^- \[[x ]\] \*\*stage ' "$1" | cksum; }

# ----------------------------------------------------------------------------
# the prompts, as make stage N prompt writes them without a GPU

stages=$(find . -maxdepth 1 -type d -name '0[2-9]-*' | sed 's|^\./||' | sort |
    while read -r d; do [ -f "$d/regression.cu" ] && [ -f "$d/mnist.cu" ] && echo "${d%%-*}"; done)
# A prompt that cannot fit: stage 09's MNIST one, whose starting file (stage 08's mnist.cu) is 33 KB of code
# alone. prompt.sh must refuse it with its one error line, after writing the stage's regression prompt.
too_long="09-mnist"
for nn in 01 $stages; do
    if TRY_BUILD=$work TRY_HAVE_GPU=0 TRY_STAGE_DIR=$(stage_dir "$nn") TRY_TRAINER="regression mnist" \
        bash tools/prompt.sh "$nn" >"$log" 2>&1; then ok "stage $nn prompt written"
    elif [ "$nn-mnist" = "$too_long" ] && [ -f "$work/prompt/stage$nn-regression.md" ] &&
        grep -q "^error: the stage $nn prompt for mnist would be [0-9]* bytes, over the limit" "$log"; then
        ok "stage $nn prompt: the regression's written, the MNIST one refused (over the limit, one error line)"
    else bad "stage $nn prompt: tools/prompt.sh $nn failed"; fi
done

# self-test: an open item ticked is caught
if [ -f "$work/prompt/stage03-regression.md" ]; then
    sed '0,/^- \[ \] \*\*stage 05\*\*/s//- [x] **stage 05**/' "$work/prompt/stage03-regression.md" >"$work/ticked.md"
    if check_checklist "$work/ticked.md" 02-llm-baseline/regression.cu 03; then
        bad "self-test: an open item ticked (stage 05 in the stage 03 prompt) was not caught"
    else ok "self-test: an open item ticked is caught"; fi
fi

check_prompt() {  # check_prompt FILE NN TRAINER START
    local prompt=$1 nn=$2 trainer=$3 start=$4 size missing section row
    if [ ! -f "$prompt" ]; then bad "$prompt was not written"; return; fi
    size=$(wc -c <"$prompt")
    : >"$log"
    if [ "$size" -lt $limit ]; then ok "$prompt: $size bytes, under $limit"
    else bad "$prompt: $size bytes, not under $limit"; fi
    missing=
    for section in "## The task" "## Rules a candidate must keep" "## How the answer is checked" \
        "## The starting code: $start" "## Measured: the starting code"; do
        grep -qF "$section" "$prompt" || missing="$missing '$section'"
    done
    if [ "$nn" != 01 ]; then
        for section in "## The interface: common/trainer.h" "## Checklist: what the starting code leaves open" \
            "int train_$trainer("; do
            grep -qF "$section" "$prompt" || missing="$missing '$section'"
        done
        # the starting file itself: its list of variants
        section=$(grep -m1 "_VARIANTS\[\] = " "$start")
        grep -qF "$section" "$prompt" || missing="$missing 'the starting file ($section)'"
    fi
    if [ -z "$missing" ]; then ok "$prompt: every section, starting from $start"
    else bad "$prompt: missing$missing"; fi
    [ "$nn" = 01 ] && return
    if check_checklist "$prompt" "$start" "$nn"; then ok "$prompt: the checklist is the starting code's"
    else bad "$prompt: the checklist is not the starting code's"; fi
    local readme rows=0 absent=0
    readme=$(stage_dir "$nn")/README.md
    while IFS= read -r row; do
        rows=$((rows + 1))
        grep -qxF "$row" "$prompt" || { absent=$((absent + 1)); echo "missing: $row" >>"$log"; }
    done < <(sed -n '/<!-- predictions begin -->/,/<!-- predictions end -->/p' "$readme" | grep "^| $trainer |")
    if [ $absent = 0 ]; then ok "$prompt: the $rows prediction row(s) of $readme for $trainer"
    else bad "$prompt: $absent of $rows prediction rows of $readme missing"; fi
}

check_prompt "$work/prompt/stage01.md" 01 vector_add 01-vector-add/vector_add.cu
for trainer in regression mnist; do
    previous=02
    for nn in $stages; do
        from=$previous
        [ "$nn" = 02 ] && from=02
        [ "$nn-$trainer" != "$too_long" ] || { previous=$nn; continue; }
        check_prompt "$work/prompt/stage$nn-$trainer.md" "$nn" "$trainer" "$(stage_dir "$from")/$trainer.cu"
        previous=$nn
    done
    # one checklist per stage
    twice=$(for nn in $stages; do
        [ -f "$work/prompt/stage$nn-$trainer.md" ] && echo "$(checklist_of "$work/prompt/stage$nn-$trainer.md") $nn"
    done | awk '{ key = $1 " " $2 } seen[key] { print seen[key] " and " $3 } { seen[key] = $3 }')
    : >"$log"
    if [ -z "$twice" ]; then ok "$trainer: every stage's prompt has a checklist of its own"
    else bad "$trainer: the same checklist in the prompts of stages $twice"; fi
done

echo "prompt: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
