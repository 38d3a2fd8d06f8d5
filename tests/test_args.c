// tests/test_args.c: Criterion suite "args": the drivers' flags (common/args.c): defaults, every
// valid flag in both spellings, and one clear line for every kind of mistake.
//
//     make test          (part of build/tests/test_cpu), or alone:
//     gcc -std=c11 -D_POSIX_C_SOURCE=200809L -Icommon -I/usr/local/cuda/include tests/test_args.c
//         common/args.c -lcriterion -lm -o /tmp/targs && /tmp/targs
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

static Options opt;
static char err[1024];

// parse_args over a NULL-terminated list of arguments (the program name is added).
static int parse_list(TrainerKind trainer, const char *const *args) {
    char *argv[64] = {"prog"};
    int argc = 1;
    while (args[argc - 1]) {
        argv[argc] = (char *)args[argc - 1];
        argc++;
    }
    memset(err, 0, sizeof(err));
    return parse_args(argc, argv, trainer, &opt, err, sizeof(err));
}
#define REGRESSION(...) parse_list(TRAINER_REGRESSION, (const char *const[]){__VA_ARGS__, NULL})
#define MNIST(...) parse_list(TRAINER_MNIST, (const char *const[]){__VA_ARGS__, NULL})

// A rejection: -1 and exactly one non-empty line that contains each of the given fragments.
static void expect_rejected(int status, const char *fragment, const char *also) {
    cr_assert_eq(status, -1, "expected a rejection, got %d", status);
    cr_assert_gt(strlen(err), 0, "no message");
    cr_assert_null(strchr(err, '\n'), "message is not one line: %s", err);
    cr_assert_not_null(strstr(err, fragment), "message lacks '%s': %s", fragment, err);
    if (also) cr_assert_not_null(strstr(err, also), "message lacks '%s': %s", also, err);
}

// ----------------------------------------------------------------------------
// defaults

Test(args, regression_defaults) {
    cr_assert_eq(parse_list(TRAINER_REGRESSION, (const char *const[]){NULL}), 0);
    cr_assert_eq(opt.trainer, TRAINER_REGRESSION);
    cr_assert_eq(opt.points, 5000000);
    cr_assert_eq(opt.epochs, 200);
    cr_assert_eq(opt.lr, 0.01f);
    cr_assert_eq(opt.seed, 42);
    cr_assert_eq(opt.warmup, 1);
    cr_assert_eq(opt.repeat, 1);
    cr_assert_null(opt.variant);
    cr_assert_null(opt.csv_path);
    cr_assert_null(opt.curve_path);
    cr_assert_null(opt.export_dir);
    cr_assert(!opt.breakdown && !opt.reference && !opt.quiet);
}

Test(args, mnist_defaults) {
    cr_assert_eq(parse_list(TRAINER_MNIST, (const char *const[]){NULL}), 0);
    cr_assert_eq(opt.trainer, TRAINER_MNIST);
    cr_assert_eq(opt.epochs, 10);
    cr_assert_eq(opt.lr, 0.1f);
    cr_assert_eq(opt.batch, 128);
    cr_assert_eq(opt.n_hidden, 1);
    cr_assert_eq(opt.hidden[0], 128);
    cr_assert_eq(opt.seed, 42);
    cr_assert_str_eq(opt.data_dir, "data/mnist");
    cr_assert_str_eq(opt.precision, "fp32");
    cr_assert_eq(opt.warmup, 1);
    cr_assert_eq(opt.repeat, 1);
}

// ----------------------------------------------------------------------------
// valid flags

