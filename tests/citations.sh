#!/usr/bin/env bash
# tests/citations.sh: every repository path that a comment or a Markdown file cites must exist.
#
#     bash tests/citations.sh          (make test runs it; no GPU, no network)
#
# Read: Markdown files whole; the comments of C, CUDA, Python (# comments and docstrings), shell, make and
# awk files; code outside comments is not read. Cited are
#   - path tokens whose first part is a top-level entry of the repository (`common/report.h`,
#     `docs/DESIGN.md`, `results/README.md`, `02-llm-baseline/`), resolved from the repository root;
#   - other path tokens ending in a file extension (`gpu/test_stage.c` here, `../README.md`), resolved
#     from the citing file's folder;
#   - relative Markdown links, [text](target), resolved from the citing file's folder (#anchors dropped).
# A token with a wildcard (`tests/test_*.c`, and a stage folder written `NN-*/` or `N-*/`) must match
# at least one file. Not checked: generated paths (build/, build-asan/, data/), tokens with any other
# placeholder (<gpu>, NN, $(...), {x}, %, DIR/, NAME_x.cu), absolute paths, URLs, the file a command
# writes (after --csv, --curve, --export, -o, >, DIR=) and the file a user brings (after FILE=).
#
# First a self-test on fixture files under build/ (a broken citation of each kind must be found, and a
# path inside code must not be), then the repository. Each broken citation prints one line,
# "FAIL  FILE:LINE: cites TOKEN (PATH does not exist)". tests/citations.allow may excuse one for a while
# ("FILE TOKEN" a line, with a comment saying why); in a student copy, a path that STUDENT.md lists as left
# out stands (make student left it out on purpose). An entry of the allowlist that excuses nothing fails, so that the list
# shrinks as the citations are fixed. The last line is "citations: N passed, N failed, N skipped",
# counting files: passed = every citation exists, failed = a broken one (or a stale allowlist entry),
# skipped = broken ones, all excused.
set -u
cd "$(dirname "$0")/.." || exit 1
allow_file=tests/citations.allow

# ----------------------------------------------------------------------------
# extraction: "FILE<TAB>LINE<TAB>KIND<TAB>TOKEN<TAB>PATTERN" for every citation in the files named
# (KIND: root = from the repository root, here = from the file's folder; PATTERN: TOKEN with NN-*/ as a
# wildcard)

