// common/report.h: result rows (docs/DESIGN.md, "Result rows"): one human line on stdout, and one CSV
// row appended to --csv FILE (header written when the file is new). NaN / -1 / "" mean an empty column.
#ifndef REPORT_H
#define REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "device.h"
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

// Schema 2 of the result rows (bench/results_csv.py reads schema 1 files too: the header tells them
// apart). Provenance: threads (CPU rows: the threads that trained), torch (PyTorch rows: its version),
// commit and dirty (the build's), run_id (one per `make bench`, else per process), utc (row written).
// Repeats: the timed figures are medians of `repeats` runs; *_min_ms / *_max_ms give their range.
// graph_breaks and recompiles: torch.compile rows only (empty elsewhere).
#define REPORT_CSV_SCHEMA 2
#define REPORT_CSV_HEADER                                                                        \
    "stage,trainer,variant,points,hidden,batch,epochs,lr,precision,device,cc,cuda,driver,"       \
    "threads,torch,setup_ms,e2e_ms,loop_ms,ms_per_epoch,h2d_ms,repeats,setup_min_ms,"            \
    "setup_max_ms,e2e_min_ms,e2e_max_ms,loop_min_ms,loop_max_ms,epoch_min_ms,epoch_max_ms,"     \
    "train_loss,test_loss,test_acc,w,b,graph_breaks,recompiles,commit,dirty,run_id,utc"

typedef struct {
    char stage[16];      // "02".."07", "cpu-reference", "pytorch"
    char trainer[16];    // "regression", "mnist"
    char variant[32];
    int64_t points;      // regression: all points (train + test); -1 for MNIST
    char hidden[64];     // MNIST: "128", "1024,1024", "0"; "" for regression
    int batch;           // -1 for regression
    int epochs;
    double lr;
    char precision[8];
    char device[128], cc[8], cuda[16], driver[16];
    int threads;         // CPU rows: the threads that trained (the CPU reference: 1); -1 elsewhere
    double setup_ms;     // median untimed set-up before e2e starts (handles, autotuning, graphs)
    double e2e_ms, loop_ms, ms_per_epoch, h2d_ms;
    int repeats;         // timed runs the medians are taken over; -1 when not recorded
    double setup_min_ms, setup_max_ms, e2e_min_ms, e2e_max_ms, loop_min_ms, loop_max_ms;
    double epoch_min_ms, epoch_max_ms;  // range of the runs' median epochs
    double train_loss, test_loss, test_acc, w, b;
    char commit[48];
    char dirty[4];       // "0", "1", "" (unknown)
    char run_id[48];
    char utc[24];        // "2025-01-01T12:00:00Z", when the row was made
} ResultRow;

void result_row_init(ResultRow *row);  // every column empty but the provenance: commit, dirty, run_id, utc
void report_print(const ResultRow *row, FILE *out);
// Returns -1 with a message in err when the file cannot be written, or holds rows of another header;
// the file is then left as it was (the row goes to a temporary file renamed over it when complete).
int report_append_csv(const ResultRow *row, const char *path, char *err, size_t err_len);
// A CSV text field, quoted (quotes doubled) only when it holds a comma, quote or line break; then a comma,
// or a newline if last.
void report_csv_text(FILE *f, const char *text, int last);
// Before any training: --csv and --curve (either may be NULL) can take their rows: each is a regular
// file with the right header (or empty), or a new file where one can be created, and they differ.
int report_check_outputs(const char *csv_path, const char *curve_path, char *err, size_t err_len);
// The one append path of every CSV this repository writes (result rows, curves, the ladders' rows):
// write_rows(f, ctx) prints complete lines, which go to path under header (written when the file is new
// or empty), whole or not at all. -1 with a message when path cannot take them (as report_append_csv).
typedef void (*ReportRowsFn)(FILE *f, const void *ctx);
int report_append_rows(const char *path, const char *header, ReportRowsFn write_rows, const void *ctx, char *err,
                       size_t err_len);