Test(args, regression_flags) {
    cr_assert_eq(REGRESSION("--points", "1000", "--epochs=3", "--lr", "0.5", "--seed", "18446744073709551615",
                            "--csv", "r.csv", "--curve=c.csv", "--export", "out", "--variant", "atomic", "--breakdown",
                            "--reference", "--quiet", "--warmup", "0", "--repeat=7"),
                 0, "%s", err);
    cr_assert_eq(opt.points, 1000);
    cr_assert_eq(opt.epochs, 3);
    cr_assert_eq(opt.lr, 0.5f);
    cr_assert_eq(opt.seed, UINT64_MAX);
    cr_assert_str_eq(opt.csv_path, "r.csv");
    cr_assert_str_eq(opt.curve_path, "c.csv");
    cr_assert_str_eq(opt.export_dir, "out");
    cr_assert_str_eq(opt.variant, "atomic");
    cr_assert(opt.breakdown && opt.reference && opt.quiet);
    cr_assert_eq(opt.warmup, 0);
    cr_assert_eq(opt.repeat, 7);
}

Test(args, points_in_scientific_notation) {
    cr_assert_eq(REGRESSION("--points", "5e6"), 0, "%s", err);
    cr_assert_eq(opt.points, 5000000);
    cr_assert_eq(REGRESSION("--points=1e8"), 0, "%s", err);
    cr_assert_eq(opt.points, 100000000);
    cr_assert_eq(REGRESSION("--points", "5000000"), 0, "%s", err);
    cr_assert_eq(opt.points, 5000000);
    cr_assert_eq(REGRESSION("--points", "2e9"), 0, "%s", err);
    cr_assert_eq(opt.points, 2000000000);
}

Test(args, mnist_flags) {
    cr_assert_eq(MNIST("--batch", "64", "--hidden", "1024,1024", "--data", "data/fashion", "--precision=bf16",
                       "--epochs", "2", "--lr=0.05", "--seed", "7"),
                 0, "%s", err);
    cr_assert_eq(opt.batch, 64);
    cr_assert_eq(opt.n_hidden, 2);
    cr_assert_eq(opt.hidden[0], 1024);
    cr_assert_eq(opt.hidden[1], 1024);
    cr_assert_str_eq(opt.data_dir, "data/fashion");
    cr_assert_str_eq(opt.precision, "bf16");
    cr_assert_eq(opt.epochs, 2);
    cr_assert_eq(opt.lr, 0.05f);
    cr_assert_eq(opt.seed, 7);
}

Test(args, hidden_zero_and_eight_layers) {
    cr_assert_eq(MNIST("--hidden", "0"), 0, "%s", err);
    cr_assert_eq(opt.n_hidden, 0);
    cr_assert_eq(MNIST("--hidden=1,2,3,4,5,6,7,65536"), 0, "%s", err);
    cr_assert_eq(opt.n_hidden, 8);
    cr_assert_eq(opt.hidden[0], 1);
    cr_assert_eq(opt.hidden[7], 65536);
}

Test(args, last_value_wins) {
    cr_assert_eq(MNIST("--epochs", "3", "--epochs", "4"), 0, "%s", err);
    cr_assert_eq(opt.epochs, 4);
}

// ----------------------------------------------------------------------------
// mistakes

Test(args, unknown_flag) {
    expect_rejected(REGRESSION("--frobnicate"), "--frobnicate", "--points");
    expect_rejected(MNIST("--frobnicate=3"), "--frobnicate", "--hidden");
    expect_rejected(MNIST("-x"), "-x", NULL);
    expect_rejected(MNIST("128"), "128", NULL);
}

Test(args, missing_value) {
    expect_rejected(REGRESSION("--epochs"), "--epochs", "value");
    expect_rejected(REGRESSION("--csv", "--quiet"), "--csv", "value");
    expect_rejected(MNIST("--hidden="), "--hidden", NULL);
    expect_rejected(MNIST("--data="), "--data", NULL);
}

