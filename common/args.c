// common/args.c: the flags of build/NN/regression and build/NN/mnist (see args.h; common/flags.c reads the
// command line). Each message names the flag, the value and what would have been valid. Tested by
// tests/test_args.c.
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "exit_codes.h"
#include "flags.h"
#include "message.h"
#include "reference.h"
#include "report.h"

// ----------------------------------------------------------------------------
// the flag table: which trainer takes which flag (its val), in the order messages list them

enum { FOR_BOTH, FOR_REGRESSION, FOR_MNIST };

enum {
    F_POINTS, F_EPOCHS, F_LR, F_BATCH, F_HIDDEN, F_SEED, F_DATA, F_PRECISION, F_VARIANT, F_CSV, F_CURVE, F_EXPORT,
    F_WARMUP, F_REPEAT, F_BREAKDOWN, F_REFERENCE, F_QUIET, F_LIST_VARIANTS, F_HELP, FLAG_COUNT
};

#define VALUE(name, trainer) {name, required_argument, NULL, trainer}
#define SWITCH(name) {name, no_argument, NULL, FOR_BOTH}
static const struct option FLAGS[FLAG_COUNT + 1] = {
    [F_POINTS] = VALUE("points", FOR_REGRESSION), [F_EPOCHS] = VALUE("epochs", FOR_BOTH),
    [F_LR] = VALUE("lr", FOR_BOTH), [F_BATCH] = VALUE("batch", FOR_MNIST), [F_HIDDEN] = VALUE("hidden", FOR_MNIST),
    [F_SEED] = VALUE("seed", FOR_BOTH), [F_DATA] = VALUE("data", FOR_MNIST),
    [F_PRECISION] = VALUE("precision", FOR_MNIST), [F_VARIANT] = VALUE("variant", FOR_BOTH),
    [F_CSV] = VALUE("csv", FOR_BOTH), [F_CURVE] = VALUE("curve", FOR_BOTH), [F_EXPORT] = VALUE("export", FOR_BOTH),
    [F_WARMUP] = VALUE("warmup", FOR_BOTH), [F_REPEAT] = VALUE("repeat", FOR_BOTH),
    [F_BREAKDOWN] = SWITCH("breakdown"), [F_REFERENCE] = SWITCH("reference"), [F_QUIET] = SWITCH("quiet"),
    [F_LIST_VARIANTS] = SWITCH("list-variants"), [F_HELP] = SWITCH("help"),  // help: also -h
};

static int flag_applies(int flag, TrainerKind trainer) {
    int owner = FLAGS[flag].val;
    return owner == FOR_BOTH || owner == (trainer == TRAINER_REGRESSION ? FOR_REGRESSION : FOR_MNIST);
}

static const char *trainer_name(TrainerKind trainer) { return trainer == TRAINER_REGRESSION ? "regression" : "mnist"; }

// Adds prefix and name to the list in out, after sep unless it is the first (cut short where out is full).
static void list_add(char *out, size_t len, const char *sep, const char *prefix, const char *name) {
    size_t used = strlen(out);
    snprintf(out + used, len - used, "%s%s%s", used ? sep : "", prefix, name);
}

// ----------------------------------------------------------------------------
// values

// A whole number: plain digits ("5000000", "-3") or, for large counts, a float literal with an
// integral value ("5e6", "1e8"). Anything else (empty, "12abc", "1.5", " 7", "0x10", "1e-400") is not
// one (-1); a whole number beyond what 64 bits hold ("1e30", "99999999999999999999") is one, but out
// of every range (1, with *out saturated), so that its message says "out of range".
static int parse_whole(const char *text, int64_t *out) {
    if (text[0] == '\0' || strspn(text, "0123456789+-.eE") != strlen(text)) return -1;
    char *end = NULL;
    errno = 0;
    long long whole = strtoll(text, &end, 10);
    if (*end == '\0') {
        *out = whole;  // saturated at LLONG_MIN / LLONG_MAX on overflow
        return errno == ERANGE ? 1 : 0;
    }
    errno = 0;
    double real = strtod(text, &end);
    if (*end != '\0' || isnan(real)) return -1;
    if (errno == ERANGE && fabs(real) < 1.0) return -1;  // underflow: "1e-400" is no whole number
    if (isinf(real) || fabs(real) > 9e18) {
        *out = real > 0 ? INT64_MAX : INT64_MIN;
        return 1;
    }
    if (real != floor(real)) return -1;
    *out = (int64_t)real;
    return 0;
}

static int parse_ranged(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out, char *err,
                        size_t err_len) {
    int64_t value = 0;
    int whole = parse_whole(text, &value);
    if (whole < 0) {
        error_message(err, err_len, "--%s '%s' is not a whole number (valid: %lld .. %lld)", flag, text, (long long)lo,
                (long long)hi);
        return -1;
    }
    if (whole > 0 || value < lo || value > hi) {
        error_message(err, err_len, "--%s %s is out of range (valid: %lld .. %lld)", flag, text, (long long)lo, (long long)hi);
        return -1;
    }
    *out = value;
    return 0;
}

