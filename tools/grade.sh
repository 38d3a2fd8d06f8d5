#!/usr/bin/env bash
# tools/grade.sh: the work behind `make grade STAGE=N SUBMISSIONS=dir [JOBS=k] [CSV=file]` (tools/exercises.mk
# hands over the build settings as TRY_* environment variables, and STAGE, SUBMISSIONS, JOBS and CSV as GRADE_*).
# Not meant to be run by hand.
#
# Runs tools/try.sh on every .cu file of SUBMISSIONS (not its subfolders), each in a build folder of its own,
# build/grade/NN/K-NAME/, with its whole output in build/grade/NN/K-NAME.log, and writes one CSV line per
# submission, in file-name order, to CSV (default build/grade/stageNN.csv):
#
#     file,exit,verdict,trainer,correctness,speed,todo_left,error,log
#
#   exit         try's exit status: 0 PASS, 1 FAIL, 2 a file that cannot be a candidate, 3 no MNIST data,
#                4 UNVERIFIED (no CUDA device ran the suite), as tools/exercises.mk documents them
#   verdict      the word of try's last line (PASS, FAIL, UNVERIFIED, NOT RUN), else BAD FILE (2), NO DATA (3)
#   trainer      the trainer the file replaces (regression, mnist; vector_add for stage 01), where try got that far
#   correctness  try's "correctness:" line, or "not checked (no CUDA device)"
#   speed        after a PASS: the candidate against the stage's own file, loop and e2e ("loop 1.02x (...)")
#   todo_left    the // TODO(exercise) markers left in the file (any one makes it FAIL)
#   error        try's one "error:" line, where it refused the file
#
# JOBS submissions are tried at once (default: without a GPU, one per core, since they only compile and link;
# with GPUs, one per GPU, each job's runs on a GPU of its own through CUDA_VISIBLE_DEVICES, so that two timed
# runs never share one). The stage's own objects are built once, first. Exit status: 0 once the CSV is written,
# whatever the verdicts (they are in it); 2, with one "error:" line, where nothing could be graded.
# shellcheck disable=SC2154  # build, stage_dir, run_suite_too: set by try_common.sh
set -o pipefail
stage=${GRADE_STAGE:-}
[[ $stage =~ ^[0-9]{1,2}$ ]] && nn=$(printf '%02d' "$((10#$stage))") || nn=$stage
# shellcheck source=tools/try_common.sh
source tools/try_common.sh
stages=${GRADE_STAGES:-}

valid=$(for s in $stages; do printf '%s ' "${s#0}"; done)
[ -n "$stage" ] || die "make grade needs STAGE=N, the stage the submissions are candidates for (stages: ${valid% })"
[ -n "$stage_dir" ] && [ -d "$stage_dir" ] ||
    die "STAGE=$stage: unknown stage; valid stages: ${valid% } (e.g. make grade STAGE=5 SUBMISSIONS=dir)"
submissions=${GRADE_SUBMISSIONS:-}
[ -n "$submissions" ] || die "make grade needs SUBMISSIONS=dir, a folder of the students' .cu files"
[ -d "$submissions" ] || die "SUBMISSIONS=$submissions is not a folder"
mapfile -d '' files < <(find "$submissions" -mindepth 1 -maxdepth 1 -name '*.cu' \( -type f -o -type l \) -print0 | sort -z)
[ ${#files[@]} -gt 0 ] || die "SUBMISSIONS=$submissions holds no .cu file (a submission is one trainer file, NAME.cu)"
csv=${GRADE_CSV:-$build/grade/stage$nn.csv}
case $csv in *.csv) ;; *) die "CSV=$csv: name a .csv file" ;; esac
[ ! -d "$csv" ] || die "CSV=$csv is a folder: name a .csv file"
mkdir -p "$(dirname -- "$csv")" || die "CSV=$csv: cannot create its folder"

