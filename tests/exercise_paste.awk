# tests/exercise_paste.awk: put the answers back into a skeleton, to check the cutter from outside.
#
#   awk [-v cut=NAME|all] -f tests/exercise_paste.awk STAGE_FILE SKELETON > rebuilt   then: cmp rebuilt STAGE_FILE
#
# Reads the regions of STAGE_FILE (// EXERCISE(name) begin: ... // EXERCISE end), then copies SKELETON,
# replacing each "// TODO(exercise): name: task" line and its "//:" continuation lines by region name
# as it stands in STAGE_FILE. A skeleton that is the stage file with its regions cut, and nothing else
# changed, comes back byte for byte. Written apart from tools/exercise_cut.awk on purpose: the test
# must not share the cutter's mistakes. Exits 1 with an "error:" line when a TODO block is not what the
# region's begin line says, names an unknown region, or names one twice; with cut=NAME, when the skeleton
# cuts another region or not NAME; with cut=all, when it leaves a region uncut.

BEGIN { want = cut }  # the region(s) the skeleton must cut

function fail(message) {
    printf "error: %s\n", message > "/dev/stderr"
    failed = 1
    exit 1
}

# the stage file
FNR == NR {
    if (name == "" && match($0, /^[ \t]*\/\/ EXERCISE\([a-z0-9-]+\) begin: /)) {
        head = substr($0, 1, RLENGTH)
        indent = head
        sub(/\/\/.*$/, "", indent)
        name = head
        sub(/^[ \t]*\/\/ EXERCISE\(/, "", name)
        sub(/\) begin: $/, "", name)
        region[name] = $0
        todo[name] = indent "// TODO(exercise): " name ": " substr($0, RLENGTH + 1)
        reading_task = 1
        next
    }
    if (name != "") {
        region[name] = region[name] "\n" $0
        if (reading_task && $0 ~ /^[ \t]*\/\/:/) {
            todo[name] = todo[name] "\n" $0
            follow[name]++
        } else
            reading_task = 0
        if ($0 ~ /^[ \t]*\/\/ EXERCISE end[ \t]*$/)
            name = ""
    }
    next
}

# the skeleton: a TODO block and its continuation lines
pending > 0 {
    block = block "\n" $0
    if (--pending == 0)
        finish_block()
    next
}

/^[ \t]*\/\/ TODO\(exercise\): / {
    todo_name = $0
    sub(/^[ \t]*\/\/ TODO\(exercise\): /, "", todo_name)
    sub(/:.*$/, "", todo_name)
    if (!(todo_name in region))
        fail(FILENAME ":" FNR ": a TODO(exercise) for '" todo_name "', which is no region of the stage file")
    if (todo_name in pasted)
        fail(FILENAME ":" FNR ": a second TODO(exercise) for '" todo_name "' (the first at line " pasted[todo_name] ")")
    pasted[todo_name] = FNR
    block = $0
    pending = follow[todo_name] + 0
    if (pending == 0)
        finish_block()
    next
}

{ print }

function finish_block() {
    if (block != todo[todo_name])
        fail(FILENAME ":" pasted[todo_name] ": the TODO block for '" todo_name "' is not the region's task as its begin line and //: lines give it")
    print region[todo_name]
}

END {
    if (failed)
        exit 1
    if (pending > 0)
        fail(FILENAME ": ends inside the TODO block for '" todo_name "'")
    for (r in region) {
        if ((want == "all" || want == r) && !(r in pasted))
            fail(FILENAME ": region '" r "' is not cut (no TODO(exercise) block for it)")
        if (want != "" && want != "all" && want != r && (r in pasted))
            fail(FILENAME ": region '" r "' is cut too, but only '" want "' should be")
    }
}
