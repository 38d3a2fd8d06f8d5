// common/exit_codes.h: the exit codes every program of this repository uses.
// A failure prints one line on stderr ("error: ...") and exits with one of these; docs/DESIGN.md,
// "Exit codes and error lines", lists the messages. tests/cli_smoke.sh checks one case of each.
#ifndef EXIT_CODES_H
#define EXIT_CODES_H

enum {
    EXIT_OK = 0,
    EXIT_USAGE = 2,        // invalid flag or value; an output or result that cannot be written (DESIGN.md lists them)
    EXIT_DATA = 3,         // missing, corrupt or truncated input data; a download that fails its checksum
    EXIT_HOST_MEMORY = 3,  // not enough host memory for the data or the results: counted as a data error
    EXIT_CUDA = 4,         // no CUDA device, not enough device memory, any CUDA/cuBLAS/cuDNN/cuRAND error
    EXIT_DIVERGED = 5,     // a loss became NaN or Inf, or grew past 1e6 times its first value (divergence.h)
};

#endif
