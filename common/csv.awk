# common/csv.awk: the CSV splitter the awk reports share (common/compare.awk, common/try_report.awk).
# Load it first: awk -f common/csv.awk -f common/compare.awk FILE. POSIX awk (mawk, gawk, busybox).

# Splits a CSV line into f[1..n] (double quotes group, "" inside quotes is a quote); returns n.
function split_csv(line, f,    n, i, c, field, quoted) {
    n = 0
    field = ""
    quoted = 0
    for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (quoted) {
            if (c == "\"" && substr(line, i + 1, 1) == "\"") { field = field c; i++ }
            else if (c == "\"") quoted = 0
            else field = field c
        } else if (c == "\"") quoted = 1
        else if (c == ",") { f[++n] = field; field = "" }
        else field = field c
    }
    f[++n] = field
    return n
}
