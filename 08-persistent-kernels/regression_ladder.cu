/*
Kernel ladder, stage 08: the regression trainer's epochs, one idea per version. E epochs of full-batch gradient
descent over N points (y = 0.7 x + 0.3 + noise, the trainer's data, initial w and b and learning rate), every epoch
on the GPU with no host work in between. The kernels are the trainer's own: regression.cu is compiled into this
program (#include below), so the ladder times exactly what train_regression launches.

    0 graphs       the baseline: stage 07's two kernels an epoch (forward_loss_backward_kernel, then
                   sgd_update_kernel), EPOCHS_PER_GRAPH epochs captured into one CUDA graph, the graph launched
                   E / EPOCHS_PER_GRAPH times and any epochs left over launched eagerly (the trainer's graphs variant)
    1 from-global  one cooperative launch for all E epochs (regression_persistent_kernel): each block sums its own
                   chunk of the points, the blocks meet at one grid.sync() an epoch and each applies the same update;
                   nothing is held on chip, so every epoch reads x and y from global memory (at 4M points, 32 MB:
                   they stay in L2)
    2 on-chip      1 as the trainer sets it up (persistent_layout): each block loads its chunk once, x into shared
                   memory and y into registers, and reads only what does not fit from global memory every epoch

    make stage 8 ladder LADDER=regression            (4,000,000 points, 200 epochs)
    build/08/regression_ladder --n 1000003 --epochs 50 --version on-chip --repeat 50 --csv l.csv

Time per epoch: one run (all E epochs, from the same initial w and b, restored untimed before each run) between
CUDA events, ÷ E; median of --repeat runs after 3 warm-ups, min-max as the spread. GB/s count an epoch's reads of
x and y, 8 B a point: for on-chip, which reads most points once a run, an effective rate. The points are the first
N of regression_generate's set of N / 0.8 points (seed 42): at the default N, the trainer's training set at
--points 5e6. Every version's trained w and b and its train losses at the logged epochs (every 10th and the last)
are checked against reference_train_regression (double precision) before it is timed; a version the GPU cannot
run (no cooperative launches) is skipped with the reason.

Exit codes: 0 ok; 1 a wrong result; 2 an invalid flag or an unwritable --csv file; 3 out of host memory;
4 no GPU or any CUDA error.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#include "data.h"
#include "device.h"
#include "host.h"
#include "ladder.h"
#include "ladder_gpu.h"
#include "reference.h"
// The trainer: its kernels and launchers (forward_loss_backward, sgd_update, persistent_layout, persistent_run)
// are the versions' code; its train_regression comes along unused.
#include "regression.cu"

#define LOG_EVERY 10  // the trainer driver's log interval (common/regression_main.c)
#define LR 0.01f      // the trainer's default learning rate
#define SEED 42       // the trainer's default seed

enum { GRAPHS, FROM_GLOBAL, ON_CHIP, VERSION_COUNT };  // version numbers
static const char *const VERSION_NAMES[VERSION_COUNT] = {"graphs", "from-global", "on-chip"};

// ----------------------------------------------------------------------------
// one version's run: its launch, its buffers, and the restore before every run

typedef struct {
    int version;
    int64_t n;
    int epochs, n_logged;
    float *x, *y;               // (n,) the training set
    float *params, *init;       // (2,) w, b, trained in place; the initial ones, copied in before every run
    double *loss_sum;           // (1,) graphs: this epoch's sum of squared residuals
    double *grad_sum;           // (2,) graphs: sum of r x, sum of r
    int *epoch;                 // (1,) graphs: the epoch the next update ends
    double *loss_log;           // (n_logged,) the logged epochs' train sums of squared residuals
    float *param_log;           // (n_logged, 2) w, b at the start of each logged epoch
    int *log_slots;             // (epochs,) an epoch's slot in the logs, -1: not logged
    DoubleSums *partial;        // (2, blocks) from-global, on-chip: each block's sums of an epoch
    PersistentArgs persistent;  // from-global, on-chip: the launch
    cudaGraphExec_t graph;      // graphs: EPOCHS_PER_GRAPH epochs
    int graph_launches;         // graphs: launches of graph a run; the epochs left over run eagerly
    char why[192];              // why the version cannot run here ("" when it can)
} Run;

// Versions 1-2: the trainer's launch (persistent_layout); version 1 then holds nothing on chip. 0, with r->why,
// where this GPU cannot run the persistent kernel.
static int plan_persistent(Run *r) {
    int device = 0, cooperative = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    if (!cooperative) {
        snprintf(r->why, sizeof(r->why), "this GPU has no cooperative launches");
        return 0;
    }
    RegressionConfig cfg = {};
    cfg.epochs = r->epochs;
    cfg.lr = LR;
    cfg.log_every = LOG_EVERY;
    cfg.variant = VARIANT_PERSISTENT;
    if (!persistent_layout(&cfg, r->n, &r->persistent)) {  // it printed a note
        snprintf(r->why, sizeof(r->why), "a block of %d threads does not fit on an SM", PERSISTENT_THREADS);
        return 0;
    }
    if (r->version == FROM_GLOBAL) {
        r->persistent.on_chip = 0;  // rows = 0 in every block: all its points come from global memory
        r->persistent.shared_bytes = 0;
    }
    return 1;
}

// The version's launch, no buffers yet: 0, with r->why, where it cannot run here.
static int run_plan(Run *r, int version, int64_t n, int epochs) {
    memset(r, 0, sizeof(*r));
    r->version = version;
    r->n = n;
    r->epochs = epochs;
    r->n_logged = regression_logged_count(epochs, LOG_EVERY);
    wave_blocks();  // the grid of forward_loss_backward: asked once before any capture, as the trainer's setup does
    r->graph_launches = epochs / EPOCHS_PER_GRAPH;
    return version == GRAPHS || plan_persistent(r);
}

// One epoch of the graphs version, enqueued on stream: what the trainer's graph holds EPOCHS_PER_GRAPH of.
static void enqueue_epoch(const Run *r, cudaStream_t stream) {
    forward_loss_backward(r->loss_sum, r->grad_sum, r->x, r->y, r->params, r->n, stream);
    sgd_update(r->params, r->loss_sum, r->grad_sum, r->loss_log, r->param_log, r->log_slots, r->epoch, LR, r->n,
               stream);
}

// The graphs version's graph: EPOCHS_PER_GRAPH epochs, captured, instantiated and uploaded once (set-up, untimed).
static void capture_epochs(Run *r) {
    cudaStream_t stream;
    cudaGraph_t epochs_graph;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));  // the default stream cannot capture
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int e = 0; e < EPOCHS_PER_GRAPH; e++) enqueue_epoch(r, stream);
    cudaCheck(cudaStreamEndCapture(stream, &epochs_graph));
    cudaCheck(cudaGraphInstantiate(&r->graph, epochs_graph, 0));
    cudaCheck(cudaGraphDestroy(epochs_graph));
    cudaCheck(cudaGraphUpload(r->graph, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaStreamDestroy(stream));
}

// run_plan, then the buffers, x and y (n,) uploaded, the graph captured: 0, with r->why, where it cannot run here.
static int run_setup(Run *r, int version, const float *x, const float *y, int64_t n, int epochs) {
    if (!run_plan(r, version, n, epochs)) return 0;
    const float init[2] = {REGRESSION_W_INIT, REGRESSION_B_INIT};
    int *log_slots = (int *)host_malloc(sizeof(int) * (size_t)epochs, "the log slots");
    for (int e = 0, logged = 0; e < epochs; e++)
        log_slots[e] = regression_epoch_logged(e, epochs, LOG_EVERY) ? logged++ : -1;
    r->x = (float *)ladder_to_device(x, sizeof(float) * (size_t)n);
    r->y = (float *)ladder_to_device(y, sizeof(float) * (size_t)n);
    r->init = (float *)ladder_to_device(init, sizeof(init));
    r->log_slots = (int *)ladder_to_device(log_slots, sizeof(int) * (size_t)epochs);
    free(log_slots);
    cudaCheck(cudaMalloc(&r->params, 2 * sizeof(float)));
    r->loss_sum = (double *)device_zeros(sizeof(double));
    r->grad_sum = (double *)device_zeros(2 * sizeof(double));
    r->epoch = (int *)device_zeros(sizeof(int));
    r->loss_log = (double *)device_zeros(sizeof(double) * (size_t)r->n_logged);
    r->param_log = (float *)device_zeros(2 * sizeof(float) * (size_t)r->n_logged);
    if (version == GRAPHS) {
        if (r->graph_launches > 0) capture_epochs(r);
        return 1;
    }
    PersistentArgs *a = &r->persistent;
    cudaCheck(cudaMalloc(&r->partial, 2 * sizeof(DoubleSums) * (size_t)a->blocks));
    a->x = r->x, a->y = r->y, a->params = r->params, a->partial = r->partial;
    a->loss_log = r->loss_log, a->param_log = r->param_log, a->log_slots = r->log_slots;
    return 1;
}

static void run_free(Run *r) {
    void *buffers[] = {r->x,     r->y,        r->params,  r->init,      r->loss_sum, r->grad_sum,
                       r->epoch, r->loss_log, r->param_log, r->log_slots, r->partial};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) cudaCheck(cudaFree(buffers[i]));
    if (r->graph) cudaCheck(cudaGraphExecDestroy(r->graph));
}

// Before every run (untimed): the initial w and b; for graphs, the epoch counter (the update reads the log slot
// of its epoch) and the sums (each update zeroes them for the next epoch: this is for a first run only).
static void run_restore(void *ctx) {
    Run *r = (Run *)ctx;
    cudaCheck(cudaMemcpyAsync(r->params, r->init, 2 * sizeof(float), cudaMemcpyDeviceToDevice, 0));
    cudaCheck(cudaMemsetAsync(r->epoch, 0, sizeof(int), 0));
    cudaCheck(cudaMemsetAsync(r->loss_sum, 0, sizeof(double), 0));
    cudaCheck(cudaMemsetAsync(r->grad_sum, 0, 2 * sizeof(double), 0));
}

// One run: every epoch, on the default stream.
static void run_epochs(void *ctx) {
    Run *r = (Run *)ctx;
    if (r->version != GRAPHS) {
        persistent_run(&r->persistent, 0);
        return;
    }
    for (int g = 0; g < r->graph_launches; g++) cudaCheck(cudaGraphLaunch(r->graph, 0));
    for (int e = r->graph_launches * EPOCHS_PER_GRAPH; e < r->epochs; e++) enqueue_epoch(r, 0);
}

// One checked run from the initial w, b: the trained params (2,) and the logged epochs' train MSE (n_logged,).
static void run_once(Run *r, float params[2], float *losses) {
    run_restore(r);
    run_epochs(r);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(params, r->params, 2 * sizeof(float), cudaMemcpyDeviceToHost));
    double *sums = (double *)host_malloc(sizeof(double) * (size_t)r->n_logged, "the losses");
    cudaCheck(cudaMemcpy(sums, r->loss_log, sizeof(double) * (size_t)r->n_logged, cudaMemcpyDeviceToHost));
    for (int k = 0; k < r->n_logged; k++) losses[k] = (float)(sums[k] / (double)r->n);  // as the trainer reports
    free(sums);
}

// ----------------------------------------------------------------------------
// the data, the check against the CPU, and the entry points of tests/gpu/test_regression_ladder.c (which declares
// these itself; index counts from 0, 0: graphs)

// The GPU suite's fp32 tolerances (tests/gpu/test_stage.c: about 10x the largest error it measured), relative:
// w and b 2e-6, the train losses 5e-5. A dropped block moves the losses by percents, a dropped point of data
// whose only signal is in its last points (the test's) moves w at once.
#define PARAM_REL 2e-6
#define LOSS_REL 5e-5

static double rel_err(double got, double want) { return fabs(got - want) / (fabs(want) > 1e-30 ? fabs(want) : 1e-30); }

extern "C" int regression_ladder_version_count(void) { return VERSION_COUNT; }
extern "C" const char *regression_ladder_version_name(int index) { return VERSION_NAMES[index]; }
extern "C" int regression_ladder_logged(int epochs) { return regression_logged_count(epochs, LOG_EVERY); }

// The ladder's points: regression_generate's set of n / 0.8 points (at least its 10), whose first n are the
// training set the trainer takes from it. set->x, set->y hold them; -1 (why in err) as regression_generate.
extern "C" int regression_ladder_generate(int64_t n, RegressionSet *set, char *err, size_t err_len) {
    int64_t points = n + (n + 3) / 4;
    return regression_generate(points > 10 ? points : 10, SEED, set, err, err_len);
}

// The CPU reference (double precision) on x, y (n,) from the trainer's initial w, b: the trained params (2,)
// and the logged epochs' train MSE (regression_ladder_logged(epochs),).
extern "C" void regression_ladder_reference(const float *x, const float *y, int64_t n, int epochs, float params[2],
                                            float *losses) {
    RegressionConfig cfg = {};
    cfg.epochs = epochs;
    cfg.lr = LR;
    cfg.log_every = LOG_EVERY;
    RegressionData data = {};
    data.x_train = data.x_test = x;
    data.y_train = data.y_test = y;
    data.n_train = n;
    data.n_test = 1;  // the test losses are not checked: one point keeps them defined
    data.w_init = REGRESSION_W_INIT;
    data.b_init = REGRESSION_B_INIT;
    RegressionResult out = {};
    out.train_loss = losses;
    out.test_loss = (float *)host_malloc(sizeof(float) * (size_t)regression_ladder_logged(epochs), "test losses");
    out.timing.epoch_ms = (double *)host_malloc(sizeof(double) * (size_t)epochs, "the epoch times");
    reference_train_regression(&cfg, &data, &out);
    params[0] = out.w;
    params[1] = out.b;
    free(out.test_loss);
    free(out.timing.epoch_ms);
}

// 1 if params and losses match the reference's within the tolerances; else 0, and the first miss in why.
extern "C" int regression_ladder_check(int epochs, const float expected_params[2], const float *expected_losses,
                                       const float params[2], const float *losses, char *why, size_t why_len) {
    static const char *const names[2] = {"w", "b"};
    for (int k = 0; k < regression_ladder_logged(epochs); k++) {
        if (rel_err(losses[k], expected_losses[k]) <= LOSS_REL) continue;  // NaN fails too
        snprintf(why, why_len, "the train loss of logged epoch %d is %.9g, the CPU's %.9g (relative tolerance %.0e)",
                 k, losses[k], expected_losses[k], LOSS_REL);
        return 0;
    }
    for (int p = 0; p < 2; p++) {
        if (rel_err(params[p], expected_params[p]) <= PARAM_REL) continue;
        snprintf(why, why_len, "%s is %.9g, the CPU's %.9g (relative tolerance %.0e)", names[p], params[p],
                 expected_params[p], PARAM_REL);
        return 0;
    }
    return 1;
}

// One run of version index over x, y (n,) in host memory for `epochs` epochs from the trainer's initial w, b:
// the trained params (2,) and the logged epochs' train MSE (regression_ladder_logged(epochs),). Returns NULL, or
// why the version cannot run on this GPU (then nothing was written).
extern "C" const char *regression_ladder_run(int index, const float *x, const float *y, int64_t n, int epochs,
                                             float params[2], float *losses) {
    static char why[192];
    Run r;
    if (!run_setup(&r, index, x, y, n, epochs)) {
        snprintf(why, sizeof(why), "%s", r.why);
        return why;
    }
    run_once(&r, params, losses);
    run_free(&r);
    return NULL;
}

#ifndef LADDER_NO_MAIN
// ----------------------------------------------------------------------------
// the program: flags, the baseline (version 0, in the ceiling slot), the table, the check, the CSV rows

#define DEFAULT_N 4000000  // the trainer's training set: 80% of its 5,000,000 points
#define MAX_N 250000000
#define DEFAULT_EPOCHS 200

static const char *row_name(int index) { return VERSION_NAMES[index + 1]; }  // --version counts from 1

typedef struct {
    const float *x, *y;  // (n,) the points
    int64_t n;
    int epochs, repeats;
    float expected_params[2];
    const float *expected_losses;  // (n_logged,)
} Problem;

// Version v set up, checked against the reference (exit 1 when wrong) and timed: its time per epoch.
// Returns 0 (and fills why) when it cannot run on this GPU.
static int check_and_time(const Problem *p, int v, LadderStats *time, char *why, size_t why_len) {
    Run r;
    if (!run_setup(&r, v, p->x, p->y, p->n, p->epochs)) {
        snprintf(why, why_len, "%s", r.why);
        return 0;
    }
    float params[2];
    float *losses = (float *)host_malloc(sizeof(float) * (size_t)r.n_logged, "the losses");
    run_once(&r, params, losses);
    char wrong[256];
    if (!regression_ladder_check(p->epochs, p->expected_params, p->expected_losses, params, losses, wrong,
                                 sizeof(wrong))) {
        fprintf(stderr, "error: version %d %s is wrong at %lld points, %d epochs: %s\n", v, VERSION_NAMES[v],
                (long long)p->n, p->epochs, wrong);
        exit(EXIT_FAILURE);
    }
    free(losses);
    *time = ladder_time_runs(run_restore, run_epochs, &r, 1, p->repeats);
    time->median_ms /= p->epochs;
    time->min_ms /= p->epochs;
    time->max_ms /= p->epochs;
    run_free(&r);
    return 1;
}

// A line on the launch version v makes (nothing where it cannot run: its row says why).
static void print_launch(int v, const Problem *p) {
    Run r;
    if (!run_plan(&r, v, p->n, p->epochs)) return;
    printf("     %-12s ", VERSION_NAMES[v]);
    if (v == GRAPHS) {
        printf("%d graph launches of %d epochs and %d eager epochs; an epoch: %u blocks x %d threads, then 1 x 1\n",
               r.graph_launches, EPOCHS_PER_GRAPH, p->epochs - r.graph_launches * EPOCHS_PER_GRAPH,
               wave_for(p->n), BLOCK_SIZE);
        return;
    }
    const PersistentArgs *a = &r.persistent;
    int64_t held = a->chunk < a->on_chip ? a->chunk : a->on_chip;
    printf("1 cooperative launch of %d blocks x %d threads, %lld points a block, ", a->blocks, PERSISTENT_THREADS,
           (long long)a->chunk);
    if (held == 0) printf("all read every epoch\n");
    else printf("up to %lld on chip (x: %.1f KB of shared memory, y: %d registers a thread)\n", (long long)held,
                held * sizeof(float) / 1024.0, (int)(held / PERSISTENT_THREADS));
}

int main(int argc, char **argv) {
    LadderSize sizes[] = {{"--n", 1, MAX_N, DEFAULT_N, 0}, {"--epochs", 1, 100000, DEFAULT_EPOCHS, 0}};
    LadderOptions options;
    ladder_parse_args(argc, argv,
                      "usage: %s [--n N] [--epochs E] [--version V|NAME|all] [--repeat R] [--csv FILE]\n"
                      "  E epochs of the regression trainer's full-batch gradient descent over N points, version by"
                      " version,\n"
                      "  each checked against the CPU; version 0, graphs (stage 07's two kernels an epoch, 10 epochs"
                      " a CUDA graph),\n"
                      "  is the baseline line.\n"
                      "  --n N        points, 1 .. 250000000 (default 4000000, the trainer's training set)\n"
                      "  --epochs E   epochs a run, 1 .. 100000 (default 200, the trainer's)\n",
                      sizes, 2, VERSION_COUNT - 1, row_name, 1, &options);
    DeviceInfo device;
    ladder_require_gpu(argv[0], &device);
    Problem p = {};
    p.n = sizes[0].value;
    p.epochs = (int)sizes[1].value;
    p.repeats = options.repeats;
    device_check_memory(8.0 * (double)p.n, "the points", "use a smaller --n");
    RegressionSet set;
    char err[256];
    if (regression_ladder_generate(p.n, &set, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        exit(EXIT_HOST_MEMORY);
    }
    p.x = set.x;
    p.y = set.y;
    float *expected_losses = (float *)host_malloc(sizeof(float) * (size_t)regression_ladder_logged(p.epochs),
                                                  "the CPU's losses");
    regression_ladder_reference(p.x, p.y, p.n, p.epochs, p.expected_params, expected_losses);
    p.expected_losses = expected_losses;

    LadderTable table = {};
    table.stage = "08";
    table.ladder = "regression";
    snprintf(table.shape, sizeof(table.shape), "%lld points, %d epochs", (long long)p.n, p.epochs);
    table.unit = "GB/s";
    table.work = 8.0 * (double)p.n;  // an epoch's reads of x and y
    table.ceiling = VERSION_NAMES[GRAPHS];
    table.baseline = 1;  // a row to beat, not a bound
    table.repeats = options.repeats;
    table.device = &device;
    table.csv_path = options.csv_path;
    printf("GPU: %s (cc %s, CUDA %s, driver %s); a run restores the initial w, b first (untimed)\n", device.name,
           device.cc, device.cuda, device.driver);
    printf("\nregression, %lld points (x and y: %.1f MB), %d epochs of full-batch gradient descent from w = %g, "
           "b = %g, lr %g; ms per epoch = run / %d\n",
           (long long)p.n, table.work / 1e6, p.epochs, REGRESSION_W_INIT, REGRESSION_B_INIT, LR, p.epochs);
    char why[192];
    if (!check_and_time(&p, GRAPHS, &table.ceiling_time, why, sizeof(why))) {
        fprintf(stderr, "error: the graphs baseline cannot run: %s\n", why);
        exit(EXIT_CUDA);
    }
    for (int v = 0; v < VERSION_COUNT; v++) print_launch(v, &p);
    ladder_table_begin(&table);
    for (int v = options.first + 1; v < options.last + 1; v++) {
        LadderStats time;
        if (check_and_time(&p, v, &time, why, sizeof(why))) ladder_table_row(&table, v, VERSION_NAMES[v], time, NAN);
        else ladder_table_skip(&table, v, VERSION_NAMES[v], why);
    }
    free(expected_losses);
    regression_free(&set);
    return EXIT_OK;
}
#endif
