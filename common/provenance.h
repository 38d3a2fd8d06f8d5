// common/provenance.h: what every result row says about where it comes from (DESIGN.md, "Result
// rows"): the commit the program was built at and whether the tree had uncommitted changes (compiled in
// as -DGIT_COMMIT and -DGIT_DIRTY from the Makefile's record, build/.commit and build/.dirty), the run it
// belongs to (bench/run_bench.py sets CUDA_STAGES_RUN_ID for every row of a `make bench`; else one per
// process), and when it was written.
#ifndef PROVENANCE_H
#define PROVENANCE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PROVENANCE_RUN_ID_ENV "CUDA_STAGES_RUN_ID"

const char *provenance_commit(void);  // "3f2a...": 12 hex digits, or what GIT_COMMIT_ID said; "unknown"
const char *provenance_dirty(void);   // "0" clean, "1" uncommitted changes to tracked files, "" unknown
// CUDA_STAGES_RUN_ID when set (up to 47 characters), else "<UTC start, 20250101T120000Z>-p<pid>".
const char *provenance_run_id(void);
// The UTC time now as "2025-01-01T12:00:00Z" (ISO 8601); "" when the clock cannot be read.
void provenance_utc(char *out, size_t len);

#ifdef __cplusplus
}
#endif

#endif