static int parse_int(const char *flag, const char *text, int lo, int hi, int *out, char *err, size_t err_len) {
    int64_t value;
    if (parse_ranged(flag, text, lo, hi, &value, err, err_len) != 0) return -1;
    *out = (int)value;
    return 0;
}

// A decimal number and nothing else (no leading space either): 0 with *out set, else -1.
static int parse_real(const char *text, double *out) {
    char *end = NULL;
    *out = strtod(text, &end);  // over- and underflow land out of range in the callers
    return text[0] == '\0' || isspace((unsigned char)text[0]) || *end != '\0' ? -1 : 0;
}

static int parse_lr(const char *text, float *out, char *err, size_t err_len) {
    double value;
    if (parse_real(text, &value) != 0) {
        error_message(err, err_len, "--lr '%s' is not a number (valid: > 0 and <= 100, e.g. 0.01)", text);
        return -1;
    }
    if (!isfinite(value) || value <= 0.0 || value > 100.0 || (float)value <= 0.0f) {
        error_message(err, err_len, "--lr %s is out of range (valid: finite, > 0 and <= 100)", text);
        return -1;
    }
    *out = (float)value;
    return 0;
}

// "0" (no hidden layer) or 1..MNIST_MAX_LAYERS-1 comma-separated sizes, each 1..65536.
static int parse_hidden(const char *text, Options *opt, char *err, size_t err_len) {
    const int max_layers = MNIST_MAX_LAYERS - 1;
    opt->n_hidden = 0;
    if (strcmp(text, "0") == 0) return 0;
    for (const char *c = text;; c++) {
        size_t digits = strspn(c, "0123456789");
        if (digits == 0) break;
        long size = strtol(c, NULL, 10);  // saturates past LONG_MAX: out of range too
        if (size < 1 || size > 65536) {
            error_message(err, err_len, "--hidden '%s': each layer size must be 1 .. 65536 (use --hidden 0 for no hidden layer)",
                    text);
            return -1;
        }
        if (opt->n_hidden == max_layers) {
            error_message(err, err_len, "--hidden '%s' has more than %d layers (valid: 0, or 1 .. %d comma-separated sizes)",
                    text, max_layers, max_layers);
            return -1;
        }
        opt->hidden[opt->n_hidden++] = (int)size;
        c += digits;
        if (*c == '\0') return 0;
        if (*c != ',') break;
    }
    error_message(err, err_len, "--hidden '%s' is not a layer list (valid: 0, or 1 .. %d comma-separated sizes 1 .. 65536, e.g. 128 or 1024,1024)",
            text, max_layers);
    return -1;
}

// ----------------------------------------------------------------------------
// one flag with its value

static int apply_flag(int flag, const char *value, Options *opt, char *err, size_t err_len) {
    const char *name = FLAGS[flag].name;
    int *set[FLAG_COUNT] = {[F_BREAKDOWN] = &opt->breakdown, [F_REFERENCE] = &opt->reference, [F_QUIET] = &opt->quiet,
                            [F_LIST_VARIANTS] = &opt->list_variants};
    const char **text[FLAG_COUNT] = {[F_DATA] = &opt->data_dir, [F_CSV] = &opt->csv_path, [F_CURVE] = &opt->curve_path,
                                     [F_EXPORT] = &opt->export_dir, [F_VARIANT] = &opt->variant,
                                     [F_PRECISION] = &opt->precision};
    switch (flag) {
    case F_POINTS: return parse_ranged(name, value, 10, 2000000000, &opt->points, err, err_len);
    case F_EPOCHS: return parse_int(name, value, 1, 100000, &opt->epochs, err, err_len);
    case F_LR: return parse_lr(value, &opt->lr, err, err_len);
    case F_BATCH: return parse_int(name, value, 1, 60000, &opt->batch, err, err_len);
    case F_HIDDEN: return parse_hidden(value, opt, err, err_len);
    case F_SEED:
        if (flags_digits(value, &opt->seed) == 0) return 0;
        error_message(err, err_len, "--seed '%s' is not a whole number (valid: 0 .. 18446744073709551615)", value);
        return -1;
    case F_WARMUP: return parse_int(name, value, 0, 100, &opt->warmup, err, err_len);
    case F_REPEAT: return parse_int(name, value, 1, 1000, &opt->repeat, err, err_len);
    }
    if (set[flag]) {
        *set[flag] = 1;
        return 0;
    }
    // the rest take a name or a path: only an empty one is wrong here
    if (value[0] == '\0') {
        error_message(err, err_len, "--%s needs a non-empty value", name);
        return -1;
    }
    *text[flag] = value;
    return 0;
}

