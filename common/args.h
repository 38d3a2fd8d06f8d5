// common/args.h: the drivers' flags, each one validated (one clear line per mistake).
#ifndef ARGS_H
#define ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TRAINER_REGRESSION, TRAINER_MNIST } TrainerKind;

typedef struct {
    TrainerKind trainer;
    int64_t points;                // regression: --points (5,000,000)
    int epochs;                    // --epochs (200 regression, 10 MNIST)
    float lr;                      // --lr (0.01 regression, 0.1 MNIST)
    int batch;                     // MNIST: --batch (128)
    int hidden[MNIST_MAX_LAYERS - 1];
    int n_hidden;                  // MNIST: --hidden 128 (default), 1024,1024, or 0 (no hidden layer)
    uint64_t seed;                 // --seed (42): regression noise; MNIST init and batch order
    const char *data_dir;          // MNIST: --data (data/mnist)
    const char *csv_path;          // --csv FILE: append a result row
    const char *export_dir;        // --export DIR: write what PyTorch needs to train the same problem, then exit
    const char *curve_path;        // --curve FILE: append the loss curve (long CSV) for plots
    const char *variant;           // --variant NAME (checked by the driver against the stage's list)
    const char *precision;         // MNIST: --precision fp32|tf32|bf16 (checked against the stage's list)
    int breakdown;                 // --breakdown
    int reference;                 // --reference: train with the CPU reference instead of the GPU
    int quiet;                     // --quiet: only the result line
    int list_variants;             // --list-variants: print "variant NAME" (and "precision NAME") lines, exit
    int warmup;                    // --warmup N (1): untimed 1-epoch runs before the timed ones
    int repeat;                    // --repeat N (1): timed runs; the report gives medians
} Options;

// Returns 0 when opt is ready, 1 when --help was asked for (usage printed on stdout), and -1 with
// a one-line message in err on any invalid flag or value.
int parse_args(int argc, char **argv, TrainerKind trainer, Options *opt, char *err, size_t err_len);
void print_usage(TrainerKind trainer, const char *program, FILE *out);

// The index of value in the NULL-terminated names (value NULL = the first, the default); -1 with a
// one-line message in err, naming context ("stage 02 regression") and listing the names, otherwise.
int args_pick(const char *flag, const char *value, const char *const *names, const char *context, char *err,
              size_t err_len);

// How often a --reference run prints its progress on stderr: CUDA_STAGES_PROGRESS_SECONDS (default 10,
// 0 .. 86400). -1 with a one-line message in err for any other value.
int args_progress_seconds(double *out, char *err, size_t err_len);

// A driver's flags end to end: parse_args, --list-variants (precisions may be NULL), --variant and --precision
// against the stage's lists (the reference's: the default and fp32), CUDA_STAGES_PROGRESS_SECONDS, and
// report_check_outputs. -1 when the run goes on, with *variant (into variants) and *precision set; else the
// exit status, after one error line unless for --help or --list-variants. stage: "02", for messages.
int args_driver_flags(int argc, char **argv, TrainerKind trainer, const char *stage, const char *const *variants,
                      const char *const *precisions, Options *opt, int *variant, Precision *precision);

#ifdef __cplusplus
}
#endif

#endif
