// common/provenance.c: the commit, dirty flag, run id and time stamp of result rows (provenance.h).
// Built into build/common/libcommon.a with -DGIT_COMMIT and -DGIT_DIRTY: the Makefile's record (build/.commit,
// build/.dirty), a commit never empty and a flag that is 0, 1 or empty.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "provenance.h"

#ifndef GIT_COMMIT
#define GIT_COMMIT "unknown"
#endif
#ifndef GIT_DIRTY
#define GIT_DIRTY ""
#endif

// The UTC time now in format; "" when the clock cannot be read or the text does not fit.
static void utc_now(char *out, size_t len, const char *format) {
    if (len == 0) return;
    time_t t = time(NULL);
    struct tm utc;
    if (t == (time_t)-1 || !gmtime_r(&t, &utc) || strftime(out, len, format, &utc) == 0) out[0] = '\0';
}

const char *provenance_commit(void) { return GIT_COMMIT; }

const char *provenance_dirty(void) { return GIT_DIRTY; }

const char *provenance_run_id(void) {
    static char run_id[48];
    if (run_id[0]) return run_id;
    const char *given = getenv(PROVENANCE_RUN_ID_ENV);
    if (given && given[0]) {
        snprintf(run_id, sizeof(run_id), "%s", given);
        return run_id;
    }
    char now[32];
    utc_now(now, sizeof(now), "%Y%m%dT%H%M%SZ");
    snprintf(run_id, sizeof(run_id), "%s-p%ld", now[0] ? now : "unknown-time", (long)getpid());
    return run_id;
}

void provenance_utc(char *out, size_t len) { utc_now(out, len, "%Y-%m-%dT%H:%M:%SZ"); }
