#!/usr/bin/env bash
# tests/teaching_refs.sh [FILE]: TEACHING.md (or FILE) names the exercises as they are now. An exercise is
# named by a link to its stage's exercises.md whose text is either
#   - the region names of a build exercise in backticks, [`block-reduction`](04-shared-memory/exercises.md)
#     (several: `a`, `b` and `c`): each must be an `// EXERCISE(name)` region of that stage, as
#     `make stage N exercise` finds them (tools/exercise.sh NN --list);
#   - the title of an exercise in italics, [*tile size*](04-shared-memory/exercises.md): the words after
#     "Kind: " of one of that file's "## N. Kind: title (time)" headings;
# and never by its number ("exercise 4", "lab 4", a table cell "2, 3: ..."), which drifts when an exercise
# is added. Without FILE it also checks that the test bites: a file naming a region that does not exist,
# a title that does not exist and an exercise by number fails it. In a student copy (no TEACHING.md) it
# skips. Last line: "teaching: N passed, N failed[, N skipped]".
set -u
file=${1:-TEACHING.md}
passed=0 failed=0
ok() { echo "ok    $1"; passed=$((passed + 1)); }
bad() { echo "FAIL  $1"; failed=$((failed + 1)); }
if [ ! -f "$file" ]; then
    echo "SKIP  no $file here (a student copy leaves it out)"
    echo "teaching: 0 passed, 0 failed, 1 skipped"
    exit 0
fi

# every stage's regions and titles: "DIR NAME" and "DIR TITLE" keys, read from "region<TAB>DIR NAME" and
# "title<TAB>DIR TITLE" lines; the run that checks that the test bites is handed this run's lines
# (TEACHING_REFS_INDEX, a file), the same repository's, rather than working them out again
stage_index() {
    local dir name t
    for dir in [0-9][0-9]-*/; do
        dir=${dir%/}
        [ -f "$dir/exercises.md" ] || continue
        while read -r _ name; do
            [ -z "$name" ] || printf 'region\t%s %s\n' "$dir" "$name"
        done < <(TRY_STAGE_DIR=$dir bash tools/exercise.sh "${dir%%-*}" --list 2>/dev/null)
        while IFS= read -r t; do
            printf 'title\t%s %s\n' "$dir" "$t"
        done < <(sed -n 's/^## [0-9]*\. [^:]*: \(.*\) ([^()]*)$/\1/p' "$dir/exercises.md")
    done
}
index=$(mktemp)
trap 'rm -f "$index"' EXIT
if [ -n "${TEACHING_REFS_INDEX:-}" ] && [ -f "$TEACHING_REFS_INDEX" ]; then cp "$TEACHING_REFS_INDEX" "$index"
else stage_index >"$index"; fi
declare -A region=() title=()
while IFS=$'\t' read -r kind key; do
    if [ "$kind" = region ]; then region["$key"]=1; else title["$key"]=1; fi
done <"$index"

names=0 titles=0 wrong=()
while IFS= read -r hit; do  # LINE:[text](DIR/exercises.md...)
    line=${hit%%:*} link=${hit#*:}
    text=${link#[} text=${text%%](*}
    dir=${link#*](} dir=${dir%%/*}
    if [[ $text =~ ^\*([^*]+)\*$ ]]; then
        titles=$((titles + 1))
        [ -n "${title["$dir ${BASH_REMATCH[1]}"]:-}" ] ||
            wrong+=("$file:$line: *${BASH_REMATCH[1]}* is not the title of an exercise in $dir/exercises.md")
    elif [[ $text =~ ^\`[a-z0-9-]+\`((,\ |,?\ and\ )\`[a-z0-9-]+\`)*$ ]]; then
        for name in $(grep -o '`[a-z0-9-]*`' <<<"$text" | tr -d '`'); do
            names=$((names + 1))
            [ -n "${region["$dir $name"]:-}" ] ||
                wrong+=("$file:$line: \`$name\` is not an exercise region of $dir (make stage ${dir%%-*} exercise finds: $(
                    for k in "${!region[@]}"; do [[ $k == "$dir "* ]] && printf '%s ' "${k#* }"; done))")
        done
    else
        wrong+=("$file:$line: [$text]($dir/exercises.md) names no exercise: give region names in backticks or a title in italics")
    fi
done < <(grep -noE '\[[^]]+\]\([0-9][0-9]-[a-z0-9-]+/exercises\.md(#[^)]*)?\)' "$file")
if [ ${#wrong[@]} -eq 0 ]; then
    ok "$file names $names exercise region(s) and $titles exercise title(s), each as its stage has it"
else
    bad "$file names exercises that are not there:"
    printf '      %s\n' "${wrong[@]}"
fi

numbered=$(grep -nE '\b[Ee]xercises? [0-9]|\b[Ll]abs? [0-9]|\| *[0-9]+((, | and )[0-9]+)*: ' "$file")
if [ -z "$numbered" ]; then
    ok "$file names no exercise by its number"
else
    bad "$file names exercises by number (name the region or the title, linked to the stage's exercises.md):"
    printf '%s\n' "$numbered" | cut -c1-160 | sed 's/^/      /'
fi

if [ $# -eq 0 ]; then  # the test bites
    tmp=$(mktemp)
    printf '%s\n' '| 04 | [`no-such-region`](04-shared-memory/exercises.md) | [*no such title*](04-shared-memory/exercises.md) |' \
        '| 04 | lab: exercise 5 |' >"$tmp"
    out=$(TEACHING_REFS_INDEX=$index bash "$0" "$tmp")
    rm -f "$tmp"
    if grep -q 'no-such-region. is not an exercise region' <<<"$out" && grep -q 'no such title. is not the title' <<<"$out" &&
        grep -q 'names exercises by number' <<<"$out"; then
        ok "the check bites: a region and a title that do not exist and an exercise by number fail it"
    else
        bad "the check does not bite: a file with a made-up region, a made-up title and 'exercise 5' passed"
        printf '%s\n' "$out" | sed 's/^/      | /'
    fi
fi
echo "teaching: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
