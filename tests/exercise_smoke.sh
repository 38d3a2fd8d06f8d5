#!/usr/bin/env bash
# tests/exercise_smoke.sh: the exercise cutter (tools/exercise_cut.awk) and `make student`, no GPU needed.
#
#     bash tests/exercise_smoke.sh
#
#   1. the cutter on a small file with two regions: the skeleton of all regions and of one, byte for byte;
#      the names it lists; putting the answers back (tests/exercise_paste.awk) gives the file again;
#   2. the check itself can fail: a skeleton changed outside its region, one with a changed task, one
#      that cuts nothing and one that cuts the wrong region are each caught;
#   3. refusals, one "error:" line and exit 2, no output: nested, unclosed and unopened regions, a name
#      used twice, a malformed marker, an unknown or invalid EXERCISE; and through tools/exercise.sh, a stage
#      without a region and a name used in both of a stage's files;
#   4. make student: the copy has every file git knows but the assistants' answers (NN-*/assistant/
#      *.answer.md), TEACHING.md, the mutants whose code was cut and the measurements of results/ (absent and
#      listed in STUDENT.md; a README's measured figures withheld: tests/student_smoke.sh), each
#      region cut (a later stage's file may have an earlier answer cut too: tests/student_smoke.sh), the
#      exercises' commands rewritten for the copy,
#      STUDENT.md lists them, everything else is unchanged, `make -n all` finds every file, stage 01's
#      programs and each cut file build, and `make stage 1 exercise` there checks the student's file in
#      place (`make stage 6 exercise` common/lt_matmul.c, with its CPU check; `make stage 9 exercise` its kernel
#      ladder, whose CPU check FAILs there until the student writes the region); a DIR that is not a new
#      folder or an earlier copy is refused.
#
# The skeletons of the real stage files are checked by tests/try_smoke.sh (through make stage N exercise).
# Each check prints one line; the last line is "exercise: N passed, N failed".
set -u
make=${MAKE:-make}
work=build/exercise-smoke
rm -rf "$work"
mkdir -p "$work"
log=$work/last.log
cutter=tools/exercise_cut.awk
paste=tests/exercise_paste.awk

log_tail=15
# shellcheck source=tests/smoke_common.sh
source tests/smoke_common.sh

# same_file NAME GOT WANT
same_file() {
    if diff "$3" "$2" >"$log" 2>&1; then ok "$1"; else bad "$1"; fi
}

# pastes_back NAME STAGE SKELETON CUT: exit 0 when the answers put back into SKELETON give STAGE
pastes_back() {
    awk -v cut="$4" -f "$paste" "$2" "$3" >"$work/rebuilt" 2>"$log" && cmp -s "$work/rebuilt" "$2"
}

# refused NAME PATTERN COMMAND...: exit 2, one "error:" line on stderr matching PATTERN, nothing on stdout
refused() {
    local name=$1 pattern=$2 status
    shift 2
    "$@" >"$work/stdout" 2>"$log"
    status=$?
    if [ $status -ne 2 ]; then bad "$name (exit $status, want 2)"; return; fi
    # one error: line, and nothing else but make's own lines ("make: *** ... Error 2", a jobserver warning)
    if [ "$(grep -c '^error:' "$log")" -ne 1 ] || [ "$(grep -cvE '^error:|^make(\[[0-9]+\])?: ' "$log")" -ne 0 ]; then
        bad "$name (want one error: line)"
        return
    fi
    if ! grep -Eq "^error: .*$pattern" "$log"; then bad "$name (the error line does not say: $pattern)"; return; fi
    if [ -s "$work/stdout" ]; then cp "$work/stdout" "$log"; bad "$name (wrote output)"; return; fi
    ok "$name: $(grep '^error:' "$log" | cut -c1-100)"
}

# ----------------------------------------------------------------------------
# 1. the cutter on a file of two regions

cat >"$work/stage.cu" <<'EOF'
// a stage file
__global__ void fill(float *x, int n) {
    // EXERCISE(fill-kernel) begin: one thread per element writes x[i] = i
    //: (only i < n: the last block sticks out)
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)i;
    // EXERCISE end
}

