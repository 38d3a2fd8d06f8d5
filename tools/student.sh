#!/usr/bin/env bash
# tools/student.sh: the work behind `make student [DIR=path] [UPTO=N]` (tools/exercises.mk hands DIR and
# UPTO over as STUDENT_DIR and STUDENT_UPTO, the Makefile's commit and dirty flag as STUDENT_COMMIT and
# STUDENT_DIRTY). Writes a copy of the repository without the answers, for a
# class, in STUDENT_DIR (default build/student): the files git knows as they are in the work tree (no .git,
# build/ or data/), less what holds answers, each listed in STUDENT.md:
#   - the stage folders after UPTO (default: the last stage), so that a copy for stage N's week holds
#     nothing of what stage N+1 gives away;
#   - the assistants' answers (the .answer.md files of the stages' assistant/ folders: complete stage
#     files) and TEACHING.md (the instructor's kit: its answer key and what each stage's numbers show);
#   - the benchmark measurements in results/ (the CSVs, the plots drawn from them, the profiles);
#   - each deliberate bug of tests/mutants/ that no longer applies to the copy's last stage (its pattern
#     is code that was cut);
# every exercise region cut by tools/exercise_cut.awk, leaving its // TODO(exercise) marker; in a later
# stage's file, the code it carries word for word from an earlier stage's region cut as well, with that
# region's marker (tools/exercise_carry.awk); the exercises' commands that need the full repository
# (a skeleton under build/exercise/, ANSWER=1) rewritten for the copy; the READMEs' measured tables and the
# <!-- measured --> passages that read them withheld, since the exercises ask for them as predictions; STUDENT.md on top, saying what was
# cut and how a student checks the work (`make stage N exercise`, in place there).
#
# STUDENT_DIR must be new, empty, or an earlier student copy (it holds STUDENT.md): that one is replaced.
# Inside the repository it must be an ignored folder (build/...), or the next copy would copy it.
# Every refusal is one "error:" line and exit 2; nothing is left half written.
set -u
set -o pipefail

die() {
    echo "error: $*" >&2
    exit 2
}

cutter=tools/exercise_cut.awk
[ ! -f STUDENT.md ] || die "this is already a student copy (STUDENT.md): make student runs in the full repository"
root=$(git rev-parse --show-toplevel 2>/dev/null) ||
    die "make student copies the files git knows: run it in a git clone of cuda-stages"
[ "$(cd "$root" && pwd -P)" = "$(pwd -P)" ] || die "make student runs at the top of the repository ($root)"

