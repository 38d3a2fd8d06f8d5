// common/exit_codes.h: the exit codes every program of this repository uses.
// A failure prints one line on stderr ("error: ...") and exits with one of these.
#ifndef EXIT_CODES_H
#define EXIT_CODES_H

enum {
    EXIT_OK = 0,
    EXIT_USAGE = 2,     // invalid flag or value
    EXIT_DATA = 3,      // missing, corrupt or truncated input data
    EXIT_CUDA = 4,      // no CUDA device, out of device memory, any CUDA/cuBLAS/cuDNN/cuRAND error
    EXIT_DIVERGED = 5,  // a loss became NaN or Inf
};

#endif