static void set_defaults(TrainerKind trainer, Options *opt) {
    if (trainer == TRAINER_REGRESSION)
        *opt = (Options){.points = 5000000, .epochs = 200, .lr = 0.01f, .batch = -1};
    else
        *opt = (Options){.points = -1, .epochs = 10, .lr = 0.1f, .batch = 128, .hidden = {128}, .n_hidden = 1,
                         .data_dir = "data/mnist", .precision = "fp32"};
    opt->trainer = trainer;
    opt->seed = 42;
    opt->warmup = 1;
    opt->repeat = 1;
}

// ----------------------------------------------------------------------------
// the parser

// One line in err for an argument the scan could not take or a flag of the other trainer (-1), else 0.
// A value read from the next argument may not be another --flag: "--csv --quiet" misses its value.
static int reject(const FlagScan *scan, int status, TrainerKind trainer, char *err, size_t err_len) {
    const char *word = scan->word, *name = scan->flag >= 0 ? FLAGS[scan->flag].name : "";
    char valid[512] = "";
    for (int i = 0; i < FLAG_COUNT; i++)
        if (flag_applies(i, trainer)) list_add(valid, sizeof(valid), " ", "--", FLAGS[i].name);
    if (status == FLAG_STRAY)
        error_message(err, err_len, "unexpected argument '%s': every option is a --flag (see --help)", word);
    else if (status == FLAG_UNKNOWN)
        error_message(err, err_len, "unknown flag '%.*s'; %s takes: %s", (int)strcspn(word, "="), word,
                      trainer_name(trainer), valid);
    else if (!flag_applies(scan->flag, trainer))
        error_message(err, err_len, "--%s is %s flag; %s takes: %s", name,
                      FLAGS[scan->flag].val == FOR_MNIST ? "an MNIST" : "a regression", trainer_name(trainer), valid);
    else if (status == FLAG_UNWANTED)
        error_message(err, err_len, "--%s takes no value (got '%s')", name, word);
    else if (status == FLAG_MISSING || (scan->value && !strchr(word, '=') && strncmp(scan->value, "--", 2) == 0))
        error_message(err, err_len, "--%s needs a value (--%s VALUE or --%s=VALUE; see --help)", name, name, name);
    else
        return 0;
    return -1;
}

int parse_args(int argc, char **argv, TrainerKind trainer, Options *opt, char *err, size_t err_len) {
    set_defaults(trainer, opt);
    if (err && err_len) err[0] = '\0';
    FlagScan scan = {.argc = argc, .argv = argv, .options = FLAGS};
    for (int status; (status = flags_next(&scan)) != FLAG_END;) {
        if (reject(&scan, status, trainer, err, err_len) != 0) return -1;
        if (scan.flag == F_HELP) {
            print_usage(trainer, argv[0], stdout);
            return 1;
        }
        if (apply_flag(scan.flag, scan.value, opt, err, err_len) != 0) return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------
// names checked by the driver: --variant and --precision against what the stage offers

int args_pick(const char *flag, const char *value, const char *const *names, const char *context, char *err,
              size_t err_len) {
    if (!value) return 0;
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], value) == 0) return i;
    char valid[256] = "";
    for (int i = 0; names[i]; i++) list_add(valid, sizeof(valid), ", ", "", names[i]);
    error_message(err, err_len, "%s '%s' is not available in %s; valid: %s", flag, value, context, valid);
    return -1;
}

// ----------------------------------------------------------------------------
// --help

