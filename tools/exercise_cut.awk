# tools/exercise_cut.awk: cut the exercise regions out of a stage file (POSIX awk, one file).
#
#   awk -f tools/exercise_cut.awk FILE                     the skeleton: every region cut, on stdout
#   awk -v exercise=NAME -f tools/exercise_cut.awk FILE    only region NAME cut, the others left as they are
#   awk -v list=1 -f tools/exercise_cut.awk FILE           the region names, one a line (none: no output)
#
# A region, in the stage file (NAME is [a-z0-9-]+, unique within the stage):
#       <indent>// EXERCISE(NAME) begin: <one-line task>
#       <indent>//: <optional continuation lines of the task>
#       ...the answer code...
#       <indent>// EXERCISE end
# becomes, in the skeleton,
#       <indent>// TODO(exercise): NAME: <task>
#       <indent>//: <the continuation lines, as they were>
# Everything outside the regions is copied byte for byte. Unbalanced or nested markers, a malformed
# marker line, a name used twice and an unknown NAME are refused: one "error:" line, exit 2, no output.
# Used by `make stage N exercise` (tools/exercise.sh) and `make student` (tools/student.sh).

# count: regions seen; out[1..lines]: the output, kept until the whole file has been checked; inside: the name
# of the region being read
function fail(message) {
    printf "error: %s\n", message > "/dev/stderr"
    failed = 1
    exit 2
}

function source() { return (FILENAME == "" || FILENAME == "-") ? "stdin" : FILENAME }
function where(line) { return source() ":" line ": " }

BEGIN {
    if (exercise != "" && exercise !~ /^[a-z0-9-]+$/)
        fail("EXERCISE=" exercise ": not an exercise name (names are made of a-z, 0-9 and -)")
}

# a marker: "// EXERCISE" first on its line
/^[ \t]*\/\/ EXERCISE/ {
    indent = $0
    sub(/\/\/ EXERCISE.*$/, "", indent)
    marker = substr($0, length(indent) + 1)
    if (marker ~ /^\/\/ EXERCISE\([a-z0-9-]+\) begin: [^ \t]/) {
        name = substr(marker, length("// EXERCISE(") + 1)
        sub(/\).*$/, "", name)
        if (inside != "")
            fail(where(FNR) "EXERCISE(" name ") begins inside EXERCISE(" inside ") of line " begun ": regions do not nest (close it with // EXERCISE end first)")
        if (name in first)
            fail(where(FNR) "EXERCISE(" name ") again: the name is taken by the region of line " first[name] " (names are unique)")
        first[name] = FNR
        names[++count] = name
        inside = name
        begun = FNR
        cutting = (exercise == "" || exercise == name)
        continuation = 1
        task = substr(marker, length("// EXERCISE(" name ") begin: ") + 1)
        out[++lines] = cutting ? indent "// TODO(exercise): " name ": " task : $0
        next
    }
    if (marker ~ /^\/\/ EXERCISE end[ \t]*$/) {
        if (inside == "")
            fail(where(FNR) "// EXERCISE end without a region to close (no // EXERCISE(name) begin: before it)")
        if (!cutting)
            out[++lines] = $0
        inside = ""
        next
    }
    fail(where(FNR) "malformed exercise marker: want \"// EXERCISE(name) begin: task\" (name of a-z, 0-9, -) or \"// EXERCISE end\"")
}

# the task's continuation lines, right after the begin line: kept in the skeleton too
inside != "" && continuation && /^[ \t]*\/\/:/ {
    out[++lines] = $0
    next
}

inside != "" {
    continuation = 0
    if (!cutting)
        out[++lines] = $0
    next
}

{ out[++lines] = $0 }

END {
    if (failed)
        exit 2
    if (inside != "")
        fail(where(begun) "EXERCISE(" inside ") is never closed: no // EXERCISE end after it")
    if (exercise != "" && !(exercise in first)) {
        for (i = 1; i <= count; i++)
            known = known " " names[i]
        fail("EXERCISE=" exercise ": " source() " has no such region; " (count ? "it has:" known : "it has none"))
    }
    if (list) {
        for (i = 1; i <= count; i++)
            print names[i]
        exit 0
    }
    for (i = 1; i <= lines; i++)
        print out[i]
}
