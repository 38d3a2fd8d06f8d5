# tools/exercise_carry.awk: cut, from a later stage's file, the code it carries forward from an earlier
# stage's exercise regions (POSIX awk; used by `make student`, tools/student.sh).
#
#   awk -f tools/exercise_carry.awk EARLIER... LATER             LATER with every carried region cut, on stdout
#   awk -v list=1 -f tools/exercise_carry.awk EARLIER... LATER   the names of the regions it carries, one a line
#
# EARLIER are stage files with their `// EXERCISE(name) begin:` ... `// EXERCISE end` regions (markers as
# tools/exercise_cut.awk reads them; these files have passed it). A region is carried when LATER holds its
# answer, the lines between the task and the end marker, as consecutive lines that are the same once leading
# and trailing blanks are dropped (a later stage often nests the same code deeper). Each such block becomes the
# region's `// TODO(exercise): name: task` marker and its //: lines, at the block's indentation: the student
# writes the earlier answer again there, as the stage ladder itself does. Everything else is copied byte for
# byte. The longest regions are looked for first, so that a region holding an earlier one whole is cut as itself.
# A region of only blank lines and braces is never looked for: it would match anywhere.

function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }

BEGIN { later = ARGV[ARGC - 1] }

# the earlier files: the regions' tasks and answers
FILENAME != later && /^[ \t]*\/\/ EXERCISE\([a-z0-9-]+\) begin: / {
    name = $0
    sub(/^[ \t]*\/\/ EXERCISE\(/, "", name)
    sub(/\).*$/, "", name)
    task = $0
    sub(/^[ \t]*\/\/ EXERCISE\([a-z0-9-]+\) begin: /, "", task)
    r = ++regions
    region_name[r] = name
    region_task[r] = task
    inside = r
    continuation = 1
    next
}
FILENAME != later && /^[ \t]*\/\/ EXERCISE end/ { inside = 0; next }
FILENAME != later && inside && continuation && /^[ \t]*\/\/:/ {
    region_more[inside, ++more[inside]] = trim($0)
    next
}
FILENAME != later && inside {
    continuation = 0
    body[inside, ++size[inside]] = trim($0)
    if ($0 ~ /[A-Za-z0-9]/) worth[inside] = 1
    next
}
FILENAME != later { next }

{ line[++lines] = $0; bare[lines] = trim($0) }

END {
    # the longest answers are looked for first: a later stage's region may hold an earlier one whole (07's
    # epoch-counter holds 05's epoch-bookkeeping), and the line it carries is the larger region's
    for (r = 1; r <= regions; r++) {
        for (j = r - 1; j >= 1 && size[order[j]] < size[r]; j--) order[j + 1] = order[j]
        order[j + 1] = r
    }
    for (o = 1; o <= regions; o++) {
        r = order[o]
        if (!worth[r]) continue
        for (i = 1; i + size[r] - 1 <= lines; i++) {
            if (i in taken) continue
            for (k = 1; k <= size[r]; k++)
                if ((i + k - 1) in taken || bare[i + k - 1] != body[r, k]) break
            if (k <= size[r]) continue
            start[i] = r
            for (k = 0; k < size[r]; k++) taken[i + k] = 1
            if (!(region_name[r] in listed)) { listed[region_name[r]] = 1; names[++count] = region_name[r] }
        }
    }
    if (list) {
        for (n = 1; n <= count; n++) print names[n]
        exit 0
    }
    for (i = 1; i <= lines; i++) {
        if (i in start) {
            r = start[i]
            for (k = i; k < i + size[r] - 1 && bare[k] == ""; k++) ;
            indent = line[k]  # the first line with code sets the indentation
            sub(/[^ \t].*$/, "", indent)
            print indent "// TODO(exercise): " region_name[r] ": " region_task[r]
            for (k = 1; k <= more[r]; k++) print indent region_more[r, k]
            continue
        }
        if (!(i in taken)) print line[i]
    }
}