Test(args, garbage_numbers) {
    expect_rejected(REGRESSION("--epochs", "12abc"), "--epochs", "12abc");
    expect_rejected(REGRESSION("--epochs", "1.5"), "--epochs", "1.5");
    expect_rejected(REGRESSION("--points", "0x10"), "--points", "0x10");
    expect_rejected(REGRESSION("--points", " 100"), "--points", NULL);
    expect_rejected(REGRESSION("--lr", "0.1x"), "--lr", "0.1x");
    expect_rejected(REGRESSION("--seed", "-1"), "--seed", "-1");
    expect_rejected(REGRESSION("--seed", "18446744073709551616"), "--seed", NULL);
    expect_rejected(MNIST("--batch", "many"), "--batch", "many");
}

Test(args, out_of_range) {
    expect_rejected(REGRESSION("--epochs", "-5"), "--epochs", "-5");
    expect_rejected(REGRESSION("--epochs", "0"), "--epochs", "1 .. 100000");
    expect_rejected(REGRESSION("--epochs", "100001"), "--epochs", "100001");
    expect_rejected(REGRESSION("--points", "9"), "--points", "10 .. 2000000000");
    expect_rejected(REGRESSION("--points", "3e9"), "--points", "3e9");
    expect_rejected(REGRESSION("--warmup", "101"), "--warmup", "0 .. 100");
    expect_rejected(REGRESSION("--repeat", "0"), "--repeat", "1 .. 1000");
    expect_rejected(MNIST("--batch", "0"), "--batch", "1 .. 60000");
    expect_rejected(MNIST("--batch", "60001"), "--batch", NULL);
}

Test(args, beyond_64_bits_is_out_of_range_not_garbage) {
    // whole numbers too large for any counter: "out of range", never "not a whole number"
    const char *huge[] = {"1e30", "-1e30", "1e400", "99999999999999999999", "-99999999999999999999", "9.5e18"};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        expect_rejected(REGRESSION("--epochs", huge[i]), "out of range", "1 .. 100000");
        expect_rejected(REGRESSION("--points", huge[i]), "out of range", huge[i]);
        expect_rejected(MNIST("--repeat", huge[i]), "out of range", NULL);
    }
    // and what is no whole number stays so
    expect_rejected(REGRESSION("--epochs", "1e-400"), "not a whole number", NULL);
    expect_rejected(REGRESSION("--epochs", "1.5e0"), "not a whole number", NULL);
    cr_assert_eq(REGRESSION("--points", "2e9"), 0, "%s", err);
    cr_assert_eq(opt.points, 2000000000);
}

Test(args, bad_learning_rates) {
    const char *bad[] = {"nan", "inf", "-inf", "0", "-0.1", "100.5", "1e-300"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) expect_rejected(REGRESSION("--lr", bad[i]), "--lr", bad[i]);
    cr_assert_eq(REGRESSION("--lr", "100"), 0, "%s", err);
}

Test(args, bad_hidden_lists) {
    const char *bad[] = {"0,5", "abc", "128,", ",128", "1,,2", "-5", "65537", "99999999999", "1,2,3,4,5,6,7,8,9"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) expect_rejected(MNIST("--hidden", bad[i]), "--hidden", bad[i]);
}

Test(args, flag_of_the_other_trainer) {
    expect_rejected(REGRESSION("--hidden", "128"), "--hidden is an MNIST flag; regression takes:", "--points");
    expect_rejected(REGRESSION("--batch=64"), "--batch is an MNIST flag", NULL);
    expect_rejected(REGRESSION("--precision", "tf32"), "--precision is an MNIST flag", NULL);
    expect_rejected(MNIST("--points", "1000"), "--points is a regression flag; mnist takes:", "--hidden");
}

Test(args, control_characters_never_break_the_line) {
    // whatever a user (or a script) passes, the message stays one printable line
    expect_rejected(REGRESSION("--a\nb"), "'--a?b'", "regression takes");
    expect_rejected(REGRESSION("--epochs", "1\n2"), "--epochs '1?2'", NULL);
    expect_rejected(MNIST("--hidden", "12\r,3"), "--hidden '12?,3'", NULL);
    expect_rejected(MNIST("stray\x1b[31m"), "'stray?[31m'", NULL);
    for (const char *c = err; *c; c++) cr_assert_geq((unsigned char)*c, 0x20, "control character in: %s", err);
}