void print_usage(TrainerKind trainer, const char *program, FILE *out) {
    if (trainer == TRAINER_REGRESSION) {
        fprintf(out,
                "usage: %s [flags]\n"
                "Trains y = w x + b on synthetic points (y = 0.7 x + 0.3 + noise) by full-batch gradient descent.\n"
                "\n"
                "  --points N       points in the set, 80%% train / 20%% test (default 5000000; 10 .. 2e9; 5e6 works)\n"
                "  --epochs N       full-batch epochs (default 200; 1 .. 100000)\n"
                "  --lr X           learning rate (default 0.01; > 0 and <= 100)\n"
                "  --seed N         seed of the noise (default 42)\n",
                program);
    } else {
        fprintf(out,
                "usage: %s [flags]\n"
                "Trains an MLP (784 -> hidden ReLU layers -> 10, softmax cross-entropy) on MNIST by minibatch SGD.\n"
                "\n"
                "  --hidden LIST    hidden layer sizes: 0 (softmax regression), 128 (default) or 1024,1024 (at most 8, each 1 .. 65536)\n"
                "  --batch N        minibatch size (default 128; 1 .. 60000)\n"
                "  --epochs N       epochs (default 10; 1 .. 100000)\n"
                "  --lr X           learning rate (default 0.1; > 0 and <= 100)\n"
                "  --seed N         seed of the initial weights and the batch order (default 42)\n"
                "  --data DIR       IDX files (default data/mnist; `make data` fetches them; Fashion-MNIST works too)\n"
                "  --precision P    GEMM precision: fp32 (default), tf32 or bf16, where the stage offers it\n",
                program);
    }
    fprintf(out,
            "  --variant NAME   one of the stage's variants (default: the stage's own; an unknown name lists them)\n"
            "  --warmup N       untimed 1-epoch runs before the timed ones (default 1; 0 .. 100; GPU only)\n"
            "  --repeat N       timed runs; the report gives the medians (default 1; 1 .. 1000)\n"
            "  --breakdown      time each phase (h2d, forward, loss, ...); adds synchronizations\n"
            "  --reference      train with the CPU reference (double precision) instead of the GPU; it prints its\n"
            "                   progress on stderr every 10 s (CUDA_STAGES_PROGRESS_SECONDS) unless --quiet\n"
            "  --csv FILE       append the result row to FILE (header written when the file is new; a file with\n"
            "                   another header is refused; checked before training, written whole or not at all)\n"
            "  --curve FILE     append the loss curve to FILE as long-format CSV, for plots (the same rules)\n"
            "  --export DIR     write the data set, initial parameters and config the PyTorch baselines read, then exit\n"
            "  --quiet          print only the result line\n"
            "  --list-variants  print the stage's variants (and MNIST precisions), the default first, then exit\n"
            "  --help, -h       this text\n"
            "\n"
            "Both --flag value and --flag=value work. Exit codes: 0 ok, 2 bad flag or unwritable output, 3 bad data,\n"
            "4 CUDA, 5 diverged (a loss NaN, Inf, or past 1e6 times its first value).\n");
}

// ----------------------------------------------------------------------------
// CUDA_STAGES_PROGRESS_SECONDS: how often a --reference run prints its progress

int args_progress_seconds(double *out, char *err, size_t err_len) {
    *out = 10.0;
    const char *text = getenv("CUDA_STAGES_PROGRESS_SECONDS");
    if (!text || !text[0]) return 0;
    double value;
    if (parse_real(text, &value) != 0 || !(value >= 0.0 && value <= 86400.0)) {
        error_message(err, err_len, "CUDA_STAGES_PROGRESS_SECONDS='%.32s' is not a number of seconds (valid: 0 .. 86400)",
                      text);
        return -1;
    }
    *out = value;
    return 0;
}


int args_driver_flags(int argc, char **argv, TrainerKind trainer, const char *stage, const char *const *variants,
                      const char *const *precisions, Options *opt, int *variant, Precision *precision) {
    char err[1024], context[64];
    int parsed = parse_args(argc, argv, trainer, opt, err, sizeof(err));
    if (parsed == 1) return report_exit_status(EXIT_OK);
    if (parsed == 0 && opt->list_variants) {
        for (int v = 0; variants[v]; v++) printf("variant %s\n", variants[v]);
        for (int p = 0; precisions && precisions[p]; p++) printf("precision %s\n", precisions[p]);
        return report_exit_status(EXIT_OK);
    }
    // the CPU reference has one version: the stage's default, in fp32 inputs (computed in double)
    const char *const default_only[] = {variants[0], NULL}, *const fp32_only[] = {PRECISION_NAMES[PRECISION_FP32], NULL};
    snprintf(context, sizeof(context), opt->reference ? "the CPU reference (--reference)" : "stage %s %s", stage,
             trainer_name(trainer));
    if (parsed == 0)
        parsed = *variant = args_pick("--variant", opt->variant, opt->reference ? default_only : variants, context, err,
                                      sizeof(err));
    if (parsed >= 0 && precisions)
        parsed = args_pick("--precision", opt->precision, opt->reference ? fp32_only : precisions, context, err,
                           sizeof(err));
    double progress_seconds;
    if (parsed >= 0) parsed = args_progress_seconds(&progress_seconds, err, sizeof(err));
    // before any work: a run must not end in an unwritable --csv or a mixed schema
    if (parsed >= 0 && !opt->export_dir)
        parsed = report_check_outputs(opt->csv_path, opt->curve_path, err, sizeof(err));
    if (parsed < 0) {
        fprintf(stderr, "error: %s\n", err);
        return EXIT_USAGE;
    }
    if (opt->reference && !opt->quiet) reference_set_progress(stderr, progress_seconds);
    *precision = PRECISION_FP32;
    for (int p = 0; opt->precision && p < PRECISION_COUNT; p++)
        if (strcmp(PRECISION_NAMES[p], opt->precision) == 0) *precision = (Precision)p;
    return -1;
}