read -r -d '' EXTRACT <<'AWK'
function mode_of(path) {
    if (path ~ /\.md$/) return "md"
    if (path ~ /\.(c|h|cu)$/) return "c"
    if (path ~ /\.py$/) return "py"
    return "hash"   # shell, make, awk: # comments
}
# A stage folder written NN-*/ or N-*/ is a wildcard: NN-*/mnist.cu must match at least one file.
function stage_glob(token) {
    if (token ~ /^NN?-\*\//) return "[0-9][0-9]-*/" substr(token, index(token, "/") + 1)
    return token
}
# Any other placeholder leaves nothing to check: <gpu>, $(BUILD), {a,b}, %, NN, or a word in capitals
# standing for a name (DIR/, NAME_ladder.cu; README.md is a name).
function placeholder(token) {
    if (token ~ /^NN?-\*\//) token = substr(token, index(token, "/") + 1)
    return token ~ /[<>$%{}]/ || token ~ /NN/ || token ~ /(^|[\/_.-])[A-Z][A-Z0-9]*([\/_-]|$)/
}
# a first part with a wildcard (07-*) counts as top-level when it matches a top-level name
function is_top(name,    n, pattern) {
    if (name in top) return 1
    if (name !~ /[*?]/) return 0
    pattern = name
    gsub(/\./, "\\.", pattern); gsub(/\*/, ".*", pattern); gsub(/\?/, ".", pattern)
    for (n in top) if (n ~ ("^" pattern "$")) return 1
    return 0
}
function out(kind, token) {
    if (!((FILENAME SUBSEP kind SUBSEP token) in seen)) {
        seen[FILENAME SUBSEP kind SUBSEP token] = 1
        printf "%s\t%d\t%s\t%s\t%s\n", FILENAME, FNR, kind, token, stage_glob(token)
    }
}
# the path tokens of text (a comment, or a line of Markdown)
function tokens(text,    rest, token, before, previous, first) {
    gsub(/[A-Za-z][A-Za-z0-9+.-]*:\/\/[^ \t)>"'`]*/, " ", text)   # URLs
    rest = text
    previous = ""
    while (match(rest, /[A-Za-z0-9_.\/*?<>{}$%+-]+/)) {
        token = substr(rest, RSTART, RLENGTH)
        before = previous substr(rest, 1, RSTART - 1)
        previous = token
        rest = substr(rest, RSTART + RLENGTH)
        if (token !~ /\//) continue
        if (token !~ /^[A-Za-z0-9_.<{$]/) continue                       # absolute paths, flags, fragments
        # a file the command writes, or one the user brings (FILE=)
        if (before ~ /(--csv|--curve|--export|-o)[ =]+$|> *$|(DIR|FILE)=$/) continue
        sub(/^(\.\/)+/, "", token)
        sub(/[.,:;]+$/, "", token)
        if (token == "" || placeholder(token)) continue
        first = substr(stage_glob(token), 1, index(stage_glob(token), "/") - 1)
        if (first == "build" || first == "build-asan" || first == "data") continue
        if (is_top(first)) out("root", token)
        else if (token ~ /\.(c|h|cu|md|py|sh|mk|awk|csv|txt|png|json|log|gz|sed)$/) out("here", token)
    }
}
# relative Markdown links
function links(text,    rest, target) {
    rest = text
    while (match(rest, /\]\([^) \t]+/)) {
        target = substr(rest, RSTART + 2, RLENGTH - 2)
        rest = substr(rest, RSTART + RLENGTH)
        if (target ~ /^[A-Za-z][A-Za-z0-9+.-]*:/ || target ~ /^#/ || target ~ /^\//) continue
        sub(/#.*/, "", target)
        gsub(/[<>]/, "", target)
        if (target == "" || placeholder(target)) continue
        out("here", target)
    }
}
BEGIN {
    n = split(top_names, names, " ")
    for (i = 1; i <= n; i++) top[names[i]] = 1
}
FNR == 1 { mode = mode_of(FILENAME); in_block = 0; in_doc = 0 }
mode == "md" { tokens($0); links($0); next }
mode == "c" {
    line = $0
    text = ""
    while (line != "") {
        if (in_block) {
            end = index(line, "*/")
            if (end == 0) { text = text " " line; line = "" }
            else { text = text " " substr(line, 1, end - 1); line = substr(line, end + 2); in_block = 0 }
            continue
        }
        b = index(line, "/*"); s = index(line, "//")
        if (s > 0 && (b == 0 || s < b)) { text = text " " substr(line, s + 2); line = "" }
        else if (b > 0) { in_block = 1; line = substr(line, b + 2) }
        else line = ""
    }
    if (text != "") tokens(text)
    next
}
mode == "py" {
    line = $0
    quotes = gsub(/"""/, "&", line)
    if (in_doc || quotes > 0) tokens(line)
    else if (match(line, /(^|[ \t])#/)) tokens(substr(line, RSTART))
    if (quotes % 2 == 1) in_doc = !in_doc
    next
}
mode == "hash" {
    if (FNR == 1 && $0 ~ /^#!/) next
    if (match($0, /(^|[ \t])#/)) tokens(substr($0, RSTART))
    next
}
AWK

# the files to read: what git tracks or would track (else everything outside the generated folders)
source_files() {
    local listing
    if listing=$(git ls-files -co --exclude-standard 2>/dev/null) && [ -n "$listing" ]; then
        printf '%s\n' "$listing"
    else
        find . \( -path ./build -o -path ./build-asan -o -path ./data -o -path './.*' \) -prune -o -type f -print |
            sed 's|^\./||'
    fi | grep -E '(\.(md|c|h|cu|py|sh|mk|awk)|(^|/)Makefile)$' | grep -vE '^\.|^(build|build-asan|data)/' |
        while IFS= read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done
}

top_names=$(ls -A | grep -vx '.git' | tr '\n' ' ')
top_names="$top_names docs"
# a student copy (make student) says in STUDENT.md what it left out: a citation of those paths stands
left_out=()
[ ! -f STUDENT.md ] || mapfile -t left_out < <(sed -n "/^## Left out/,/^## /s/^- \`\\([^\`]*\\)\`\$/\\1/p" STUDENT.md)
left_out_of_copy() {  # left_out_of_copy PATH: PATH is, or is inside, a path STUDENT.md lists as left out
    local p
    for p in "${left_out[@]}"; do
        case $1 in "$p" | "${p%/}" | "${p%/}"/*) return 0 ;; esac
        # a wildcard over the stage folders that matches nothing here: the copy left out its stages
        case $p in [0-9][0-9]-*/) case $1 in "[0-9][0-9]-*/"*) return 0 ;; esac ;; esac
        # a wildcard that matches a left-out file (results/*.csv: the copy left out the measurements)
        # shellcheck disable=SC2254  # $1 is the pattern
        case $1 in *[*?[]*) case $p in $1) return 0 ;; esac ;; esac
    done
    return 1
}

# a student copy's left-out stage folders are still top-level names (STUDENT.md lists them as NN-name/)
[ ! -f STUDENT.md ] || top_names="$top_names $(sed -n "s|^- \`\\([0-9][0-9]-[^/\`]*\\)/\`\$|\\1|p" STUDENT.md | tr '\n' ' ')"

# check < FILES: every citation of the files named on stdin into $work/citations, and one
# "FILE<TAB>LINE<TAB>TOKEN<TAB>PATH" line on stdout per broken one
check() {
    local files file line kind token pattern path dir
    mapfile -t files
    : >"$work/citations"
    [ "${#files[@]}" -gt 0 ] && awk -v top_names="$top_names" "$EXTRACT" "${files[@]}" >"$work/citations"
    while IFS=$'\t' read -r file line kind token pattern; do
        dir=${file%/*}; [ "$dir" != "$file" ] || dir=.  # dirname, without a process per citation
        if [ "$kind" = root ]; then path=$pattern; else path=$dir/$pattern; fi
        case $path in
        *[*?[]*) compgen -G "$path" >/dev/null && continue ;;
        *) [ -e "$path" ] && continue ;;
        esac
        printf '%s\t%s\t%s\t%s\n' "$file" "$line" "$token" "$path"
    done <"$work/citations"
}

# a folder of its own under build/ (two runs at once must not share one; the fixtures' relative links
# resolve from inside the repository)
mkdir -p build
work=$(mktemp -d build/citations.XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
passed=0 failed=0 skipped=0

# ----------------------------------------------------------------------------
# self-test: the checker finds a broken citation of each kind, and only those

cat >"$work/fixture.md" <<'EOF'
A root citation that exists, `common/trainer.h`, one that does not, `common/no_such_file.c`,
a link that exists, [top](../../README.md), two that do not, [gone](missing.md) and
[from the root](common/trainer.h) (a link is relative to its file), an output
(`build/01/vector_add --csv results/mine.csv`), a placeholder (`results/<gpu>.csv`, `NN-*/mnist.cu`).
EOF
cat >"$work/fixture.c" <<'EOF'
// see docs/NOPE.md and common/trainer.h
/* a block comment citing
   tests/no_such_test.c on its second line */
static const char *path = "common/only_in_code.c";  // code, not a comment: not a citation
EOF
found=$(printf '%s\n' "$work/fixture.md" "$work/fixture.c" | check | while IFS=$'\t' read -r _ _ token path; do
    left_out_of_copy "$(realpath -m --relative-to=. -- "$path")" || echo "$token"  # a stage a copy left out
done | sort | tr '\n' ' ')
want="common/no_such_file.c common/trainer.h docs/NOPE.md missing.md tests/no_such_test.c "
if [ "$found" = "$want" ]; then
    echo "ok    self-test: the broken citations of the fixtures are found, and only those"
else
    echo "FAIL  self-test: found '$found', want '$want'"
    failed=$((failed + 1))
fi

# ----------------------------------------------------------------------------
# the repository

allowed() {  # allowed FILE TOKEN: excused by tests/citations.allow
    [ -f "$allow_file" ] && sed 's/#.*//' "$allow_file" |
        awk -v f="$1" -v t="$2" '$1 == f && $2 == t { hit = 1 } END { exit !hit }'
}

source_files | check >"$work/broken"
cited=$(cut -f1 "$work/citations" | sort -u | grep -c .)
declare -A file_state=()  # FILE -> failed | skipped
left_out_cited=0
while IFS=$'\t' read -r file line token path; do
    if left_out_of_copy "$(realpath -m --relative-to=. -- "$path")"; then
        left_out_cited=$((left_out_cited + 1))  # counted as passed: the copy left it out on purpose
        continue
    elif allowed "$file" "$token"; then
        echo "allow $file:$line: cites $token ($path does not exist; excused by $allow_file)"
        [ "${file_state[$file]:-}" = failed ] || file_state[$file]=skipped
    else
        echo "FAIL  $file:$line: cites $token ($path does not exist)"
        file_state[$file]=failed
    fi
done <"$work/broken"

# an allowlist entry must still excuse something
if [ -f "$allow_file" ]; then
    while read -r file token _; do
        [ -n "$file" ] || continue
        if ! awk -F'\t' -v f="$file" -v t="$token" '$1 == f && $3 == t { hit = 1 } END { exit !hit }' \
            "$work/broken"; then
            echo "FAIL  $allow_file: '$file $token' excuses nothing (the citation exists now, or is gone):" \
                "remove the line"
            failed=$((failed + 1))
        fi
    done < <(sed 's/#.*//' "$allow_file")
fi

for state in "${file_state[@]}"; do
    if [ "$state" = failed ]; then failed=$((failed + 1)); else skipped=$((skipped + 1)); fi
done
passed=$((passed + cited - ${#file_state[@]}))
excused=$(($(wc -l <"$work/broken") - left_out_cited))
[ "$failed" -gt 0 ] ||
    echo "ok    $(wc -l <"$work/citations" | tr -d ' ') citations in $cited files: every cited path exists" \
        "$([ "$excused" -eq 0 ] || echo "but $excused excused by $allow_file")$([ "$left_out_cited" -eq 0 ] ||
            echo "(and $left_out_cited that this student copy left out)")"
echo "citations: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
