# common/profile_summary.awk: the per-kernel summary of `make stage N profile`, read from Nsight Compute's
# raw CSV page (ncu --import FILE --page raw --csv --metrics ...).
#
#     awk -f common/csv.awk -f common/profile_summary.awk build/profile/06-mnist.csv
#
# The export's first row names the columns, its second gives their units, one row per launch follows.
# Columns are found by name, never by position: ncu orders the metric columns alphabetically and leaves
# out those it did not collect. Times come in the unit row 2 names ("ms", "us", "ns", or "msecond" ... in
# older versions) and are printed in µs; numbers may carry thousands separators ("3,907").
#
# One line per kernel and launch shape (grid x block): the same kernel over the training set and over
# the test set are different workloads, and a median across both would describe neither. Lines are
# sorted by their summed time, largest first:
#
#     share   the line's summed time / all launches' summed time
#     launches, median / min / max µs (gpu__time_duration.sum)
#     grid x block   launch__grid_size x launch__block_size (blocks x threads per block)
#     dram %, sm %   medians of dram__throughput / sm__throughput .avg.pct_of_peak_sustained_elapsed
#     kernel  its short name: no "void ", template arguments or parameter list (a template whose one
#             argument is a name, cutlass::Kernel2<cutlass_80_simt_sgemm_...>, is named by it)
#
# A metric the export lacks prints "-". POSIX awk (mawk, gawk, busybox); load common/csv.awk first.

# µs per unit of a time column, 0 for a unit this script does not know
function us_per(unit) {
    if (unit == "ns" || unit == "nsecond") return 0.001
    if (unit == "us" || unit == "usecond" || unit == "µs") return 1
    if (unit == "ms" || unit == "msecond") return 1000
    if (unit == "s" || unit == "second") return 1000000
    return 0
}

# a cell as a number without its thousands separators, or "" when it holds none ("", "n/a")
function value(cell) {
    gsub(/,/, "", cell)
    return cell ~ /^-?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ ? cell + 0 : ""
}

# the cell of the named column in the current row, "" when the export has no such column
function cell_of(name) { return (name in column) ? row[column[name]] : "" }

# name without the "(...)" that ends it, matched from the right (parameter types may hold parentheses)
function strip_parameters(name,    i, depth, c) {
    if (name !~ /\)$/) return name
    depth = 0
    for (i = length(name); i > 0; i--) {
        c = substr(name, i, 1)
        if (c == ")") depth++
        else if (c == "(" && --depth == 0) return substr(name, 1, i - 1)
    }
    return name
}

function short_name(name,    first, rest, i, depth, c, out) {
    sub(/^void /, "", name)
    name = strip_parameters(name)
    # Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>: the argument is the kernel's real name
    if (match(name, /<[A-Za-z_][A-Za-z0-9_]*>$/) && index(name, "<") == RSTART)
        return substr(name, RSTART + 1, RLENGTH - 2)
    out = ""
    depth = 0
    for (i = 1; i <= length(name); i++) {
        c = substr(name, i, 1)
        if (c == "<") depth++
        else if (c == ">" && depth > 0) depth--
        else if (depth == 0) out = out c
    }
    gsub(/[ \t]+/, "_", out)  # one word, so that the kernel column can be read back as the last field
    return out
}

function median(list, n,    i, j, x, sorted) {
    if (n == 0) return ""
    for (i = 1; i <= n; i++) {
        x = list[i]
        for (j = i - 1; j >= 1 && sorted[j] > x; j--) sorted[j + 1] = sorted[j]
        sorted[j + 1] = x
    }
    return (n % 2) ? sorted[(n + 1) / 2] : (sorted[n / 2] + sorted[n / 2 + 1]) / 2
}

# the median of metric m's values in group g, "" when none was collected
function group_median(g, m,    i, n, list) {
    n = 0
    for (i = 1; i <= launches[g]; i++)
        if ((g, m, i) in sample) list[++n] = sample[g, m, i]
    return median(list, n)
}

function us(x) {
    if (x == "") return "-"
    return x >= 100 ? sprintf("%.0f", x) : (x >= 10 ? sprintf("%.1f", x) : sprintf("%.2f", x))
}

function pct(x) { return x == "" ? "-" : (x >= 1 ? sprintf("%.1f", x) : sprintf("%.2f", x)) }

{ sub(/\r$/, "") }

NR == 1 {
    n = split_csv($0, header)
    for (i = 1; i <= n; i++) column[header[i]] = i
    if (!("Kernel Name" in column)) {
        print "error: " FILENAME " is not an ncu raw CSV export (no \"Kernel Name\" column)" > "/dev/stderr"
        failed = 1
        exit 2
    }
    next
}

NR == 2 {
    split_csv($0, unit)
    if ("gpu__time_duration.sum" in column) {
        time_unit = unit[column["gpu__time_duration.sum"]]
        to_us = us_per(time_unit)
        if (to_us == 0) {
            print "error: " FILENAME ": unknown time unit '" time_unit "' of gpu__time_duration.sum" > "/dev/stderr"
            failed = 1
            exit 2
        }
    }
    next
}

{
    split_csv($0, row)
    grid = value(cell_of("launch__grid_size"))
    block = value(cell_of("launch__block_size"))
    shape = (grid == "" ? "-" : grid) "x" (block == "" ? "-" : block)
    key = short_name(row[column["Kernel Name"]]) SUBSEP shape
    if (!(key in group)) {
        group[key] = ++groups
        name[groups] = short_name(row[column["Kernel Name"]])
        launch_shape[groups] = shape
    }
    g = group[key]
    k = ++launches[g]
    all_launches++
    t = value(cell_of("gpu__time_duration.sum"))
    if (t != "") {
        t *= to_us
        sample[g, "time", k] = t
        total[g] += t
        all_time += t
    }
    d = value(cell_of("dram__throughput.avg.pct_of_peak_sustained_elapsed"))
    if (d != "") sample[g, "dram", k] = d
    s = value(cell_of("sm__throughput.avg.pct_of_peak_sustained_elapsed"))
    if (s != "") sample[g, "sm", k] = s
}

END {
    if (failed) exit 2
    # groups by summed time, largest first (by launches where no time was collected)
    for (i = 1; i <= groups; i++) {
        for (j = i - 1; j >= 1 && (total[order[j]] < total[i] ||
             (total[order[j]] == total[i] && launches[order[j]] < launches[i])); j--) order[j + 1] = order[j]
        order[j + 1] = i
    }
    print " share  launches  median µs     min µs     max µs  grid x block    dram %    sm %  kernel"
    for (i = 1; i <= groups; i++) {
        g = order[i]
        lo = hi = ""
        for (k = 1; k <= launches[g]; k++) {
            if (!((g, "time", k) in sample)) continue
            t = sample[g, "time", k]
            if (lo == "" || t < lo) lo = t
            if (hi == "" || t > hi) hi = t
        }
        share = all_time > 0 ? sprintf("%.1f%%", 100 * total[g] / all_time) : "-"
        printf "%6s  %8d  %9s  %9s  %9s  %-12s  %8s  %6s  %s\n", share, launches[g], us(group_median(g, "time")),
            us(lo), us(hi), launch_shape[g], pct(group_median(g, "dram")), pct(group_median(g, "sm")), name[g]
    }
    printf "%d launches, %s µs in all\n", all_launches, us(all_time)
}