static void run(float *x, int n) {
	// EXERCISE(launch) begin: launch fill with 256 threads a block
	fill<<<(n + 255) / 256, 256>>>(x, n);
	// EXERCISE end
    // a comment that mentions EXERCISE( but is no marker
}
EOF
cat >"$work/want-all.cu" <<'EOF'
// a stage file
__global__ void fill(float *x, int n) {
    // TODO(exercise): fill-kernel: one thread per element writes x[i] = i
    //: (only i < n: the last block sticks out)
}

static void run(float *x, int n) {
	// TODO(exercise): launch: launch fill with 256 threads a block
    // a comment that mentions EXERCISE( but is no marker
}
EOF
cat >"$work/want-launch.cu" <<'EOF'
// a stage file
__global__ void fill(float *x, int n) {
    // EXERCISE(fill-kernel) begin: one thread per element writes x[i] = i
    //: (only i < n: the last block sticks out)
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)i;
    // EXERCISE end
}

static void run(float *x, int n) {
	// TODO(exercise): launch: launch fill with 256 threads a block
    // a comment that mentions EXERCISE( but is no marker
}
EOF

awk -f "$cutter" "$work/stage.cu" >"$work/all.cu" 2>"$log"
same_file "cutter: every region cut, the indentation (spaces, a tab) and //: lines kept" "$work/all.cu" "$work/want-all.cu"
awk -v exercise=launch -f "$cutter" "$work/stage.cu" >"$work/launch.cu" 2>"$log"
same_file "cutter: EXERCISE=launch cuts that region only" "$work/launch.cu" "$work/want-launch.cu"
awk -v list=1 -f "$cutter" "$work/stage.cu" >"$work/names" 2>"$log"
printf 'fill-kernel\nlaunch\n' >"$work/want-names"
same_file "cutter: list=1 names the regions in order" "$work/names" "$work/want-names"
printf 'int x;\n' >"$work/plain.cu"
awk -f "$cutter" "$work/plain.cu" >"$work/plain-out.cu" 2>"$log"
same_file "cutter: a file without a region comes out unchanged" "$work/plain-out.cu" "$work/plain.cu"

if pastes_back x "$work/stage.cu" "$work/all.cu" all; then ok "paste: the answers put back into the skeleton give the stage file"
else bad "paste: the answers put back into the skeleton do not give the stage file"; fi
if pastes_back x "$work/stage.cu" "$work/launch.cu" launch; then ok "paste: the same for the skeleton of one region"
else bad "paste: the same for the skeleton of one region"; fi

# ----------------------------------------------------------------------------
# 2. the check catches a skeleton that is not the stage file outside its regions

# mutant NAME CUT FILE: the check must reject FILE
mutant() {
    if pastes_back x "$work/stage.cu" "$3" "$2"; then
        echo "accepted: $3" >"$log"
        bad "paste catches $1 (it did not)"
    else
        ok "paste catches $1"
    fi
}
sed 's/^static void run/void run/' "$work/all.cu" >"$work/m1.cu"
mutant "a line changed outside the regions" all "$work/m1.cu"
sed '$d' "$work/all.cu" >"$work/m2.cu"
mutant "a line dropped outside the regions" all "$work/m2.cu"
{ cat "$work/all.cu"; echo "// one more line"; } >"$work/m3.cu"
mutant "a line added outside the regions" all "$work/m3.cu"
sed 's/writes x\[i\] = i/writes x[i] = 2 * i/' "$work/all.cu" >"$work/m4.cu"
mutant "a TODO whose task is not the region's" all "$work/m4.cu"
sed '/^    \/\/: (only i < n/d' "$work/all.cu" >"$work/m5.cu"
mutant "a TODO without its //: line" all "$work/m5.cu"
mutant "a skeleton that cuts nothing (the stage file itself)" all "$work/stage.cu"
mutant "a skeleton that cuts the wrong region" fill-kernel "$work/launch.cu"
mutant "a skeleton of one region where all were asked for" all "$work/launch.cu"

# and on the real stage 01 file, one line changed outside its regions
awk -f "$cutter" 01-vector-add/vector_add.cu >"$work/va.cu" 2>"$log"
if pastes_back x 01-vector-add/vector_add.cu "$work/va.cu" all; then ok "paste: stage 01's skeleton gives vector_add.cu back"
else bad "paste: stage 01's skeleton does not give vector_add.cu back"; fi
sed 's/THREADS_PER_BLOCK = 256;/THREADS_PER_BLOCK = 128;/' "$work/va.cu" >"$work/va-m.cu"
if cmp -s "$work/va.cu" "$work/va-m.cu"; then
    echo "THREADS_PER_BLOCK = 256 not found" >"$log"
    bad "paste on stage 01: could not make the mutant (vector_add.cu changed)"
