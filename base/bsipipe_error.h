/* bsipipe_error.h: error codes shared by every layer.
 *
 * Library functions return 0 (or a non-negative count) on success and a
 * negative errno-style code on failure (libuv style: -EINVAL, -ENOMEM, ...),
 * plus a few codes of our own below. When a failure has more to say than its
 * code (which rule a config broke, which devices deadlock), the failing
 * function also records a sentence retrievable with bsipipe_error_detail().
 */
#ifndef BSIPIPE_ERROR_H
#define BSIPIPE_ERROR_H

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes of our own, far from errno values. */
enum {
    BSIPIPE_ECONFIG = -4001,   /* a configuration breaks a rule */
    BSIPIPE_EDEADLOCK = -4002, /* a schedule deadlocks under rendezvous send/recv */
    BSIPIPE_EDEPEND = -4003,   /* a dependency is not satisfiable in list order */
    BSIPIPE_EFORMAT = -4004    /* a file or string is malformed */
};

/* A short, static description of a code (never NULL). */
const char *bsipipe_strerror(int code);

/* The sentence recorded by the last failing call in this thread ("" if
 * none). The string belongs to the library; it stays valid until the next
 * failing call in the same thread. */
const char *bsipipe_error_detail(void);

/* Records a detail sentence (printf format) and returns `code`, so that a
 * failing function can `return bsipipe_error_set(-EINVAL, "...", ...)`. */
int bsipipe_error_set(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears the detail sentence of this thread. */
void bsipipe_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif
