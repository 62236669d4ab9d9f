/* tests/check.h: tiny assertion helpers for the test programs. A failed
 * check prints where and why and makes the program exit 1 at the end; a test
 * that cannot run for lack of hardware exits 77 (automake's SKIP). */
#ifndef BSIPIPE_TESTS_CHECK_H
#define BSIPIPE_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures, check_count;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        check_count++;                                                        \
        if (!(cond)) {                                                        \
            check_failures++;                                                 \
            fprintf(stderr, "%s:%d: FAIL: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
        }                                                                     \
    } while (0)

#define CHECK_NEAR(a, b, tol, ...) CHECK(fabs((double)(a) - (double)(b)) <= (tol), __VA_ARGS__)

/* Checks that `haystack` contains `needle` (error messages). */
#define CHECK_CONTAINS(haystack, needle)                                        \
    CHECK(strstr((haystack), (needle)) != NULL, "expected \"%s\" in \"%s\"", (needle), (haystack))

static inline int check_finish(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? 1 : 0;
}

#endif
