/* apps/train_ckpt.c: bsipipe-train's checkpoint directory (train_ckpt.h). */
#include "apps/train_ckpt.h"
#include "base/bsipipe_error.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bsipipe_checkpoint_lock_t *ckpt_lock; /* held from start-up to exit */

void train_ckpt_release(void)
{
    bsipipe_checkpoint_unlock(ckpt_lock);
    ckpt_lock = NULL;
}

/* --resume-from naming DIR itself is --resume. */
static int same_dir(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

int train_ckpt_check_flags(train_ckpt_t *c, int emulate)
{
    if (c->dir && emulate) {
        fprintf(stderr, "bsipipe-train: --checkpoint with --emulate would save parameters nothing computed; "
                        "drop one of them\n");
        return 2;
    }
    if (c->resume_from && emulate) {
        fprintf(stderr, "bsipipe-train: --resume-from with --emulate would load parameters nothing computes with; "
                        "drop one of them\n");
        return 2;
    }
    if (c->save_interval > 1 && !c->dir) {
        fprintf(stderr, "bsipipe-train: --save-interval needs --checkpoint DIR (where to save)\n");
        return 2;
    }
    if (c->keep_last > 0 && !c->dir) {
        fprintf(stderr, "bsipipe-train: --keep-last needs --checkpoint DIR (where the kept checkpoints go)\n");
        return 2;
    }
    if (c->resume && c->resume_from) {
        fprintf(stderr, "bsipipe-train: --resume and --resume-from both say where to resume from; keep one "
                        "(--resume reads --checkpoint DIR, --resume-from reads PATH)\n");
        return 2;
    }
    if (c->resume && !c->dir) {
        fprintf(stderr, "bsipipe-train: --resume needs --checkpoint DIR (where the checkpoint is), or give "
                        "--resume-from PATH\n");
        return 2;
    }
    if (c->resume_from && c->dir && same_dir(c->resume_from, c->dir)) {
        c->resume_from = NULL; /* it continues DIR */
        c->resume = 1;
    }
    if (c->overwrite && (!c->dir || c->resume)) {
        fprintf(stderr, "bsipipe-train: --overwrite %s\n", c->resume ? "and --resume contradict each other: "
                        "--resume continues the checkpoint, --overwrite replaces it; keep one"
                        : "needs --checkpoint DIR (the checkpoint to replace)");
        return 2;
    }
    return 0;
}

int train_ckpt_open(const train_ckpt_t *c)
{
    if (!c->resume && mkdir(c->dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "bsipipe-train: cannot create checkpoint directory '%s': %s\n", c->dir, strerror(errno));
        return 1;
    }
    if (bsipipe_checkpoint_lock(c->dir, &ckpt_lock) < 0) {
        fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
        return 1;
    }
    atexit(train_ckpt_release);
    int has = bsipipe_checkpoint_exists(c->dir);
    if (has < 0) {
        fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
        return 1;
    }
    if (has && !c->resume && !c->overwrite) {
        if (c->resume_from)
            fprintf(stderr, "bsipipe-train: '%s' already holds a checkpoint (%s/checkpoint.bin), which the first "
                            "save would replace with a continuation of %s; add --overwrite to replace it (a kept "
                            "%s/iter_NNNNNNN stays), or choose another --checkpoint directory\n",
                    c->dir, c->dir, c->resume_from, c->dir);
        else
            fprintf(stderr, "bsipipe-train: '%s' already holds a checkpoint (%s/checkpoint.bin); add --resume to "
                            "continue it, or --overwrite to start afresh and replace it (or choose another "
                            "--checkpoint directory)\n", c->dir, c->dir);
        return 1;
    }
    return 0;
}

const char *train_ckpt_load_dir(const train_ckpt_t *c)
{
    return c->resume_from ? c->resume_from : c->resume ? c->dir : NULL;
}

int train_ckpt_after_iteration(const train_ckpt_t *c, bsipipe_engine_t *e, int it, int iters, int rank)
{
    if (!c->dir || (it % c->save_interval != 0 && it != iters))
        return 0;
    int rc = bsipipe_engine_save(e, c->dir, it);
    if (rc < 0) {
        fprintf(stderr, "bsipipe-train: %s\n", bsipipe_error_detail());
        return rc;
    }
    if (c->keep_last > 0 && rank == 0 && bsipipe_checkpoint_keep(c->dir, c->keep_last, NULL) < 0)
        fprintf(stderr, "bsipipe-train: warning: iteration %d is saved in %s/checkpoint.bin, but keeping a copy "
                        "failed: %s\n", it, c->dir, bsipipe_error_detail());
    return 0;
}