elif pastes_back x 01-vector-add/vector_add.cu "$work/va-m.cu" all; then
    echo "accepted" >"$log"
    bad "paste catches stage 01's skeleton with THREADS_PER_BLOCK changed (it did not)"
else
    ok "paste catches stage 01's skeleton with THREADS_PER_BLOCK changed"
fi

# ----------------------------------------------------------------------------
# 3. refusals

marker_file() {  # marker_file NAME LINES...: a file of these lines
    local f=$work/$1
    shift
    printf '%s\n' "$@" >"$f"
}
marker_file nested.cu "// EXERCISE(a) begin: x" "// EXERCISE(b) begin: y" "// EXERCISE end" "// EXERCISE end"
refused "cutter refuses nested regions" "do not nest" awk -f "$cutter" "$work/nested.cu"
marker_file unclosed.cu "int x;" "// EXERCISE(a) begin: x" "int y;"
refused "cutter refuses a region never closed" "never closed" awk -f "$cutter" "$work/unclosed.cu"
marker_file unopened.cu "int x;" "// EXERCISE end"
refused "cutter refuses an end without a begin" "without a region" awk -f "$cutter" "$work/unopened.cu"
marker_file twice.cu "// EXERCISE(a) begin: x" "// EXERCISE end" "// EXERCISE(a) begin: y" "// EXERCISE end"
refused "cutter refuses a name used twice" "again" awk -f "$cutter" "$work/twice.cu"
marker_file upper.cu "// EXERCISE(Fill) begin: x" "// EXERCISE end"
refused "cutter refuses a malformed marker (a capital in the name)" "malformed" awk -f "$cutter" "$work/upper.cu"
marker_file notask.cu "// EXERCISE(a) begin:" "// EXERCISE end"
refused "cutter refuses a begin without a task" "malformed" awk -f "$cutter" "$work/notask.cu"
refused "cutter refuses an unknown EXERCISE" "no such region; it has: fill-kernel launch" \
    awk -v exercise=nonesuch -f "$cutter" "$work/stage.cu"
refused "cutter refuses an EXERCISE that is no name" "not an exercise name" \
    awk -v exercise='a b' -f "$cutter" "$work/stage.cu"
refused "cutter refuses even in list mode" "do not nest" awk -v list=1 -f "$cutter" "$work/nested.cu"

# through tools/exercise.sh, on stage folders of its own (nothing is built before these refusals)
mkdir -p "$work/stage-none" "$work/stage-twice"
printf 'int x;\n' >"$work/stage-none/regression.cu"
cp "$work/stage.cu" "$work/stage-twice/regression.cu"
cp "$work/stage.cu" "$work/stage-twice/mnist.cu"
refused "make stage N exercise on a stage without a region: one line" "has no exercise region" \
    env TRY_STAGE_DIR="$work/stage-none" TRY_BUILD="$work/build" bash tools/exercise.sh 03
refused "make stage N exercise on a stage whose two files use one name" "two exercise regions named 'fill-kernel'" \
    env TRY_STAGE_DIR="$work/stage-twice" TRY_BUILD="$work/build" bash tools/exercise.sh 03
cp "$work/nested.cu" "$work/stage-none/mnist.cu"
refused "make stage N exercise on a stage file with nested markers" "do not nest" \
    env TRY_STAGE_DIR="$work/stage-none" TRY_BUILD="$work/build" bash tools/exercise.sh 03

# ----------------------------------------------------------------------------
# 4. make student

copy=$work/student
if "$make" --no-print-directory student DIR="$copy" >"$log" 2>&1; then
    ok "make student DIR=$copy: $(tail -n1 "$log" | cut -c1-90)"
else
    bad "make student DIR=$copy"
fi