// Before the rows exist: path can take rows under header (a regular file that starts with it, or is
// empty, or a new file where one can be created); -1 with a message otherwise.
int report_check_rows(const char *path, const char *header, char *err, size_t err_len);
// A CSV number in format ("%.6g"), then a comma; an empty field for NaN.
void report_csv_real(FILE *f, const char *format, double value);
// Flushes stdout: -1, after one error line on stderr, when the results could not be written there
// (a full disk, /dev/full, a closed pipe's error).
int report_flush_stdout(void);
// A driver's exit status, stdout flushed last: a failed flush turns EXIT_OK into EXIT_USAGE, so that a
// result line lost to a full disk or /dev/full is a failed run.
int report_exit_status(int status);

// The statistics of timed runs, for the drivers and the ladders alike.
double median(const double *values, int n);  // of a copy; NaN when n == 0
// Smallest and largest of values[0..n), NaN ignored; both NaN when there is no number (or values is NULL).
void min_max(const double *values, int n, double *lo, double *hi);

// The drivers' other outputs. --curve FILE: long-format rows (header when the file is new) for plots;
// values[i] gets index[i], or first_index + i when index is NULL.
// Each row also names the device, commit and run of the result row it belongs to.
#define REPORT_CURVE_HEADER "stage,trainer,variant,hidden,series,index,value,device,commit,run_id"
// Several series of one run in one append: all of them are written, or none.
typedef struct {
    const char *series;
    const float *values;
    const int *index;  // NULL: first_index + i
    int first_index, count;
} CurveSeries;
int report_append_curves(const char *path, const ResultRow *row, const CurveSeries *series, int n_series, char *err,
                         size_t err_len);
// The spread of the timed runs: setup_ms (median), repeats, and the min / max of setup, e2e, loop and
// the runs' median epochs (result_row_set_runs sets their medians too). NULL setup_ms: none.
void result_row_set_repeats(ResultRow *row, const double *setup_ms, const double *e2e_ms, const double *loop_ms,
                            const double *per_epoch_ms, int runs);
// The drivers' timed runs in one block of REPORT_RUN_FIGURES x runs doubles that the caller allocates:
// report_record_run keeps run `run`'s e2e, loop, h2d and setup times and its median epoch (of
// timing->epoch_ms[0..epochs)); result_row_set_runs gives the row the device, the medians of those
// figures and their spread (result_row_set_repeats).
#define REPORT_RUN_FIGURES 5
// Before a run: every figure of timing NaN (timing->epoch_ms[0..epochs) too), no phase time.
void report_reset_timing(TrainTiming *timing, int epochs);
void report_record_run(double *runs_ms, int runs, int run, const TrainTiming *timing, int epochs);
void result_row_set_runs(ResultRow *row, const DeviceInfo *device, const double *runs_ms, int runs);
// The columns that name a run: stage (cpu-reference for the reference), trainer, variant and precision
// (empty and fp64 for the reference), and threads (1 for the single-threaded reference).
void result_row_name(ResultRow *row, int reference, const char *stage, const char *trainer, const char *variant,
                     const char *precision);
// What every driver prints once training is over. A loss that diverged (bad_epoch >= 0; bad: "NaN",
// "Inf", or the value past the growth limit of divergence.h): one error line on stderr, and EXIT_DIVERGED. Otherwise the untimed setup time
// (unless quiet) and, with breakdown, the phase table; EXIT_OK.
int report_training_outcome(int bad_epoch, const char *bad, const TrainTiming *timing, int quiet, int breakdown);
// The row of a run that trained, appended to --csv and then to --curve with its series (either path may
// be NULL): EXIT_OK, or one error line ("error: --csv: ...", "error: --curve: ...") and EXIT_USAGE; a
// --csv that fails leaves --curve alone.
int report_append_outputs(const ResultRow *row, const char *csv_path, const char *curve_path,
                          const CurveSeries *series, int n_series);
// --export: writes bytes to dir/name, creating dir (and its parents) first; whole or not at all.
int report_write_file(const char *dir, const char *name, const void *data, size_t bytes, char *err, size_t err_len);
// --export's files: two arrays, then the JSON that names them (last, so that a JSON on disk means its arrays are
// there), and unless quiet one "exported" line; EXIT_OK, or one "error: --export: ..." line and EXIT_USAGE.
typedef struct {
    const char *name;
    const void *data;
    size_t bytes;
} ExportFile;
int report_export(const char *dir, const ExportFile files[3], int quiet);

#ifdef __cplusplus
}
#endif

#endif
