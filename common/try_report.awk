# common/try_report.awk: the tables of `make stage N try` and `make stage N prompt`, from result rows
# (REPORT_CSV_HEADER of common/report.h first in every file). POSIX awk; lines are split by split_csv (common/csv.awk), not by -F,
# so that quoted fields with commas (hidden "1024,1024") stay whole.
#
#   awk -v stage=03 -v mode=speed -f common/csv.awk -f common/try_report.awk build/try/03/stage.csv build/try/03/candidate.csv
#       the stage's row(s), the candidate's row(s), the relative speed, and the closing "try: PASS" line
#   awk -v stage=03 -v mode=results -f common/csv.awk -f common/try_report.awk results/*.csv
#       a Markdown table of stage 03's rows, the newest of each configuration per file

function ms(x) { return x == "" ? "-" : (x + 0 >= 1000 ? sprintf("%.0f", x) : sprintf("%.4g", x)) }
function num(x) { return x == "" ? "-" : sprintf("%.6g", x) }
function get(name) { return (name in col) ? row[col[name]] : "" }

# The candidate's speed relative to the stage's (stage time / candidate time), and what it means.
function speed(stage_ms, cand_ms,    r) {
    if (stage_ms == "" || cand_ms == "" || cand_ms + 0 <= 0) return "n/a"
    r = stage_ms / cand_ms
    if (r > 0.97 && r < 1.03) return sprintf("%.2fx (the same within noise)", r)
    return sprintf("%.2fx (%s)", r, r > 1 ? "faster" : "slower")
}

{ sub(/\r$/, "") }

FNR == 1 {
    delete col
    n = split_csv($0, head)
    for (i = 1; i <= n; i++) col[head[i]] = i
    rows_file = ("stage" in col) && ("trainer" in col) && ("loop_ms" in col)
    file_index++
    next
}

!rows_file || NF == 0 { next }

{
    delete row
    split_csv($0, row)
}

mode == "speed" {
    who = file_index == 1 ? "stage" : "candidate"
    k = ++count[who]
    for (name in col) cell[who, k, name] = row[col[name]]
    next
}

mode == "results" && get("stage") == stage {
    key = FILENAME SUBSEP get("trainer") SUBSEP get("variant") SUBSEP get("points") SUBSEP get("hidden") SUBSEP \
        get("batch") SUBSEP get("epochs") SUBSEP get("precision")
    if (!(key in newest)) order[++n_keys] = key
    config = get("trainer") == "regression" ? get("points") " points" : \
        (get("trainer") == "mnist" ? "hidden " get("hidden") ", batch " get("batch") : "n " get("points"))
    last = get("trainer") == "regression" ? "w " num(get("w")) ", b " num(get("b")) : \
        (get("test_acc") == "" ? "-" : sprintf("acc %.2f%%", 100 * get("test_acc")))
    newest[key] = sprintf("| %s | %s | %s | %s%s | %s | %s | %s | %s | %s | %s |", get("device"), get("trainer"),
        get("variant"), config, get("epochs") == "" ? "" : ", " get("epochs") " epochs", get("precision"), ms(get("e2e_ms")),
        ms(get("loop_ms")), ms(get("ms_per_epoch")), num(get("test_loss")), last)
}

END {
    if (mode == "results") {
        if (n_keys == 0) { print "None for stage " stage " yet (`make bench` on a GPU machine writes them)."; exit 0 }
        print "| device | trainer | variant | configuration | precision | e2e ms | loop ms | ms/epoch | test loss | result |"
        print "|---|---|---|---|---|---|---|---|---|---|"
        for (k = 1; k <= n_keys; k++) print newest[order[k]]
        exit 0
    }
    if (count["stage"] == 0 || count["candidate"] == 0) {
        print "error: no result rows to compare (the stage's or the candidate's run wrote none)" > "/dev/stderr"
        print "try: FAIL"
        exit 1
    }
    if (cell["stage", 1, "trainer"] == "vector-add") vector_add_table()
    else trainer_table()
}

# One row each: the two runs, then the relative speed.
function trainer_table(    t, who, k, last) {
    t = cell["stage", 1, "trainer"]
    printf "  speed on %s, medians of the timed runs:\n", cell["stage", 1, "device"]
    printf "    %-16s %-12s %10s %10s %10s %12s  %s\n", "run", "variant", "e2e ms", "loop ms", "ms/epoch", "test loss",
        t == "regression" ? "w / b" : "test acc"
    for (k = 1; k <= 2; k++) {
        who = k == 1 ? "stage" : "candidate"
        if (t == "regression") last = num(cell[who, 1, "w"]) " / " num(cell[who, 1, "b"])
        else last = cell[who, 1, "test_acc"] == "" ? "-" : sprintf("%.2f%%", 100 * cell[who, 1, "test_acc"])
        printf "    %-16s %-12s %10s %10s %10s %12s  %s\n", who == "stage" ? "stage " stage : "candidate", cell[who, 1, "variant"],
            ms(cell[who, 1, "e2e_ms"]), ms(cell[who, 1, "loop_ms"]), ms(cell[who, 1, "ms_per_epoch"]),
            num(cell[who, 1, "test_loss"]), last
    }
    printf "  candidate vs stage %s: loop %s, e2e %s\n", stage, speed(cell["stage", 1, "loop_ms"], cell["candidate", 1, "loop_ms"]),
        speed(cell["stage", 1, "e2e_ms"], cell["candidate", 1, "e2e_ms"])
    printf "try: PASS, relative loop speed %s\n", speed(cell["stage", 1, "loop_ms"], cell["candidate", 1, "loop_ms"])
}

# Stage 01: one row per version, matched by name; kernel-only (loop_ms) and with transfers (e2e_ms).
function vector_add_table(    k, j, name, s, c, found, logsum, used) {
    printf "  speed on %s, medians; speed = the candidate's relative to the stage's:\n", cell["stage", 1, "device"]
    printf "    %-20s %10s %10s %-30s %10s %10s %s\n", "version", "kernel ms", "candidate", "speed", "total ms", "candidate", "speed"
    printf "    %-20s %10s %10s %-30s %10s %10s\n", "", "(stage)", "", "", "(stage)", ""
    for (k = 1; k <= count["candidate"]; k++) {
        name = cell["candidate", k, "variant"]
        found = 0
        for (j = 1; j <= count["stage"]; j++) if (cell["stage", j, "variant"] == name) found = j
        s = found ? cell["stage", found, "loop_ms"] : ""
        c = cell["candidate", k, "loop_ms"]
        printf "    %-20s %10s %10s %-30s %10s %10s %s\n", name, ms(s), ms(c), speed(s, c),
            ms(found ? cell["stage", found, "e2e_ms"] : ""), ms(cell["candidate", k, "e2e_ms"]),
            speed(found ? cell["stage", found, "e2e_ms"] : "", cell["candidate", k, "e2e_ms"])
        if (name != "cpu" && s != "" && c != "" && c + 0 > 0 && s + 0 > 0) { logsum += log(s / c); used++ }
    }
    if (used == 0) { print "try: PASS (no GPU kernel time to compare)"; return }
    printf "try: PASS, relative GPU kernel speed %.2fx (geometric mean over %d versions)\n", exp(logsum / used), used
}
