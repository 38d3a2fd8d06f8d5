// common/report.h: the drivers' outputs (docs/DESIGN.md, "Result rows"): the human line on stdout, the CSV
// rows of --csv and --curve, --breakdown and --export. NaN / -1 / "" mean an empty column.
#ifndef REPORT_H
#define REPORT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "device.h"
#include "trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

// Schema 2 (bench/results_csv.py reads only this header); DESIGN.md's
// "Result rows" gives the columns. torch, graph_breaks and recompiles: PyTorch rows only.
#define REPORT_CSV_SCHEMA 2
#define REPORT_CSV_HEADER                                                                        \
    "stage,trainer,variant,points,hidden,batch,epochs,lr,precision,device,cc,cuda,driver,"       \
    "threads,torch,setup_ms,e2e_ms,loop_ms,ms_per_epoch,h2d_ms,repeats,setup_min_ms,"            \
    "setup_max_ms,e2e_min_ms,e2e_max_ms,loop_min_ms,loop_max_ms,epoch_min_ms,epoch_max_ms,"     \
    "train_loss,test_loss,test_acc,w,b,graph_breaks,recompiles,commit,dirty,run_id,utc"

typedef struct {
    char stage[16];
    char trainer[16];
    char variant[32];
    int64_t points;
    char hidden[64];
    int batch;
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
    char commit[48];     // provenance.h: the build's commit and dirty flag, the run, when the row was made
    char dirty[4];
    char run_id[48];
    char utc[24];
} ResultRow;

void result_row_init(ResultRow *row);  // every column empty but the provenance: commit, dirty, run_id, utc
// The columns that name a run; the reference's: stage cpu-reference, no variant, fp64, threads 1.
void result_row_name(ResultRow *row, int reference, const char *stage, const char *trainer, const char *variant,
                     const char *precision);
void report_print(const ResultRow *row, FILE *out);

// Whole files, for --csv, --curve, --export and the ladders' --csv: what goes into f goes to a temporary file
// beside target that report_file_close renames over it once all of it is on disk. report_rows_open, the one
// append of every CSV this repository writes, starts it with path's old rows (or header, when path is new or
// empty), for the caller to print complete lines after. Each returns -1 with a message when path cannot take
// them (not a regular file, rows of another header, a failed write), and path is then left as it was.
typedef struct {
    FILE *f;
    unsigned mode;
    char target[PATH_MAX], temp[PATH_MAX + 32];
} ReportFile;
int report_rows_open(ReportFile *out, const char *path, const char *header, char *err, size_t err_len);
int report_file_close(ReportFile *out, char *err, size_t err_len);
int report_append_csv(const ResultRow *row, const char *path, char *err, size_t err_len);
// Before the rows exist: path can take rows under header (or could be created); -1 with a message otherwise.
int report_check_rows(const char *path, const char *header, char *err, size_t err_len);
// The same for --csv and --curve before any training (either may be NULL), which must also be two files.
int report_check_outputs(const char *csv_path, const char *curve_path, char *err, size_t err_len);
// CSV fields: text, quoted (quotes doubled) only when it holds a comma, quote or line break,
// then a comma, or a newline if last; a number in format ("%.6g"), empty for NaN, then a comma.
void report_csv_text(FILE *f, const char *text, int last);
void report_csv_real(FILE *f, const char *format, double value);

// --curve FILE: long-format rows for plots, each naming the device, commit and run of its result row;
// values[i] gets index[i], or first_index + i when index is NULL. All the series of one run, or none.
#define REPORT_CURVE_HEADER "stage,trainer,variant,hidden,series,index,value,device,commit,run_id"
typedef struct {
    const char *series;
    const float *values;
    const int *index;
    int first_index, count;
} CurveSeries;
int report_append_curves(const char *path, const ResultRow *row, const CurveSeries *series, int n_series, char *err,
                         size_t err_len);
// The row of a run that trained, to --csv and then --curve (either may be NULL): EXIT_OK, or one error line
// ("error: --csv: ...", "error: --curve: ...") and EXIT_USAGE; a --csv that fails leaves --curve alone.
int report_append_outputs(const ResultRow *row, const char *csv_path, const char *curve_path,
                          const CurveSeries *series, int n_series);

// The statistics of timed runs, for the drivers and the ladders alike.
double median(const double *values, int n);  // of a copy; NaN when n == 0
// Smallest and largest of values[0..n), NaN ignored; both NaN when there is no number (or values is NULL).
void min_max(const double *values, int n, double *lo, double *hi);
// The drivers' timed runs in one block of REPORT_RUN_FIGURES x runs doubles: report_record_run keeps run
// `run`'s e2e, loop, h2d and setup times and its median epoch; result_row_set_runs gives the row the device,
// the medians of those figures and, through result_row_set_repeats, repeats, the median setup (NULL: none)
// and the min / max of setup, e2e, loop and the runs' median epochs.
#define REPORT_RUN_FIGURES 5
void report_reset_timing(TrainTiming *timing, int epochs);  // before a run: every figure NaN, no phase time
void report_record_run(double *runs_ms, int runs, int run, const TrainTiming *timing, int epochs);
void result_row_set_runs(ResultRow *row, const DeviceInfo *device, const double *runs_ms, int runs);
void result_row_set_repeats(ResultRow *row, const double *setup_ms, const double *e2e_ms, const double *loop_ms,
                            const double *per_epoch_ms, int runs);

// Once training is over: a loss that diverged (bad_epoch >= 0; bad: "NaN", "Inf" or divergence.h's text)
// is one error line and EXIT_DIVERGED; else the setup time (unless quiet), the phase table with breakdown,
// and EXIT_OK.
int report_training_outcome(int bad_epoch, const char *bad, const TrainTiming *timing, int quiet, int breakdown);
// Flushes stdout: -1, after one error line on stderr, when the results could not be written there (a full
// disk, /dev/full, a closed pipe's error). report_exit_status, a driver's last call, turns EXIT_OK into
// EXIT_USAGE then, so that a lost result line is a failed run.
int report_flush_stdout(void);
int report_exit_status(int status);

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