Test(args, messages_fit_small_buffers) {
    // a short buffer gets the start of the message, NUL-terminated; no buffer gets nothing
    char small[12];
    char *argv[] = {"prog", "--epochs", "0", NULL};
    memset(small, 'x', sizeof(small));
    cr_assert_eq(parse_args(3, argv, TRAINER_REGRESSION, &opt, small, sizeof(small)), -1);
    cr_assert_str_eq(small, "--epochs 0 ");
    cr_assert_eq(parse_args(3, argv, TRAINER_REGRESSION, &opt, NULL, 0), -1);
}

Test(args, switch_with_value) { expect_rejected(REGRESSION("--quiet=1"), "--quiet", "no value"); }

// ----------------------------------------------------------------------------
// --help and the name check the drivers use

Test(args, help_returns_one, .init = cr_redirect_stdout) {
    cr_assert_eq(REGRESSION("--epochs", "3", "--help"), 1);
    cr_assert_eq(MNIST("-h"), 1);
}

Test(args, list_variants_flag) {
    cr_assert_eq(REGRESSION("--list-variants"), 0);
    cr_assert_eq(opt.list_variants, 1);
    cr_assert_eq(MNIST("--quiet"), 0);
    cr_assert_eq(opt.list_variants, 0);
    cr_assert_eq(MNIST("--list-variants=yes"), -1);
    cr_assert_not_null(strstr(err, "takes no value"));
}

Test(args, usage_per_trainer) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    print_usage(TRAINER_MNIST, "build/02/mnist", f);
    fclose(f);
    cr_assert_not_null(strstr(text, "build/02/mnist"));
    cr_assert_not_null(strstr(text, "--hidden"));
    cr_assert_not_null(strstr(text, "default 128"));
    cr_assert_null(strstr(text, "--points"));
    free(text);

    f = open_memstream(&text, &len);
    print_usage(TRAINER_REGRESSION, "build/02/regression", f);
    fclose(f);
    cr_assert_not_null(strstr(text, "--points"));
    cr_assert_not_null(strstr(text, "default 200"));
    cr_assert_null(strstr(text, "--hidden"));
    free(text);
}

Test(args, pick_names) {
    const char *const names[] = {"baseline", "atomic", NULL};
    cr_assert_eq(args_pick("--variant", NULL, names, "stage 02 regression", err, sizeof(err)), 0);
    cr_assert_eq(args_pick("--variant", "atomic", names, "stage 02 regression", err, sizeof(err)), 1);
    expect_rejected(args_pick("--variant", "fused", names, "stage 02 regression", err, sizeof(err)), "'fused'",
                    "baseline, atomic");
    cr_assert_not_null(strstr(err, "stage 02 regression"));
}

Test(args, progress_seconds_from_the_environment) {
    double seconds;
    unsetenv("CUDA_STAGES_PROGRESS_SECONDS");
    cr_assert_eq(args_progress_seconds(&seconds, err, sizeof(err)), 0);
    cr_assert_eq(seconds, 10.0);
    setenv("CUDA_STAGES_PROGRESS_SECONDS", "0.5", 1);
    cr_assert_eq(args_progress_seconds(&seconds, err, sizeof(err)), 0);
    cr_assert_eq(seconds, 0.5);
    const char *bad[] = {"soon", "-1", "1e9", "nan", " 5", "5\nerror: forged"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("CUDA_STAGES_PROGRESS_SECONDS", bad[i], 1);
        expect_rejected(args_progress_seconds(&seconds, err, sizeof(err)), "CUDA_STAGES_PROGRESS_SECONDS", "0 .. 86400");
    }
    unsetenv("CUDA_STAGES_PROGRESS_SECONDS");
}