# every file git knows is there; the files with regions are their skeletons; the rest is unchanged
cut_files=0 missing=0 changed=0
: >"$work/student-diff"
while IFS= read -r -d '' f; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    case $f in [0-9][0-9]-*/assistant/*.answer.md | TEACHING.md)  # answers: left out, and said so
        [ ! -e "$copy/$f" ] || { changed=$((changed + 1)); echo "an assistant's answer copied: $f" >>"$work/student-diff"; }
        grep -qxF -- "- \`$f\`" "$copy/STUDENT.md" || { changed=$((changed + 1)); echo "not listed as left out: $f" >>"$work/student-diff"; }
        continue ;;
    esac
    if [ ! -e "$copy/$f" ] && [ ! -L "$copy/$f" ]; then
        # a deliberate bug whose pattern was cut is left out, and said so (tests/student_smoke.sh: no answer left)
        case $f in tests/mutants/* | results/*) grep -qxF -- "- \`$f\`" "$copy/STUDENT.md" && continue ;; esac
        missing=$((missing + 1)); echo "missing: $f" >>"$work/student-diff"; continue
    fi
    case $f in [0-9][0-9]-*/exercises.md) continue ;; esac  # its commands rewritten for the copy (student_smoke.sh)
    if [ ! -f "$f" ] || [ -L "$f" ]; then continue; fi
    case $f in *.cu | *.cuh | *.c | *.h | *.cc | *.cpp) ;; *)
        # a README whose measured figures were withheld (tests/student_smoke.sh checks that none is left)
        case $f in *.md) grep -q '^<!-- withheld:[^>]* begin -->$' "$copy/$f" && continue ;; esac
        cmp -s "$f" "$copy/$f" || { changed=$((changed + 1)); echo "changed: $f" >>"$work/student-diff"; }
        continue ;;
    esac
    names=$(awk -v list=1 -f "$cutter" "$f" 2>/dev/null)
    if [ -z "$names" ]; then  # unchanged, or a later stage's file with an earlier answer cut (carried)
        if ! cmp -s "$f" "$copy/$f" && ! grep -q "^- \`$f\`: " "$copy/STUDENT.md"; then
            changed=$((changed + 1)); echo "changed: $f" >>"$work/student-diff"
        fi
        continue
    fi
    cut_files=$((cut_files + 1))
    # its skeleton; a file that carries an earlier stage's answer has that cut as well (STUDENT.md lists
    # more names for it than its own), which tests/student_smoke.sh checks
    carries=$(grep -c "^- \`$f\`: $(paste -sd, <<<"$names" | sed 's/,/, /g'), " "$copy/STUDENT.md")
    if [ "$carries" = 0 ] && ! pastes_back x "$f" "$copy/$f" all; then
        changed=$((changed + 1)); echo "not its skeleton: $f" >>"$work/student-diff"
    fi
    grep -q "^- \`$f\`: $(paste -sd, <<<"$names" | sed 's/,/, /g')\(, .*\)\{0,1\}\$" "$copy/STUDENT.md" ||
        { changed=$((changed + 1)); echo "not listed in STUDENT.md: $f" >>"$work/student-diff"; }
done < <(git ls-files -z --cached --others --exclude-standard)
cp "$work/student-diff" "$log"
if [ $missing = 0 ] && [ $changed = 0 ] && [ $cut_files -gt 0 ]; then
    ok "student copy: every file git knows, $cut_files file(s) cut (each its skeleton, listed in STUDENT.md), the rest unchanged"
else
    bad "student copy: $missing missing, $changed wrong, $cut_files cut"
fi
left=$(grep -rlE --include='*.cu' --include='*.cuh' --include='*.c' --include='*.h' '^[[:space:]]*// EXERCISE[(]' "$copy" | head -n3)
if [ -z "$left" ]; then ok "student copy: no EXERCISE( region left in any source file"
else echo "$left" >"$log"; bad "student copy: regions left"; fi
if [ ! -e "$copy/.git" ]; then ok "student copy: no .git (the history holds the answers)"
else echo "$copy/.git" >"$log"; bad "student copy: it has a .git"; fi

