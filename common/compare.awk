# common/compare.awk: the side-by-side table of `make stage N compare`, read from the result rows the
# two stages appended to build/compare/NN.csv (REPORT_CSV_HEADER first, as common/report.c writes it).
#
#     awk -f common/csv.awk -f common/compare.awk build/compare/03.csv
#
# Per trainer: one line per run (stage, variant, times, final test loss, and test accuracy or w / b),
# then the speedup of the last stage over the first. POSIX awk (mawk, gawk, busybox): lines are split by
# split_csv (common/csv.awk) rather than by -F, so that quoted fields with commas ("1024,1024") stay whole.

# Milliseconds as report.c prints them: 4 significant digits, no exponent; "-" when absent.
function ms(x) {
    if (x == "") return "-"
    return (x + 0 >= 1000) ? sprintf("%.0f", x) : sprintf("%.4g", x)
}

function num(x) { return x == "" ? "-" : sprintf("%.6g", x) }

function ratio(old, new) { return (old == "" || new == "" || new + 0 <= 0) ? "n/a" : sprintf("%.2fx", old / new) }

# wall = setup + e2e: what one training run costs its user; "" when a row records no setup (CSV schema 1)
function wall(t, k) {
    if (cell[t, k, "setup_ms"] == "" || cell[t, k, "e2e_ms"] == "") return ""
    return cell[t, k, "setup_ms"] + cell[t, k, "e2e_ms"]
}

{ sub(/\r$/, "") }

NR == 1 {
    n = split_csv($0, header)
    for (i = 1; i <= n; i++) column[header[i]] = i
    if (!("trainer" in column) || !("e2e_ms" in column)) {
        print "error: " FILENAME " does not start with the result-row header (stage,trainer,...)" > "/dev/stderr"
        bad_header = 1
        exit 2
    }
    next
}

NF == 0 { next }

{
    split_csv($0, f)
    t = f[column["trainer"]]
    if (!(t in count)) { trainers[++n_trainers] = t; count[t] = 0 }
    k = ++count[t]
    for (name in column) cell[t, k, name] = f[column[name]]
}

END {
    if (bad_header) exit 2
    for (j = 1; j <= n_trainers; j++) {
        t = trainers[j]
        if (t == "regression")
            printf "\nregression: %s points, %s epochs, lr %s", cell[t, 1, "points"], cell[t, 1, "epochs"], cell[t, 1, "lr"]
        else
            printf "\n%s: hidden %s, batch %s, %s epochs, lr %s, %s", t, cell[t, 1, "hidden"], cell[t, 1, "batch"],
                cell[t, 1, "epochs"], cell[t, 1, "lr"], cell[t, 1, "precision"]
        printf " on %s\n", cell[t, 1, "device"]
        printf "  %-14s %-12s %9s %10s %10s %10s %10s %9s %11s  %s\n", "stage", "variant", "setup ms", "e2e ms",
            "wall ms", "loop ms", "ms/epoch", "h2d ms", "final loss", (t == "regression" ? "w / b" : "test acc")
        for (k = 1; k <= count[t]; k++) {
            if (t == "regression") last = num(cell[t, k, "w"]) " / " num(cell[t, k, "b"])
            else last = cell[t, k, "test_acc"] == "" ? "-" : sprintf("%.2f%%", 100 * cell[t, k, "test_acc"])
            printf "  %-14s %-12s %9s %10s %10s %10s %10s %9s %11s  %s\n", cell[t, k, "stage"], cell[t, k, "variant"],
                ms(cell[t, k, "setup_ms"]), ms(cell[t, k, "e2e_ms"]), ms(wall(t, k)), ms(cell[t, k, "loop_ms"]),
                ms(cell[t, k, "ms_per_epoch"]), ms(cell[t, k, "h2d_ms"]), num(cell[t, k, "test_loss"]), last
        }
        first = 1
        final = count[t]
        if (final > 1 && cell[t, first, "stage"] != cell[t, final, "stage"])
            printf "  stage %s vs %s: e2e %s, wall %s, loop %s\n", cell[t, final, "stage"], cell[t, first, "stage"],
                ratio(cell[t, first, "e2e_ms"], cell[t, final, "e2e_ms"]), ratio(wall(t, first), wall(t, final)),
                ratio(cell[t, first, "loop_ms"], cell[t, final, "loop_ms"])
    }
}
