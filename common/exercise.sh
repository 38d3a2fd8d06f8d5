#!/usr/bin/env bash
# common/exercise.sh NN: the work behind `make stage N exercise` (common/exercises.mk hands over the
# settings as TRY_* environment variables): common/try.sh on the skeleton cut from the stage's file, or,
# with TRY_ANSWER=1, on the stage's file itself. Not meant to be run by hand.
#
# An exercise is a region of a stage file, `// EXERCISE(name) begin: task` ... `// EXERCISE end`; its
# skeleton is the file with the region replaced by `// TODO(exercise): name: task` (common/exercise_cut.awk),
# written to build/exercise/NN/FILE. Only the files try can check hold regions: the trainers (stage 01:
# vector_add.cu). TRY_EXERCISE=name cuts that region only; TRY_EXERCISE=file every region of that file.
# In a copy written by `make student` (STUDENT.md lists what was cut), the stage's file is the student's
# work: it is tried in place, and ANSWER=1 is refused. Exit status: try's, the worst over the files.
nn=${1:-}
# shellcheck source=common/try_common.sh
source common/try_common.sh
[ -n "$nn" ] || die "usage: common/exercise.sh NN (run through make stage N exercise)"
cutter=common/exercise_cut.awk

verdict_word() {  # verdict_word RC: the verdict a try.sh exit status stands for
    case $1 in
    0) if [ "${TRY_RUN_SUITE:-1}" = 1 ]; then echo PASS; else echo "NOT RUN"; fi ;;
    1) echo FAIL ;;
    *) echo UNVERIFIED ;;
    esac
}

# sets mode (cut, or student in a student copy) and index, "FILE NAME" a line for every region of the
# stage; or exits 2 where there is none, or a name is used twice
exercise_index() {
    local f name names files=(regression.cu mnist.cu)  # the stage's files that may hold regions
    [ "$nn" != 01 ] || files=(vector_add.cu)
    index='' mode=cut
    if [ -f STUDENT.md ]; then  # "- `NN-stage/file.cu`: name, name" lines
        mode=student
        index=$(awk -v dir="$stage_dir/" 'match($0, /^- `[^`]+`: /) {
                path = substr($0, 4, RLENGTH - 6)
                if (index(path, dir) != 1) next
                n = split(substr($0, RLENGTH + 1), names, /, */)
                for (i = 1; i <= n; i++) if (names[i] != "") print substr(path, length(dir) + 1), names[i]
            }' STUDENT.md)
        [ -n "$index" ] || die "stage $nn had no exercise region when this student copy was written (STUDENT.md lists none for $stage_dir)"
        return
    fi
    for f in "${files[@]}"; do
        [ -f "$stage_dir/$f" ] || continue
        names=$(awk -v list=1 -f "$cutter" "$stage_dir/$f") || exit 2
        for name in $names; do index+="$f $name"$'\n'; done
    done
    index=${index%$'\n'}
    [ -n "$index" ] ||
        die "stage $nn has no exercise region: no '// EXERCISE(name) begin: task' line in $(printf '%s ' "${files[@]/#/$stage_dir/}")(see $stage_dir/exercises.md)"
    local twice
    twice=$(awk '{ print $2 }' <<<"$index" | sort | uniq -d | head -n1)
    [ -z "$twice" ] ||
        die "stage $nn has two exercise regions named '$twice', in $(awk -v n="$twice" '$2 == n { printf "%s%s", sep, $1; sep = " and " }' <<<"$index"): a name is unique within a stage"
}

# sets picks (the files to try) and pick_name: EXERCISE=name, the file holding that region, only it cut;
# EXERCISE=file (mnist, mnist.cu): every region of that file; neither: every file with a region, all cut
exercise_picks() {
    local f
    picks=() pick_name=
    if [ -z "${TRY_EXERCISE:-}" ]; then
        mapfile -t picks < <(awk 'NF && !seen[$1]++ { print $1 }' <<<"$index")
        return
    fi
    f=$(awk -v n="$TRY_EXERCISE" '$2 == n { print $1; exit }' <<<"$index")
    [ -z "$f" ] || pick_name=$TRY_EXERCISE
    [ -n "$f" ] || f=$(awk -v n="$TRY_EXERCISE" '$1 == n || $1 == n ".cu" { print $1; exit }' <<<"$index")
    [ -n "$f" ] ||
        die "EXERCISE=$TRY_EXERCISE: stage $nn has no such exercise; it has: $(awk '{ printf "%s%s", sep, $2; sep = ", " }' <<<"$index") (or name a file: $(awk '!seen[$1]++ { printf "%s%s", sep, $1; sep = ", " }' <<<"$index"))"
    picks=("$f")
}

# try_one FILE: says what is tried, then try.sh on it (the skeleton, the answer, or the student's file)
try_one() {
    local f=$1 regions path
    regions=${pick_name:-$(awk -v f="$f" '$1 == f { printf "%s%s", sep, $2; sep = ", " }' <<<"$index")}
    if [ $mode = student ]; then
        path=$stage_dir/$f
        echo "== exercise ($regions): $path, your file (a student copy: every TODO(exercise) marker in it counts, and the speed compares it with itself)"
    elif [ $answer = 1 ]; then
        path=$stage_dir/$f
        echo "== exercise ($regions): the answer, $path (the stage's own file: it must pass)"
    else
        path=$build/exercise/$nn/$f
        mkdir -p "$build/exercise/$nn"
        awk -v exercise="$pick_name" -f "$cutter" "$stage_dir/$f" >"$path.tmp" || { rm -f "$path.tmp"; exit 2; }
        mv "$path.tmp" "$path"
        echo "== exercise ($regions): $path, the skeleton cut from $stage_dir/$f (the task: $stage_dir/exercises.md; ANSWER=1 tries the answer)"
    fi
    TRY_OUT=$build/exercise/$nn/${f%.cu} TRY_INCLUDE_DIR=$stage_dir bash common/try.sh "$nn" "$path"
}

exercise_index
exercise_picks
answer=0
[ -n "${TRY_ANSWER:-}" ] && [ "$TRY_ANSWER" != 0 ] && answer=1
[ $mode = student ] && [ $answer = 1 ] &&
    die "ANSWER=1: this is a student copy (STUDENT.md): make student cut the answers out of it"

worst=0 summary=''
for f in "${picks[@]}"; do
    try_one "$f"
    rc=$?
    case $rc in 0 | 1 | 4) ;; *) exit $rc ;; esac  # refused (2) or no data (3): nothing more to try
    summary="$summary${summary:+, }$f: $(verdict_word $rc)"
    if [ $rc = 1 ] || { [ $rc = 4 ] && [ $worst = 0 ]; }; then worst=$rc; fi
done
if [ ${#picks[@]} -gt 1 ]; then
    echo "== exercise: stage $nn, every file with an exercise"
    echo "try: $(verdict_word $worst) ($summary)"
fi
exit $worst
