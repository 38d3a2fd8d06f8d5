// common/provenance.h: what every result row says about where it comes from (DESIGN.md, "Result
// rows"): the commit the program was built at and whether the tree had uncommitted changes, the run
// it belongs to, and when it was written.
//
// The commit and the dirty flag are compiled in (-DGIT_COMMIT, -DGIT_DIRTY: the Makefile passes them
// to provenance.o from `make GIT_COMMIT_ID=... GIT_DIRTY=...`, else from git when this tree is the
// root of a git work tree, else from build/.commit and build/.dirty, written by an earlier build).
// The run id comes from CUDA_STAGES_RUN_ID (bench/run_bench.py sets one for every row of a
// `make bench`), else it is made once per process, so that the rows one program writes share it.
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
