// common/message.c: error_message(), see message.h.
#include <stdarg.h>
#include <stdio.h>

#include "message.h"

void error_message(char *err, size_t err_len, const char *fmt, ...) {
    if (!err || err_len == 0) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, err_len, fmt, args);
    va_end(args);
    for (char *c = err; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}
