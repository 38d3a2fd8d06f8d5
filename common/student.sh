#!/usr/bin/env bash
# common/student.sh: the work behind `make student [DIR=path]` (common/exercises.mk hands DIR over as
# STUDENT_DIR). Writes a copy of the repository without the answers, for a class, in STUDENT_DIR (default
# build/student): the files git knows as they are in the work tree (no .git, build/ or data/), less the
# assistants' answers (NN-*/assistant/*.answer.md: complete stage files, the exercises' answers in them);
# every exercise region cut by common/exercise_cut.awk, leaving its // TODO(exercise) marker; STUDENT.md on
# top, saying what was cut and how a student checks the work (`make stage N exercise`, in place there).
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

cutter=common/exercise_cut.awk
[ ! -f STUDENT.md ] || die "this is already a student copy (STUDENT.md): make student runs in the full repository"
root=$(git rev-parse --show-toplevel 2>/dev/null) ||
    die "make student copies the files git knows: run it in a git clone of cuda-stages"
[ "$(cd "$root" && pwd -P)" = "$(pwd -P)" ] || die "make student runs at the top of the repository ($root)"

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

# 1. the files git knows, as they are in the work tree (a tracked file deleted here is not copied); the
# assistants' answers stay out, listed in STUDENT.md below
answers='[0-9][0-9]-*/assistant/*.answer.md'
list=$work/.files
git ls-files -z --cached --others --exclude-standard -- . ":!:$answers" |
    while IFS= read -r -d '' f; do
        if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
    done | sort -zu >"$list" || die "git ls-files failed"
left_out=$(git ls-files --cached --others --exclude-standard -- "$answers" | sort -u)
mkdir "$work/copy"
tar --null --no-recursion -T "$list" -cf - | tar -xf - -C "$work/copy" || die "copying the files into $work/copy failed"
files=$(tr -cd '\0' <"$list" | wc -c)

# 2. cut every region of every source file that has one
cut_list=
regions=0
while IFS= read -r -d '' f; do
    case $f in *.cu | *.cuh | *.c | *.h | *.cc | *.cpp) ;; *) continue ;; esac
    if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
    grep -q '^[[:space:]]*// EXERCISE' -- "$f" || continue
    names=$(awk -v list=1 -f "$cutter" "$f") || exit 2  # the cutter said why, in one line
    [ -n "$names" ] || continue
    awk -f "$cutter" "$f" >"$work/copy/$f" || exit 2
    cut_list="$cut_list- \`$f\`: $(paste -sd, <<<"$names" | sed 's/,/, /g')"$'\n'
    regions=$((regions + $(wc -l <<<"$names")))
done <"$list"

# no region may be left anywhere in the copy's sources
left=$(cd "$work/copy" && grep -rlE --include='*.cu' --include='*.cuh' --include='*.c' --include='*.h' \
    --include='*.cc' --include='*.cpp' '^[[:space:]]*// EXERCISE\(' . 2>/dev/null | head -n1)
[ -z "$left" ] || die "the copy still holds an exercise region in ${left#./}: not written"

# 3. STUDENT.md
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
state="commit $commit"
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || state="$state with uncommitted changes"
{
    echo "# A student copy of cuda-stages"
    echo
    echo "Written by \`make student\` from $state."
    echo
    echo "Every exercise region of the stage files was cut out: each left its \`// TODO(exercise): name: task\`"
    echo "marker, and the answers are not in this copy. Write the code in the stage's file itself, delete"
    echo "each marker once its code is written, and check:"
    echo
    echo "    make stage N exercise TRY_RUN=0    # any machine: compiles, links, counts the markers left"
    echo "    make stage N exercise              # on a GPU: the stage's test suite on your file, PASS or FAIL"
    echo
    echo "\`EXERCISE=name\` picks the file that holds that exercise. Each stage's exercises.md says what its"
    echo "build exercise asks; the checks are those of TEACHING.md."
    echo
    echo "## Exercise regions cut"
    echo
    if [ -n "$cut_list" ]; then printf '%s' "$cut_list"; else echo "None: no stage file marked an exercise region."; fi
    if [ -n "$left_out" ]; then
        echo
        echo "## Left out"
        echo
        echo "The assistants' answers: each is a complete stage file, the answers to its exercises included"
        echo "(the review beside them, assistant/README.md, stays; its links to them do not resolve here)."
        echo
        sed 's/.*/- `&`/' <<<"$left_out"
    fi
} >"$work/copy/STUDENT.md"

# replace an earlier copy only now that the new one is complete
[ ! -d "$target" ] || rm -rf -- "$target" || die "cannot remove the earlier copy in DIR=$dir"
mv -- "$work/copy" "$target" || die "cannot move the copy to DIR=$dir"
echo "wrote $dir: $files files from $state, $regions exercise region(s) cut from $(printf '%s' "$cut_list" | grep -c '^- ') file(s) (listed in $dir/STUDENT.md)"
