#!/usr/bin/env bash
# tests/student_smoke.sh: a student copy (`make student`) is whole and keeps its secrets; no GPU needed.
#
#     bash tests/student_smoke.sh          (make check runs it)
#
#   1. the leak search bites: a copy with a later stage's file put back uncut leaks the answers it carries, one
#      with a stage README put back whole and a results CSV shows the measured figures;
#   2. for every UPTO (1 .. the last stage), `make student UPTO=N`: the stage folders after N are absent
#      and listed in STUDENT.md; no answer line of any region of the stages shipped is anywhere in the copy
#      (below); no measured figure the exercises ask to predict is anywhere in it either (no line with a figure
#      of the READMEs' timing tables or <!-- measured --> passages, in any file or in what bench/make_tables.py
#      --print makes of the copy's results/; each such place withheld, the results/ files left out); every
#      command of the exercises works there (no skeleton under build/exercise/, no ANSWER=1, no git, no path
#      the copy left out); its citations check passes;
#   3. the whole copy (every stage): its quick suites pass in it (citations, prose history, README
#      words, the bench tables and their generator's unit tests) and `make -n all` finds every source; the
#      copy's full `make test` and `make check` build every stage (minutes) and are not run here;
#   4. UPTO that is not a stage is refused: one "error:" line, exit 2, no copy.
#
# An answer line is a line between a region's markers in a stage file or a file of common/ (its stage: the
# first to use it), trimmed, unless it is trivial: no
# letter or digit (braces), a kernel's launch-geometry idiom (an index from blockIdx, blockDim and
# threadIdx, a bounds check that returns, the warp and lane split, a __syncthreads, a shuffle loop's
# header), or a line the student
# is given anyway: in the copy's own file (its skeleton), in common/, or in an earlier stage's folder. Every
# other answer line found anywhere in the copy is a leak, unless tests/student_leaks.allow excuses it.
# Each check prints one line; the last line is "student: N passed, N failed".
set -u
make=${MAKE:-make}
work=build/student-smoke
rm -rf "$work"
mkdir -p "$work"
log=$work/last.log
allow_file=tests/student_leaks.allow
# shellcheck source=tests/smoke_common.sh
source tests/smoke_common.sh