# it builds. `make -n all` proves every file the build needs is there; then the cut files and stage 01's
# programs are compiled for real, for one architecture (each skeleton is compiled for all of them by
# tests/try_smoke.sh already; building every stage here would only repeat that, 10x slower)
if "$make" --no-print-directory -C "$copy" -n all >"$log" 2>&1; then ok "student copy: make -n all finds every source it needs"
else bad "student copy: make -n all"; fi
targets=(build/01/vector_add build/01/test_vector_add)
while IFS= read -r line; do  # "- `NN-stage/file.cu`: names"
    f=${line#- \`}
    f=${f%%\`*}
    stage=${f%%-*}
    base=${f##*/}
    case $f in
    common/*.c) targets+=("build/common/${base%.c}.o") ;;
    *) case $base in regression.cu | mnist.cu) targets+=("build/$stage/${base%.cu}.o") ;; esac ;;
    esac
done < <(grep '^- `' "$copy/STUDENT.md")
if "$make" --no-print-directory -C "$copy" -j4 CUDA_ARCH=75 "${targets[@]}" >"$log" 2>&1; then
    ok "student copy builds: ${targets[*]} (sm_75)"
else
    bad "student copy does not build: ${targets[*]}"
fi
"$make" --no-print-directory -C "$copy" stage 1 exercise TRY_RUN=0 CUDA_ARCH=75 >"$log" 2>&1
if grep -q '^try: FAIL' "$log" && grep -q 'your file' "$log" && grep -q 'TODO(exercise) markers\{0,1\} left' "$log"; then
    ok "student copy: make stage 1 exercise checks 01-vector-add/vector_add.cu in place, FAIL on its markers"
else
    bad "student copy: make stage 1 exercise"
fi
"$make" --no-print-directory -C "$copy" stage 6 exercise EXERCISE=bias-relu-epilogue TRY_RUN=0 CUDA_ARCH=75 >"$log" 2>&1
if grep -q '^try: FAIL' "$log" && grep -q 'common/lt_matmul.c, your file' "$log" && grep -q '^  CPU check: FAIL' "$log"; then
    ok "student copy: make stage 6 exercise checks common/lt_matmul.c in place, its CPU check FAILs without a GPU"
else
    bad "student copy: make stage 6 exercise EXERCISE=bias-relu-epilogue (common/lt_matmul.c in place, the CPU check)"
fi
if grep -q "^- \`09-tensor-cores/mma_ladder.cu\`: fragment-load-store" "$copy/STUDENT.md"; then
    "$make" --no-print-directory -C "$copy" stage 9 exercise EXERCISE=fragment-load-store CUDA_ARCH=75 >"$log" 2>&1
    if grep -q '^try: FAIL' "$log" && grep -q '09-tensor-cores/mma_ladder.cu, your file' "$log" && grep -q '^  CPU check: FAIL' "$log"; then
        ok "student copy: make stage 9 exercise checks 09-tensor-cores/mma_ladder.cu in place, its CPU check FAILs without a GPU"
    else
        bad "student copy: make stage 9 exercise EXERCISE=fragment-load-store (the kernel ladder in place, the CPU check)"
    fi
fi
"$make" --no-print-directory -C "$copy" stage 1 exercise ANSWER=1 TRY_RUN=0 CUDA_ARCH=75 >"$log" 2>&1
if grep -q '^error: ANSWER=1: this is a student copy' "$log"; then ok "student copy: ANSWER=1 is refused"
else bad "student copy: ANSWER=1 is not refused"; fi

# a second run replaces the earlier copy; folders that are not a copy are refused
if "$make" --no-print-directory student DIR="$copy" >"$log" 2>&1 && [ -f "$copy/STUDENT.md" ]; then
    ok "make student again replaces the earlier copy"
else
    bad "make student again"
fi
mkdir -p "$work/not-a-copy"
echo keep >"$work/not-a-copy/mine.txt"
refused "make student refuses a folder that is not empty and no copy" "not a student copy" \
    "$make" --no-print-directory -s student DIR="$work/not-a-copy"
[ -f "$work/not-a-copy/mine.txt" ] || { echo "gone" >"$log"; bad "make student removed a file of a folder it refused"; }
refused "make student refuses the repository itself" "the repository itself" \
    "$make" --no-print-directory -s student DIR=.
refused "make student refuses a folder inside the repository that git would see" "not ignored" \
    "$make" --no-print-directory -s student DIR=tests/student-copy
[ ! -e tests/student-copy ] || { echo "tests/student-copy" >"$log"; bad "make student created a refused folder"; }

echo "exercise: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
