// tests/fuzz/fuzz_args.c: libFuzzer harness for the drivers' flag parser (common/args.c).
//
//     make fuzz FUZZ_SECONDS=60        (builds with clang -fsanitize=fuzzer,address,undefined and runs)
//
// The input is a command line: words separated by NUL bytes (the corpus files in corpus_args/ are
// written that way), at most 64 of them. Each command line is parsed for both trainers, with a full
// error buffer and with a short one (the first byte picks its size), and then handed to args_pick the
// way the drivers check --variant and --precision.
//
// Besides the sanitizers' findings, the harness traps when parse_args breaks its contract (args.h):
// it returns 1 (help), 0 with every value inside its documented range, or -1 with exactly one line
// in err, free of control characters.
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

#define MAX_WORDS 64

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (!freopen("/dev/null", "w", stdout)) abort();  // --help prints the usage
    return 0;
}

static void check_message(const char *err, size_t err_len) {
    size_t len = strlen(err);
    if (len >= err_len) __builtin_trap();
    if (err_len >= 2 && len == 0) __builtin_trap();
    for (const char *c = err; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) __builtin_trap();
}

static void check_options(const Options *opt, TrainerKind trainer) {
    if (opt->trainer != trainer) __builtin_trap();
    if (opt->epochs < 1 || opt->epochs > 100000) __builtin_trap();
    if (!isfinite(opt->lr) || !(opt->lr > 0.0f) || opt->lr > 100.0f) __builtin_trap();
    if (opt->warmup < 0 || opt->warmup > 100 || opt->repeat < 1 || opt->repeat > 1000) __builtin_trap();
    if (trainer == TRAINER_REGRESSION) {
        if (opt->points < 10 || opt->points > 2000000000) __builtin_trap();
    } else {
        if (opt->batch < 1 || opt->batch > 60000) __builtin_trap();
        if (opt->n_hidden < 0 || opt->n_hidden > MNIST_MAX_LAYERS - 1) __builtin_trap();
        for (int l = 0; l < opt->n_hidden; l++)
            if (opt->hidden[l] < 1 || opt->hidden[l] > 65536) __builtin_trap();
        if (!opt->data_dir || !opt->data_dir[0] || !opt->precision || !opt->precision[0]) __builtin_trap();
    }
    const char *const strings[] = {opt->csv_path, opt->curve_path, opt->export_dir, opt->variant};
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++)
        if (strings[i] && !strings[i][0]) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t short_len = data[0] % 48;  // 0 .. 47 bytes: the truncated-message paths
    data++;
    size--;

    // NUL-separated words; the copy gets a final NUL so that the last word ends too
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[MAX_WORDS + 2] = {"prog"};
    int argc = 1;
    for (size_t at = 0; at <= size && argc <= MAX_WORDS; at += strlen(text + at) + 1) argv[argc++] = text + at;
    if (size == 0) argc = 1;
    argv[argc] = NULL;

    static const char *const variants[] = {"baseline", "tile16", "tile32", NULL};
    static const char *const precisions[] = {"fp32", "bf16", NULL};
    char err[1024], small[48];
    for (int t = 0; t < 2; t++) {
        TrainerKind trainer = t ? TRAINER_MNIST : TRAINER_REGRESSION;
        Options opt;
        int status = parse_args(argc, argv, trainer, &opt, err, sizeof(err));
        if (status == -1) {
            check_message(err, sizeof(err));
        } else if (status == 0) {
            check_options(&opt, trainer);
            int v = args_pick("--variant", opt.variant, variants, "stage 00 fuzz", err, sizeof(err));
            if (v < -1 || v > 2) __builtin_trap();
            if (v == -1) check_message(err, sizeof(err));
            if (trainer == TRAINER_MNIST) {
                int p = args_pick("--precision", opt.precision, precisions, "stage 00 fuzz", err, sizeof(err));
                if (p < -1 || p > 1) __builtin_trap();
                if (p == -1) check_message(err, sizeof(err));
            }
        } else if (status != 1) {
            __builtin_trap();
        }

        // the same command line with a short (or no) error buffer: same verdict, message cut, not overrun
        memset(small, 'x', sizeof(small));
        int again = parse_args(argc, argv, trainer, &opt, short_len ? small : NULL, short_len);
        if (again != status) __builtin_trap();
        if (short_len && status == -1) check_message(small, short_len);
    }
    free(text);
    return 0;
}
