// tests/gpu/skip_report.h: the line a GPU suite prints at its end when tests were skipped (no GPU),
// "<suite> suite: N of M tests SKIPPED (<why>): nothing was checked by them", which tests/run_all.sh
// counts. Criterion's default output does not show skips. Include it once per test binary, after
// defining GPU_SUITE_NAME, the suite's name in that line ("gemm_ladder").
#ifndef SKIP_REPORT_H
#define SKIP_REPORT_H

#include <stdio.h>
#include <criterion/criterion.h>
#include <criterion/hooks.h>

static char skip_reason[256];  // the message of the last skipped test

ReportHook(POST_TEST)(struct criterion_test_stats *stats) {
    if (stats->test_status == CR_STATUS_SKIPPED && stats->message)
        snprintf(skip_reason, sizeof(skip_reason), "%s", stats->message);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    if (stats->tests_skipped > 0)
        fprintf(stderr, "%s suite: %zu of %zu tests SKIPPED (%s): nothing was checked by them\n", GPU_SUITE_NAME,
                stats->tests_skipped, stats->nb_tests, skip_reason);
}

#endif