# answers FILE: "NAME<TAB>line" for every answer line of FILE's regions, trimmed, the trivial ones left out
answers() {
    awk '
        function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
        /^[ \t]*\/\/ EXERCISE\(/ { name = $0; sub(/^[ \t]*\/\/ EXERCISE\(/, "", name); sub(/\).*/, "", name)
                                  inside = 1; task = 1; next }
        /^[ \t]*\/\/ EXERCISE end/ { inside = 0; next }
        inside && task && /^[ \t]*\/\/:/ { next }
        inside {
            task = 0
            l = trim($0)
            if (l !~ /[A-Za-z0-9]/) next
            code = l; sub(/[ \t]*\/\/.*$/, "", code)
            if (code ~ /^(const )?(int|int64_t|unsigned) [a-z0-9_]+ = [^;]*(blockIdx|threadIdx|gridDim)[^;]*;$/) next
            if (code ~ /^(int|int64_t) [a-z0-9_]+ = [^,;]*(blockIdx|threadIdx)[^,;]*, [a-z0-9_]+ = [^;]*;$/) next
            if (code ~ /^if \([^;]*\) return;$/ || code ~ /^__syncthreads\(\);$/) next
            if (code ~ /^for \(int offset = [^;]*; offset > 0; offset \/= 2\) \{$/) next
            print name "\t" l
        }' "$1"
}

# owner[common/<name>.c]: the stage whose exercise a region of common/ is (the first stage to use the file, as
# tools/exercise.sh --list says)
declare -A owner=()
for d in [0-9][0-9]-*/; do
    d=${d%/}
    while read -r f _; do
        case $f in common/*) owner[$f]=${d%%-*} ;; esac
    done < <(TRY_STAGE_DIR=$d bash tools/exercise.sh "${d%%-*}" --list 2>/dev/null)
done

# leaks COPY: "REGION<TAB>PATH<TAB>line" for each answer line found in COPY (PATH relative to it), for every
# region of the stage files that COPY ships and of common/'s files, read from the repository's own files
leaks() {
    local copy=$1 f s d name line given hit
    for f in [0-9][0-9]-*/*.cu "${!owner[@]}"; do
        if [ ! -f "$copy/$f" ] || ! grep -q '^[[:space:]]*// EXERCISE(' "$f"; then continue; fi
        s=${f%%-*}
        [ -z "${owner[$f]:-}" ] || s=${owner[$f]}
        given=("$copy/$f" "$copy/common")
        for d in "$copy"/[0-9][0-9]-*/; do d=${d%/}; [[ ${d##*/} < $s ]] && given+=("$d"); done
        while IFS=$'\t' read -r name line; do
            grep -rqF -- "$line" "${given[@]}" && continue
            while IFS= read -r hit; do printf '%s\t%s\t%s\n' "$name" "${hit#"$copy"/}" "$line"; done < <(grep -rlF -- "$line" "$copy")
        done < <(answers "$f")
    done
}

# figures FILE...: the lines of the FILEs' measured blocks (bench/make_tables.py's timing tables, results: steps:
# outcome: ladder: sweep: profile:, and the <!-- measured --> passages that read them) that hold a figure, trimmed:
# a table row or a profile line (three decimals or more), or a number with a unit of time, speed or ratio. These
# are the figures the exercises ask to predict, which make student withholds
withheld_kinds='^<!-- (results|steps|outcome|ladder|sweep|profile):[^>]* begin -->$|^<!-- measured begin -->$'
figures() {
    awk -v kinds="$withheld_kinds" '
        function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
        skip != "" {
            if ($0 == skip) { skip = ""; next }
            l = trim($0)
            if (length(l) < 20 || l ~ /^<!-- /) next
            if (l ~ /^\|.*[0-9]/ || gsub(/[0-9]\.[0-9]/, "&", l) >= 3 || l ~ /[0-9] ?(×|µs|ms|%|[GT]B\/s|[GT]FLOP\/s)/) print l
            next
        }
        $0 ~ kinds { skip = "<!-- " substr($0, 6, length($0) - 15) " end -->" }' "$@"
}

# shown COPY: "PATH<TAB>line" for each withheld figure line found in COPY, from the .md files COPY ships (read from
# the repository's own), then from what bench/make_tables.py --print makes of the copy's own results/
shown() {
    local copy=$1 f md=()
    while IFS= read -r f; do [ -f "$copy/$f" ] && md+=("$f"); done < <(git ls-files '*.md')
    figures "${md[@]}" | sort -u >"$work/figures"
    [ -s "$work/figures" ] || return 0
    grep -rnoFf "$work/figures" "$copy" | sed -E 's/^([^:]*):[0-9]+:/\1\t/' | sed "s|^$copy/||"
    (cd "$copy" && python3 bench/make_tables.py --print 2>/dev/null) | grep -oFf "$work/figures" | sed 's/^/make_tables --print\t/'
}

allowed() {  # allowed REGION PATH: excused by tests/student_leaks.allow
    sed 's/#.*//' "$allow_file" | awk -v r="$1" -v p="$2" '$1 == r && $2 == p { hit = 1 } END { exit !hit }'
}

# ----------------------------------------------------------------------------
# 1. the search bites: the whole copy with one later file put back uncut (06's regression.cu carries 04's
# and 05's answers) leaks exactly those regions

mapfile -t stages < <(find . -maxdepth 1 -type d -name '[0-9][0-9]-*' | sed 's|^\./||' | sort)
broken=$work/broken-copy
if "$make" --no-print-directory student DIR="$broken" >"$log" 2>&1 && [ -f 06-cublas-cudnn/regression.cu ]; then
    cp 06-cublas-cudnn/regression.cu "$broken/06-cublas-cudnn/regression.cu"
    found=$(leaks "$broken" | awk -F'\t' '$2 == "06-cublas-cudnn/regression.cu" { print $1 }' | sort -u | tr '\n' ' ')
    if [ "$found" = "block-reduction epoch-bookkeeping warp-sums " ]; then
        ok "the leak search finds 04's and 05's answers in a copy whose 06-cublas-cudnn/regression.cu is not cut"
    else
        echo "found: $found" >"$log"; bad "the leak search misses the answers of an uncut later file"
    fi
else
    bad "make student for the leak search's self-test"
fi

# the figures' search bites too: a stage README put back whole shows its tables and passages, and a results CSV
# put back lets make_tables --print write them again
if [ -d "$broken" ]; then
    cp 03-fused-kernels/README.md "$broken/03-fused-kernels/README.md"
    cp "$(git ls-files ':(glob)results/*.csv' | grep -vE -- '-(breakdown|ladders)\.csv$' | head -n1)" "$broken/results/"
    found=$(shown "$broken" | cut -f1 | sort -u | tr '\n' ' ')
    if [[ $found == *"03-fused-kernels/README.md "* && $found == *"make_tables --print "* ]]; then
        ok "the figures' search finds a README put back whole and the tables a results CSV put back would write"
    else
        echo "found: $found" >"$log"; bad "the figures' search misses a README put back whole or a results CSV"
    fi
fi

# ----------------------------------------------------------------------------
# 2. a copy for every UPTO

declare -A excused_used=()
for stage in "${stages[@]}"; do
    nn=${stage%%-*} n=$((10#${stage%%-*}))
    copy=$work/upto-$nn
    if ! "$make" --no-print-directory student DIR="$copy" UPTO="$n" >"$log" 2>&1; then bad "make student UPTO=$n"; continue; fi
    # the stages after UPTO: absent, and said so
    wrong=
    for s in "${stages[@]}"; do
        if [[ ${s%%-*} > $nn ]]; then
            [ ! -e "$copy/$s" ] || wrong="$wrong $s(shipped)"
            grep -qxF -- "- \`$s/\`" "$copy/STUDENT.md" || wrong="$wrong $s(not listed)"
        else
            [ -d "$copy/$s" ] || wrong="$wrong $s(missing)"
        fi
    done
    if [ -z "$wrong" ]; then ok "UPTO=$n: stages ${stages[0]%%-*}..$nn shipped, the later ones left out and listed in STUDENT.md"
    else echo "$wrong" >"$log"; bad "UPTO=$n: the stage folders are wrong:$wrong"; fi

    # no answer anywhere
    leaks "$copy" >"$work/leaks-$nn"
    : >"$log"
    while IFS=$'\t' read -r name path line; do
        if allowed "$name" "$path"; then excused_used["$name $path"]=1; continue; fi
        printf '%s: %s holds "%s"\n' "$name" "$path" "$line" >>"$log"
    done <"$work/leaks-$nn"
    if [ ! -s "$log" ]; then
        ok "UPTO=$n: no answer line of the $(grep -c "^- \`.*\`: " "$copy/STUDENT.md") cut file(s)' regions anywhere in the copy$(
            [ -s "$work/leaks-$nn" ] && echo " (but $(cut -f1,2 "$work/leaks-$nn" | sort -u | wc -l) region/file pair(s) excused by $allow_file)")"
    else
        bad "UPTO=$n: answers leak into the copy ($(wc -l <"$log") line(s); the first ones:)"
    fi

    # no measured figure that an exercise asks to predict: the tables and passages withheld, each place one line
    # that says how to measure it; the results/ files they come from left out and listed
    : >"$log"
    excused=
    while IFS=$'\t' read -r path line; do
        if allowed measured "$path"; then excused_used["measured $path"]=1; excused="$excused $path"; continue; fi
        printf '%s holds "%s"\n' "$path" "$line" >>"$log"
    done < <(shown "$copy")
    markers=$(grep -rlE --include='*.md' "$withheld_kinds" "$copy" | sed "s|^$copy/||" | tr '\n' ' ')
    places=$(grep -rhE --include='*.md' '^<!-- withheld:[^>]* begin -->$' "$copy" | wc -l)
    missing=
    while IFS= read -r f; do
        [ ! -e "$copy/$f" ] && grep -qxF -- "- \`$f\`" "$copy/STUDENT.md" || missing="$missing $f"
    done < <(git ls-files ':(glob)results/*.csv' ':(glob)results/*.csv.gz' ':(glob)results/*.png' ':(glob)results/*-profile-*.txt')
    if [ ! -s "$log" ] && [ -z "$markers" ] && [ -z "$missing" ] && [ "${places:-0}" -gt 0 ]; then
        ok "UPTO=$n: no measured figure an exercise asks to predict is in the copy ($(wc -l <"$work/figures") lines searched; $places places withheld, the results/ files left out$(
            [ -z "$excused" ] || echo "; $(tr ' ' '\n' <<<"$excused" | sort -u | grep -c .) test fixture(s) excused by $allow_file"))"
    else
        echo "markers left:${markers:- none}; results/ files shipped or not listed:${missing:- none}" >>"$log"
        bad "UPTO=$n: measured figures in the copy ($(wc -l <"$log") line(s))"
    fi

    # every command of the exercises works in the copy
    : >"$log"
    for ex in "$copy"/[0-9][0-9]-*/exercises.md; do
        while IFS= read -r cmd; do
            case $cmd in *"git "*) echo "${ex#"$copy"/}: needs .git: $cmd" >>"$log" ;; esac
            case $cmd in *"ANSWER=1"*) echo "${ex#"$copy"/}: the answers are not there: $cmd" >>"$log" ;; esac
            if [[ $cmd =~ (^|[[:space:]])cp[[:space:]]+([^#]*[^[:space:]#])[[:space:]]+mine/ ]]; then
                for src in ${BASH_REMATCH[2]}; do
                    [ -e "$copy/$src" ] || echo "${ex#"$copy"/}: copies $src, not in the copy: $cmd" >>"$log"
                done
            fi
        done < <(grep -E "^    (make|mkdir|cp|git) |\`(git|cp) [^\`]*\`" "$ex")
        # nor does it send the student to what the copy left out
        while IFS= read -r gone; do
            grep -qF -- "$gone" "$ex" && echo "${ex#"$copy"/}: cites $gone, which the copy left out" >>"$log"
        done < <(sed -n "/^## Left out/,/^## /s/^- \`\\([^\`]*\\)\`\$/\\1/p" "$copy/STUDENT.md")
    done
    if [ ! -s "$log" ]; then ok "UPTO=$n: every command of the exercises works in the copy (no build/exercise/ skeleton, ANSWER=1, git or path left out)"
    else bad "UPTO=$n: exercise commands that do not work in the copy"; fi

    if (cd "$copy" && bash tests/citations.sh) >"$log" 2>&1; then ok "UPTO=$n: the copy's citations check passes: $(tail -n1 "$log")"
    else bad "UPTO=$n: the copy's citations check"; fi
done
# an allowlist entry must still excuse something
while read -r name path _; do
    [ -n "$name" ] || continue
    if [ -z "${excused_used["$name $path"]:-}" ]; then
        echo "'$name $path' excuses nothing" >"$log"; bad "$allow_file: '$name $path' excuses nothing in any copy: remove the line"
    fi
done < <(sed 's/#.*//' "$allow_file")

# ----------------------------------------------------------------------------
# 3. the whole copy: its quick suites

copy=$work/upto-${stages[${#stages[@]} - 1]%%-*}
for check in "history:bash tests/history_smoke.sh" "words:bash tests/readme_words.sh" \
    "bench tables:python3 bench/make_tables.py --check" "bench generator:python3 -m unittest discover -s tests/bench"; do
    if (cd "$copy" && ${check#*:}) >"$log" 2>&1; then ok "whole copy: ${check%%:*} passes in it (${check#*:})"
    else bad "whole copy: ${check%%:*} fails in it (${check#*:})"; fi
done
if "$make" --no-print-directory -C "$copy" -n all >"$log" 2>&1; then ok "whole copy: make -n all finds every source it needs"
else bad "whole copy: make -n all"; fi

# ----------------------------------------------------------------------------
# 4. refusals

for upto in 12 x 0; do
    "$make" --no-print-directory -s student DIR="$work/refused" UPTO="$upto" >"$work/stdout" 2>"$log"
    status=$?
    if [ $status -eq 2 ] && [ "$(grep -c '^error: UPTO=' "$log")" -eq 1 ] && [ "$(grep -cvE '^error:|^make(\[[0-9]+\])?: ' "$log")" -eq 0 ] &&
        [ ! -e "$work/refused" ] && [ ! -s "$work/stdout" ]; then
        ok "make student UPTO=$upto is refused: $(grep '^error:' "$log" | cut -c1-90)"
    else
        bad "make student UPTO=$upto (exit $status, want 2, one error: line and no copy)"
    fi
done

echo "student: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
