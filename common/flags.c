// common/flags.c: see flags.h. Built into build/common/libcommon.a; tested through tests/test_args.c and
// tests/test_ladder.c.
//
// getopt_long splits --name=value, takes a value from the next argument and tells a missing value from
// an unwanted one. The scan around it keeps the programs' contract where getopt_long alone would not: it
// looks each name up exactly first (getopt_long takes "--epo" for --epochs), and it hands getopt_long no
// word but "--NAME..." and "-h", so that getopt_long never permutes, never reads a cluster of short
// options ("-hx") and never stops at "--".
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"

// The index of the flag a word names exactly ("--NAME" or "--NAME=...", "-h" for help), else -1.
static int lookup(const struct option *options, const char *word) {
    if (strcmp(word, "-h") == 0) word = "--help";
    if (strncmp(word, "--", 2) != 0) return -1;
    size_t len = strcspn(word + 2, "=");
    for (int i = 0; options[i].name; i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, word + 2, len) == 0) return i;
    return -1;
}

int flags_next(FlagScan *scan) {
    if (!scan->word) {  // the first call: restart getopt_long (the tests parse many command lines in one process)
        opterr = 0;     // the callers word every message
        optind = 0;     // glibc: a full restart, which then reads from argv[1]
    }
    int at = optind > 0 ? optind : 1;
    scan->value = NULL;
    if (at >= scan->argc) return FLAG_END;
    scan->word = scan->argv[at];
    scan->flag = lookup(scan->options, scan->word);
    if (scan->flag < 0) return strncmp(scan->word, "--", 2) == 0 ? FLAG_UNKNOWN : FLAG_STRAY;
    // "+": stop rather than permute; ":": a missing value returns ':', an unwanted one '?'
    int got = getopt_long(scan->argc, scan->argv, "+:h", scan->options, NULL);
    if (got == ':') return FLAG_MISSING;
    if (got == '?') return FLAG_UNWANTED;
    scan->value = scan->options[scan->flag].has_arg ? optarg : NULL;
    return FLAG_OK;
}

int flags_digits(const char *text, uint64_t *out) {
    if (text[0] == '\0' || strspn(text, "0123456789") != strlen(text)) return -1;
    errno = 0;
    unsigned long long value = strtoull(text, NULL, 10);
    if (errno == ERANGE) return 1;
    *out = value;
    return 0;
}