# the GPUs a job may take, and how many jobs
gpus=()
if [ "${TRY_HAVE_GPU:-0}" = 1 ] && [ "$run_suite_too" = 1 ]; then
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
        IFS=, read -r -a gpus <<<"$CUDA_VISIBLE_DEVICES"
    else
        mapfile -t gpus < <(nvidia-smi -L 2>/dev/null | sed -n 's/^GPU \([0-9]*\):.*/\1/p')
    fi
    [ ${#gpus[@]} -gt 0 ] || gpus=(0)
fi
jobs=${GRADE_JOBS:-}
if [ -z "$jobs" ]; then
    if [ ${#gpus[@]} -gt 0 ]; then jobs=${#gpus[@]}; else jobs=$(nproc 2>/dev/null || echo 2); fi
fi
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "JOBS=$jobs: give a number of submissions to try at once, 1 or more"
[ "$jobs" -le ${#files[@]} ] || jobs=${#files[@]}
if [ ${#gpus[@]} -gt 0 ] && [ "$jobs" -gt ${#gpus[@]} ]; then
    echo "note: JOBS=$jobs and ${#gpus[@]} GPU(s): jobs share a GPU, and the speeds they time are noise"
fi

# csv_field TEXT: TEXT as one CSV field, in double quotes where it holds a comma, a quote or blanks at an end;
# control characters become '?', so that a line stays a line
csv_field() {
    local s=${1//[[:cntrl:]]/?}
    case $s in *[,\"]* | " "* | *" ") printf '"%s"' "${s//\"/\"\"}" ;; *) printf '%s' "$s" ;; esac
}

# grade_one K FILE [GPU]: try on FILE in a build folder of its own; its CSV line into $rows/K.csv and one line
# on stdout
grade_one() {
    local k=$1 file=$2 gpu=${3:-} name slug out log rc verdict trainer correctness speed todo error
    name=$(basename -- "$file")
    slug=$(printf '%s' "${name%.cu}" | tr -c 'A-Za-z0-9._-' '_')
    out=$build/grade/$nn/$k-$slug
    log=$out.log
    if [ -n "$gpu" ]; then
        CUDA_VISIBLE_DEVICES=$gpu TRY_OUT=$out TRY_INCLUDE_DIR=$stage_dir bash tools/try.sh "$nn" "$file" >"$log" 2>&1 </dev/null
    else
        TRY_OUT=$out TRY_INCLUDE_DIR=$stage_dir bash tools/try.sh "$nn" "$file" >"$log" 2>&1 </dev/null
    fi
    rc=$?
    verdict=$(sed -n 's/^try: \([A-Z][A-Z ]*[A-Z]\).*/\1/p' "$log" | tail -n 1)
    if [ -z "$verdict" ]; then
        case $rc in 0) verdict=PASS ;; 1) verdict=FAIL ;; 2) verdict="BAD FILE" ;; 3) verdict="NO DATA" ;;
        4) verdict=UNVERIFIED ;; *) verdict="ERROR (exit $rc)" ;; esac
    fi
    trainer=$(sed -n 's/^   replaces stage [0-9]*.s \([a-z]*\): .*/\1/p' "$log" | head -n 1)
    [ -n "$trainer" ] || ! grep -q '^   compiles, defines main and vector_add' "$log" || trainer=vector_add
    correctness=$(sed -n 's/^  correctness: //p' "$log" | head -n 1)
    [ -n "$correctness" ] || [ "$rc" != 4 ] || correctness="not checked (no CUDA device)"
    speed=$(sed -n 's/^  candidate vs stage [0-9]*: //p' "$log" | tail -n 1)
    [ -n "$speed" ] || [ "$rc" != 0 ] || speed=$(sed -n 's/^try: PASS, //p' "$log" | tail -n 1)
    todo=$(grep -c '// TODO(exercise)' -- "$file" 2>/dev/null)
    error=$(sed -n 's/^error: //p' "$log" | head -n 1)
    {
        for field in "$name" "$rc" "$verdict" "$trainer" "$correctness" "$speed" "${todo:-0}" "$error"; do
            csv_field "$field"
            printf ,
        done
        csv_field "$log"
        printf '\n'
    } >"$rows/$k.csv"
    echo "$verdict" >"$rows/$k.verdict"
    printf '%-12s %s%s\n' "$verdict" "${name//[[:cntrl:]]/?}" "$(
        if [ -n "$error" ]; then printf ': %s' "$error"
        elif [ -n "$speed" ]; then printf ': %s' "$speed"
        elif [ "${todo:-0}" != 0 ]; then printf ': %s TODO(exercise) marker(s) left' "$todo"
        elif [ -n "$correctness" ]; then printf ': %s' "$correctness"; fi | cut -c1-110)"
}

echo "== grade: stage $nn, ${#files[@]} submission(s) in $submissions, $jobs at a time$(
    [ ${#gpus[@]} -eq 0 ] || printf ' on GPU(s) %s' "${gpus[*]}")$([ ${#gpus[@]} -gt 0 ] || [ "$run_suite_too" = 0 ] ||
    printf ' (no CUDA device: each compiles and links, UNVERIFIED at best)')"
echo "   each one's output: $build/grade/$nn/K-NAME.log"

# the stage's own objects once, before the jobs (each try then finds them built); the MNIST files once too,
# where a GPU will train a submission of the MNIST trainer
build_own
if [ ${#gpus[@]} -gt 0 ] && [ "$nn" != 01 ] && [ -z "${MNIST_DIR:-}" ] &&
    grep -lq 'train_mnist\|MNIST_VARIANTS' -- "${files[@]}" 2>/dev/null; then
    "$TRY_MAKE" --no-print-directory -s data/mnist/train-images-idx3-ubyte || exit 3
fi

rows=$(mktemp -d) || die "cannot make a temporary folder"
trap 'rm -rf -- "$rows" "$csv.tmp"' EXIT
rm -rf -- "$build/grade/$nn"
mkdir -p "$build/grade/$nn" || die "cannot create $build/grade/$nn"
# job j tries submissions j, j + jobs, j + 2 jobs, ... one after another, on GPU gpus[j % #gpus]
for ((j = 0; j < jobs; j++)); do
    (
        gpu=
        [ ${#gpus[@]} -eq 0 ] || gpu=${gpus[j % ${#gpus[@]}]}
        for ((k = j; k < ${#files[@]}; k += jobs)); do grade_one "$(printf '%03d' $((k + 1)))" "${files[k]}" "$gpu"; done
    ) &
done
wait

{
    echo "file,exit,verdict,trainer,correctness,speed,todo_left,error,log"
    for ((k = 1; k <= ${#files[@]}; k++)); do
        row=$rows/$(printf '%03d' "$k").csv
        [ -f "$row" ] || die "submission $k (${files[k - 1]}) was not graded"
        cat "$row"
    done
} >"$csv.tmp" && mv -- "$csv.tmp" "$csv" || { rm -f -- "$csv.tmp"; die "cannot write $csv"; }
echo "grade: ${#files[@]} submission(s): $(for ((k = 1; k <= ${#files[@]}; k++)); do cat "$rows/$(printf '%03d' "$k").verdict"; done | sort | uniq -c |
    awk '{ n = $1; $1 = ""; printf "%s%d%s", sep, n, $0; sep = ", " }'); wrote $csv"
