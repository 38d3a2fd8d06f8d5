// common/message.h: the one-line error messages of the library functions in common/ (docs/DESIGN.md,
// "Error lines").
#ifndef MESSAGE_H
#define MESSAGE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// printf into err (at most err_len bytes). A control character quoted from a flag or a path (a newline,
// a tab, an escape sequence) is shown as '?', so that the message is always exactly one line.
void error_message(char *err, size_t err_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
