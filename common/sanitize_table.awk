# common/sanitize_table.awk: the table of `make sanitize` from $SAN_DIR/results (common/sanitize_run.sh's lines,
# sorted): one row per stage x trainer (x variant), one column per tool (-v tools="memcheck ..."), then one line of
# totals (-v dir=SAN_DIR, where the logs are).
BEGIN { ntools = split(tools, tool, " ") }
{
    row = sprintf("%-5s  %-24s", $1, $2); if (!(row in seen)) { seen[row] = 1; rows[++nrows] = row }
    verdict = $5; for (i = 6; i <= NF; i++) verdict = verdict " " $i
    cell[row, $3] = verdict " " $4 "s"; runs++
    if (verdict != "clean") bad++
    if (verdict ~ /\(library\)/) library++
    if (verdict ~ /^KILLED/) killed++
}
END {
    printf "%-5s  %-24s", "stage", "trainer"; for (t = 1; t <= ntools; t++) printf "  %-24s", tool[t]; printf "\n"
    for (r = 1; r <= nrows; r++) {
        printf "%s", rows[r]
        for (t = 1; t <= ntools; t++) printf "  %-24s", ((rows[r], tool[t]) in cell) ? cell[rows[r], tool[t]] : "-"
        printf "\n"
    }
    if (library) printf "(library): every report of that run is inside a closed library kernel (cuBLASLt, cuDNN), none in this repository's kernels\n"
    if (killed) printf "KILLED: most often the host's out-of-memory killer (dmesg says): racecheck of the bf16 GEMMs takes tens of GB each; lower SAN_JOBS\n"
    if (bad) printf "sanitize: %d of %d runs not clean: logs in %s/logs/\n", bad, runs, dir
    else printf "sanitize: all %d runs clean\n", runs
}