# UPTO: the last stage the copy ships (1..8 or 01..08); the stage folders are those of the work tree
mapfile -t stages < <(find . -maxdepth 1 -type d -name '[0-9][0-9]-*' | sed 's|^\./||' | sort)
[ ${#stages[@]} -gt 0 ] || die "no stage folder (NN-name/) here: make student runs in cuda-stages"
first=${stages[0]%%-*} last=${stages[${#stages[@]} - 1]%%-*}
upto=${STUDENT_UPTO:-$last}
if [[ $upto =~ ^[0-9]{1,2}$ ]]; then upto=$(printf '%02d' "$((10#$upto))"); fi
printf '%s\n' "${stages[@]}" | grep -q "^$upto-" ||
    die "UPTO=${STUDENT_UPTO:-}: not a stage; stages: ${first#0}..${last#0} (UPTO=${last#0}, the default: every stage)"
later=()  # the stage folders after UPTO
for s in "${stages[@]}"; do [[ ${s%%-*} > $upto ]] && later+=("$s"); done

dir=${STUDENT_DIR:-build/student}
target=$(realpath -m -- "$dir") || die "DIR=$dir: not a usable path"
here=$(pwd -P)
case $target/ in
"$here"/) die "DIR=$dir is the repository itself: give a new folder, e.g. DIR=../cuda-stages-student" ;;
"$here"/*)
    git check-ignore -q -- "$target" ||
        die "DIR=$dir is inside the repository and not ignored by git: the next copy would copy it (use build/student or a folder outside)" ;;
esac
if [ -e "$target" ] || [ -L "$target" ]; then
    if [ ! -d "$target" ] || [ -L "$target" ]; then die "DIR=$dir exists and is not a folder"; fi
    if [ -n "$(ls -A -- "$target")" ] && [ ! -f "$target/STUDENT.md" ]; then
        die "DIR=$dir exists, is not empty and is not a student copy (no STUDENT.md): give a new folder"
    fi
fi

mkdir -p -- "$(dirname -- "$target")" || die "cannot create the folder that holds DIR=$dir"
work=$(mktemp -d "$(dirname -- "$target")/.student.XXXXXX") || die "cannot write next to DIR=$dir"
trap 'rm -rf -- "$work"' EXIT

# 1. the files git knows, as they are in the work tree (a tracked file deleted here is not copied), less the
# stage folders after UPTO, the assistants' answers and TEACHING.md: listed in STUDENT.md below
answers='[0-9][0-9]-*/assistant/*.answer.md'
# the measurements the READMEs' timing tables are made from (step 5): the benchmark CSVs, the plots drawn from
# them and the profiles; results/loop/ (the prompt loop's rounds) and the sanitizer and try logs stay
measured_files=(':(glob)results/*.csv' ':(glob)results/*.csv.gz' ':(glob)results/*.png' ':(glob)results/*-profile-*.txt')
excluded=(":!:$answers" ":!:TEACHING.md")
for m in "${measured_files[@]}"; do excluded+=(":(exclude,${m#:(}"); done
for s in "${later[@]}"; do excluded+=(":!:$s/"); done
list=$work/.files
git ls-files -z --cached --others --exclude-standard -- . "${excluded[@]}" |
    while IFS= read -r -d '' f; do
        if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
    done | sort -zu >"$list" || die "git ls-files failed"
left_out=$(git ls-files --cached --others --exclude-standard -- "$answers" | sort -u)
measured_out=$(git ls-files --cached --others --exclude-standard -- "${measured_files[@]}" | sort -u)
mkdir "$work/copy"
tar --null --no-recursion -T "$list" -cf - | tar -xf - -C "$work/copy" || die "copying the files into $work/copy failed"
files=$(tr -cd '\0' <"$list" | wc -c)

# 2. cut every region of every source file that has one
cut_list=
regions=0
with_regions=()  # the files of the stage folders that hold regions, in stage order: what later ones carry
while IFS= read -r -d '' f; do
    case $f in *.cu | *.cuh | *.c | *.h | *.cc | *.cpp) ;; *) continue ;; esac
    if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
    grep -q '^[[:space:]]*// EXERCISE' -- "$f" || continue
    names=$(awk -v list=1 -f "$cutter" "$f") || exit 2  # the cutter said why, in one line
    [ -n "$names" ] || continue
    awk -f "$cutter" "$f" >"$work/copy/$f" || exit 2
    case $f in [0-9][0-9]-*/*) with_regions+=("$f") ;; esac
    regions=$((regions + $(wc -l <<<"$names")))
done <"$list"

# a later stage's file carries an earlier stage's answer forward (the ladder adds one idea a stage): the
# same code is cut there too, or the copy would hand the earlier answer out. Then each file's line in
# STUDENT.md names its own regions first, the carried ones after.
carried=0
while IFS= read -r -d '' f; do
    case $f in [0-9][0-9]-*/*.cu) ;; *) continue ;; esac
    earlier=()
    for e in "${with_regions[@]}"; do [[ ${e%%-*} < ${f%%-*} ]] && earlier+=("$e"); done
    own=
    [ ! -f "$f" ] || ! grep -q '^[[:space:]]*// EXERCISE' -- "$f" || own=$(awk -v list=1 -f "$cutter" "$f")
    more=
    if [ ${#earlier[@]} -gt 0 ]; then
        more=$(awk -v list=1 -f tools/exercise_carry.awk "${earlier[@]}" "$work/copy/$f") || exit 2
        if [ -n "$more" ]; then
            if ! awk -f tools/exercise_carry.awk "${earlier[@]}" "$work/copy/$f" >"$work/carried" ||
                ! mv "$work/carried" "$work/copy/$f"; then
                die "cutting the carried regions out of $f failed"
            fi
            carried=$((carried + $(wc -l <<<"$more")))
        fi
    fi
    names=$(printf '%s\n%s\n' "$own" "$more" | grep .)
    [ -z "$names" ] || cut_list="$cut_list- \`$f\`: $(paste -sd, <<<"$names" | sed 's/,/, /g')"$'\n'
done <"$list"
while IFS= read -r -d '' f; do  # regions outside the stage folders, in list order as before
    case $f in [0-9][0-9]-*/*) continue ;; *.cu | *.cuh | *.c | *.h | *.cc | *.cpp) ;; *) continue ;; esac
    if [ ! -f "$f" ] || ! grep -q '^[[:space:]]*// EXERCISE' -- "$f"; then continue; fi
    names=$(awk -v list=1 -f "$cutter" "$f")
    [ -z "$names" ] || cut_list="$cut_list- \`$f\`: $(paste -sd, <<<"$names" | sed 's/,/, /g')"$'\n'
done <"$list"

# no region may be left anywhere in the copy's sources
left=$(cd "$work/copy" && grep -rlE --include='*.cu' --include='*.cuh' --include='*.c' --include='*.h' \
    --include='*.cc' --include='*.cpp' '^[[:space:]]*// EXERCISE\(' . 2>/dev/null | head -n1)
[ -z "$left" ] || die "the copy still holds an exercise region in ${left#./}: not written"

# 3. the deliberate bugs (tests/mutants/) are checked against the copy's files they apply to: the shipped stages
# their `# stages:` line names, else the last shipped stage that has their file. One whose pattern no longer
# changes such a file matched code that was cut, and holds that answer in its pattern
mutants_out=
for m in "$work"/copy/tests/mutants/*.sed; do
    [ -f "$m" ] || continue
    mfile=$(sed -n 's/^# file: *//p' "$m")
    mstages=$(sed -n 's/^# stages: *//p' "$m")
    targets=()
    for s in "${stages[@]}"; do
        [[ ${s%%-*} > $upto ]] && continue
        if [ -n "$mstages" ]; then case " $mstages " in *" ${s%%-*} "*) targets+=("$s") ;; esac
        elif [ -f "$work/copy/$s/$mfile" ]; then targets=("$s"); fi
    done
    [ -n "$mstages" ] && [ ${#targets[@]} -eq 0 ] && continue  # skipped there: its stages are not shipped
    applies=$((${#targets[@]} > 0))
    for s in "${targets[@]}"; do
        target_file=$work/copy/$s/$mfile
        [ -f "$target_file" ] && ! sed -f "$m" "$target_file" | cmp -s - "$target_file" || applies=0
    done
    [ $applies = 1 ] && continue
    rm -f -- "$m"
    mutants_out="$mutants_out${m#"$work/copy/"}"$'\n'
done

# 4. the exercises' commands, as the copy runs them: the stage's file there is the skeleton (there is no
# build/exercise/NN/ copy of it to take; a .c skeleton's file is common/'s), and the answers ANSWER=1 would try
# are not there
for s in "${stages[@]}"; do
    ex=$work/copy/$s/exercises.md
    [ -f "$ex" ] || continue
    sed -i -E -e "s#build/exercise/${s%%-*}/([a-z_]+\.c)([^a-z]|\$)#common/\1\2#g" -e "s|build/exercise/${s%%-*}/|$s/|g" \
        -e '/^    make stage [0-9]* exercise (.* )?ANSWER=1/d' \
        -e 's@  *# your cop(y|ies): exercise rewrites its skeleton$@   # your copy of the skeleton@' "$ex" ||
        die "rewriting $s/exercises.md for the copy failed"
done

# 5. the measured figures, which the exercises ask the student to predict before measuring: in every .md file, each
# timing table of bench/make_tables.py (the blocks results:, steps:, outcome:, ladder:, sweep:, profile:, each
# between its <!-- NAME begin --> and <!-- NAME end --> markers) and each hand-written <!-- measured begin --> ...
# <!-- measured end --> passage that reads them becomes one line saying how to measure them, between
# <!-- withheld:NAME begin --> and <!-- withheld:NAME end -->. Without its own markers make_tables leaves that
# place alone, so the copy's `make_tables --check` holds; the predictions tables and the sanitizer and
# prompt-loop blocks stay.
withheld=0
withhold='
function measure(name,    what) {  # the command that measures the block: the stage verb, or make bench
    if (n == "" || name ~ /^sweep:/) return "`make bench`"
    if (name ~ /^ladder:/) { what = name; sub(/^ladder:/, "", what); return "`make stage " n " ladder LADDER=" what "`" }
    if (name ~ /^profile:/) return "`make stage " n " profile`"
    return "`make stage " n (n <= 2 ? " run`" : " compare`")
}
function withheld(    how) {  # the block that was between the markers of name, as one line between the withheld ones
    how = cmds == "" ? measure(name) : cmds
    if (how == "`make bench`") how = how "."
    else how = how ", or every table with `make bench`."
    print "<!-- withheld:" name " begin -->"
    print "*Withheld from the student copy: " (name == "measured" ? "what was measured here, and what it showed." : "a measured table.") \
        " The exercises ask you to predict these figures: measure them on a GPU with " how "*"
    print "<!-- withheld:" name " end -->"
    count++
}
skip != "" {
    if ($0 == skip) { withheld(); skip = "" }
    else if ($0 ~ /^<!-- (results|steps|outcome|ladder|sweep|profile):[^>]* begin -->$/) {  # a table the passage shows
        inner = substr($0, 6, length($0) - 15)
        if (index(" " cmds, " " measure(inner)) == 0 && measure(inner) != "`make bench`") cmds = cmds (cmds == "" ? "" : ", ") measure(inner)
    }
    next
}
/^<!-- (results|steps|outcome|ladder|sweep|profile):[^>]* begin -->$|^<!-- measured begin -->$/ {
    name = substr($0, 6, length($0) - 15)
    skip = "<!-- " name " end -->"
    cmds = ""
    next
}
{ print }
END {
    if (skip != "") { print FILENAME ": \"" skip "\" missing" > "/dev/stderr"; exit 1 }
    print count + 0 > counted
}'
while IFS= read -r -d '' f; do
    case $f in *.md) ;; *) continue ;; esac
    if [ ! -f "$work/copy/$f" ] || [ -L "$work/copy/$f" ]; then continue; fi
    n=
    case $f in [0-9][0-9]-*/*) n=$((10#${f%%-*})) ;; esac
    awk -v n="$n" -v counted="$work/counted" "$withhold" "$work/copy/$f" >"$work/withheld" ||
        die "withholding the measured figures of $f failed"
    cmp -s "$work/withheld" "$work/copy/$f" || mv "$work/withheld" "$work/copy/$f" ||
        die "withholding the measured figures of $f failed"
    withheld=$((withheld + $(cat "$work/counted")))
done <"$list"

# 6. STUDENT.md
bullets() {  # the lines of stdin, each a "- `path`" item; blank ones dropped
    local l
    while IFS= read -r l; do [ -z "$l" ] || printf -- "- \`%s\`\n" "$l"; done
}
state="commit ${STUDENT_COMMIT:-unknown}"
[ "${STUDENT_DIRTY:-}" != 1 ] || state="$state with uncommitted changes"
{
    echo "# A student copy of cuda-stages"
    echo
    echo "Written by \`make student\` from $state, with the stages up to ${upto#0} (UPTO=${upto#0})."
    echo
    echo "Every exercise region of the stage files and of common/ was cut out: each left its"
    echo "\`// TODO(exercise): name: task\` marker, and the answers are not in this copy. Where a later stage's"
    echo "file carries an earlier stage's answer forward, that code is cut there too, with the earlier region's"
    echo "marker: write the earlier answer there again. A region of common/ (a file the stage is the first to"
    echo "use) is code every later stage runs too: their trainers work once it is written. Write the code in"
    echo "the file itself, delete each marker once its code is written, and check:"
    echo
    echo "    make stage N exercise TRY_RUN=0    # any machine: compiles, links, counts the markers left"
    echo "    make stage N exercise              # on a GPU: the stage's test suite on your file, PASS or FAIL"
    echo
    echo "\`EXERCISE=name\` picks the file that holds that exercise. Each stage's exercises.md says what its"
    echo "build exercise asks; its commands are those of this copy, where the stage's file is the skeleton."
    echo
    echo "## Exercise regions cut"
    echo
    if [ -n "$cut_list" ]; then printf '%s' "$cut_list"; else echo "None: no stage file marked an exercise region."; fi
    echo
    echo "## Measurements withheld"
    echo
    echo "The exercises ask you to predict a figure, then measure it. So the READMEs' measured tables, the"
    echo "passages that read them and the results/ files they were made from are not in this copy: each of the"
    echo "$withheld places is one line between \`<!-- withheld:NAME begin -->\` and \`<!-- withheld:NAME end -->\`"
    echo "that says which command measures it on a GPU (\`make stage N compare\`, \`make stage N ladder\`,"
    echo "\`make stage N profile\`, or \`make bench\` for every table). The predictions tables are there: compare"
    echo "yours with them, then with what you measure."
    echo
    echo "## Left out"
    echo
    echo "What holds answers. Citations of these paths do not resolve here."
    echo
    for s in "${later[@]}"; do echo "- \`$s/\`"; done
    printf '%s\n%s\n%s\n' "$left_out" "$mutants_out" "$measured_out" | bullets
    [ ! -f TEACHING.md ] || echo "- \`TEACHING.md\`"
} >"$work/copy/STUDENT.md"

# replace an earlier copy only now that the new one is complete
[ ! -d "$target" ] || rm -rf -- "$target" || die "cannot remove the earlier copy in DIR=$dir"
mv -- "$work/copy" "$target" || die "cannot move the copy to DIR=$dir"
echo "wrote $dir: $files files from $state, stages ${first#0}..${upto#0}, $regions exercise region(s) cut from $(printf '%s' "$cut_list" | grep -c '^- ') file(s) and $carried carried into later stages (listed in $dir/STUDENT.md)"
