/* check.h: the checks of the C tests in this folder. The including file
 * declares `static int rank`, which the messages name. */
#ifndef BRAID_TEST_CHECK_H
#define BRAID_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "braid.h"

/* CHECK exits with a message naming the rank, the place and the condition
 * when cond is false. */
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank,        \
                    __FILE__, __LINE__, #cond);                                \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* OK runs a call that must succeed, printing Braid's error if it fails. */
#define OK(call)                                                               \
    do {                                                                       \
        int rc_ = (call);                                                      \
        CHECK(rc_ == BRAID_OK, "%s -> %d: %s", #call, rc_,                     \
              braid_last_error()->message);                                    \
    } while (0)

#endif
