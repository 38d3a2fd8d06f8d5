// common/flags.h: the command-line scanner of the drivers (common/args.c), the kernel ladders
// (common/ladder.c) and stage 01's vector_add, on getopt_long, and the number parsing they need. Each
// caller words its own messages.
#ifndef FLAGS_H
#define FLAGS_H

#include <getopt.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// What flags_next found in the next argument.
enum {
    FLAG_OK,        // options[flag], with its value (NULL for a switch)
    FLAG_END,       // every argument read
    FLAG_STRAY,     // a word that is no --flag (nor -h)
    FLAG_UNKNOWN,   // --NAME[=...] with no such name: exact names only, never getopt_long's abbreviations
    FLAG_MISSING,   // options[flag] takes a value but is the last argument
    FLAG_UNWANTED,  // --NAME=VALUE for an options[flag] that takes none
};

// Start with {.argc, .argv, .options}: a getopt_long table (name without "--", has_arg no_argument or
// required_argument, flag NULL, val the caller's own but ':' or '?'), ended by a zeroed entry; the
// name "help" also answers to -h. The rest is flags_next's.
typedef struct {
    int argc;
    char **argv;
    const struct option *options;
    const char *word;   // the argument looked at, for messages
    int flag;           // its index in options; -1 for FLAG_STRAY and FLAG_UNKNOWN
    const char *value;  // FLAG_OK: what follows '=', else the next argument, whatever it holds
} FlagScan;

// The next argument, in order: a stray word is reported where it stands, never permuted.
int flags_next(FlagScan *scan);

// Decimal digits and nothing else ("", "+5", "-5", " 5", "1e6" are not): 0 with *out set, 1 when it is
// past 64 bits, -1 otherwise.
int flags_digits(const char *text, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif
