#!/usr/bin/env bash
# tools/exercise.sh NN: the work behind `make stage N exercise` (tools/exercises.mk hands over the
# settings as TRY_* environment variables): tools/try.sh on the skeleton cut from the stage's file, or,
# with TRY_ANSWER=1, on the stage's file itself. Not meant to be run by hand.
#
# An exercise is a region of a stage file, `// EXERCISE(name) begin: task` ... `// EXERCISE end`; its
# skeleton is the file with the region replaced by `// TODO(exercise): name: task` (tools/exercise_cut.awk),
# written to build/exercise/NN/FILE. Only the files try can check hold regions: the trainers (stage 01:
# vector_add.cu), the .c files of common/ that the stage is the first to use (tools/stage_common.sh),
# where its lesson may live (05's staging ring, 06's cuBLASLt descriptors): try links such a file in place of
# common's under the stage's own trainers, and the stage's kernel ladders (NN-*/NAME_ladder.cu: 09's fragment
# layout), which try links with the ladder's own test; a ladder-only stage has no other. A region whose code
# runs on the host too is checked on the CPU as well (tests/exercise/test_<name>.c), on any machine; where that
# check covers the regions tried whole, its verdict stands without a GPU (tools/try.sh, TRY_REGIONS).
# TRY_EXERCISE=name cuts that region only; TRY_EXERCISE=file every region of that file.
# In a copy written by `make student` (STUDENT.md lists what was cut), the stage's file is the student's
# work: it is tried in place, and ANSWER=1 is refused. Exit status: try's, the worst over the files.
#
# tools/exercise.sh NN --list prints the index instead, "FILE NAME" a line for every region of the stage, and
# tries nothing (tests/teaching_refs.sh reads it).
nn=${1:-}
# shellcheck source=tools/try_common.sh
source tools/try_common.sh
[ -n "$nn" ] || die "usage: tools/exercise.sh NN (run through make stage N exercise)"
cutter=tools/exercise_cut.awk

verdict_word() {  # verdict_word RC: the verdict a try.sh exit status stands for
    case $1 in
    0) if [ "${TRY_RUN_SUITE:-1}" = 1 ]; then echo PASS; else echo "NOT RUN"; fi ;;
    1) echo FAIL ;;
    *) echo UNVERIFIED ;;
    esac
}

# first_used: the .c files of common/ that the stage's trainers are the first to use, one a line (none for
# stage 02, which is the first to use all of them, and for a folder without both trainers)
first_used() {
    local prev
    [ "$nn" != 01 ] && [ -f "$stage_dir/regression.cu" ] && [ -f "$stage_dir/mnist.cu" ] || return 0
    prev=$(find . -maxdepth 1 -type d -name "$(printf '%02d' $((10#$nn - 1)))-*" | sed 's|^\./||' | head -n 1)
    [ -n "$prev" ] && [ -f "$prev/regression.cu" ] && [ -f "$prev/mnist.cu" ] || return 0
    sh tools/stage_common.sh "$stage_dir" "$prev" 2>/dev/null | grep '^common/[^/]*\.c$'
}

# sets mode (cut, or student in a student copy) and index, "FILE NAME" a line for every region of the
# stage (FILE: the trainer's or the ladder's name, or common/<name>.c); or exits 2 where there is none, or a name
# is used twice
exercise_index() {
    local f name names files=(regression.cu mnist.cu) common_files  # the stage's files that may hold regions
    [ "$nn" != 01 ] || files=(vector_add.cu)
    mapfile -t -O ${#files[@]} files < <(find "$stage_dir" -maxdepth 1 -name '*_ladder.cu' -printf '%f\n' 2>/dev/null | sort)
    common_files=$(first_used)
    index='' mode=cut
    if [ -f STUDENT.md ]; then  # "- `NN-stage/file.cu`: name, name" and "- `common/<file>.c`: name" lines
        mode=student
        index=$(awk -v dir="$stage_dir/" -v common="$common_files" 'BEGIN { n = split(common, c, "\n"); for (i = 1; i <= n; i++) mine[c[i]] = 1 }
            match($0, /^- `[^`]+`: /) {
                path = substr($0, 4, RLENGTH - 6)
                if (path in mine) file = path
                else if (index(path, dir) == 1) file = substr(path, length(dir) + 1)
                else next
                n = split(substr($0, RLENGTH + 1), names, /, */)
                for (i = 1; i <= n; i++) if (names[i] != "") print file, names[i]
            }' STUDENT.md)
        [ -n "$index" ] || die "stage $nn had no exercise region when this student copy was written (STUDENT.md lists none for $stage_dir)"
        return
    fi
    for f in "${files[@]}"; do
        [ -f "$stage_dir/$f" ] || continue
        names=$(awk -v list=1 -f "$cutter" "$stage_dir/$f") || exit 2
        for name in $names; do index+="$f $name"$'\n'; done
    done
    for f in $common_files; do
        names=$(awk -v list=1 -f "$cutter" "$f") || exit 2
        for name in $names; do index+="$f $name"$'\n'; done
    done
    index=${index%$'\n'}
    [ -n "$index" ] ||
        die "stage $nn has no exercise region: no '// EXERCISE(name) begin: task' line in $(for f in "${files[@]}"; do [ ! -f "$stage_dir/$f" ] || printf '%s ' "$stage_dir/$f"; done; printf '%s ' $common_files)(see $stage_dir/exercises.md)"
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
    [ -n "$f" ] || f=$(awk -v n="$TRY_EXERCISE" '{ b = $1; sub(/^common\//, "", b) }
        b == n || b == n ".cu" || b == n ".c" || $1 == n { print $1; exit }' <<<"$index")
    [ -n "$f" ] ||
        die "EXERCISE=$TRY_EXERCISE: stage $nn has no such exercise; it has: $(awk '{ printf "%s%s", sep, $2; sep = ", " }' <<<"$index") (or name a file: $(awk '!seen[$1]++ { printf "%s%s", sep, $1; sep = ", " }' <<<"$index"))"
    picks=("$f")
}

# try_one FILE: says what is tried, then try.sh on it (the skeleton, the answer, or the student's file)
try_one() {
    local f=$1 regions path source=$stage_dir/$1 base=${1##*/}
    case $f in common/*) source=$f ;; esac
    regions=${pick_name:-$(awk -v f="$f" '$1 == f { printf "%s%s", sep, $2; sep = ", " }' <<<"$index")}
    if [ $mode = student ]; then
        path=$source
        echo "== exercise ($regions): $path, your file (a student copy: every TODO(exercise) marker in it counts, and the speed compares it with itself)"
    elif [ $answer = 1 ]; then
        path=$source
        echo "== exercise ($regions): the answer, $path (the repository's own file: it must pass)"
    else
        path=$build/exercise/$nn/$base
        mkdir -p "$build/exercise/$nn"
        awk -v exercise="$pick_name" -f "$cutter" "$source" >"$path.tmp" || { rm -f "$path.tmp"; exit 2; }
        mv "$path.tmp" "$path"
        echo "== exercise ($regions): $path, the skeleton cut from $source (the task: $stage_dir/exercises.md; ANSWER=1 tries the answer)"
    fi
    TRY_OUT=$build/exercise/$nn/${base%.*} TRY_INCLUDE_DIR=$stage_dir TRY_REGIONS=${regions//, / } bash tools/try.sh "$nn" "$path"
}

exercise_index
if [ "${2:-}" = --list ]; then
    printf '%s\n' "$index"
    exit 0
fi
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
