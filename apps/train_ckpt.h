/* apps/train_ckpt.h: bsipipe-train's checkpoint directory (--checkpoint,
 * --resume, --resume-from, --overwrite, --save-interval, --keep-last):
 * which flags go together, the directory's lock for the run's life, where a
 * resume reads from, and a save followed by keeping the last N.
 * docs/checkpoint.md. */
#ifndef BSIPIPE_APPS_TRAIN_CKPT_H
#define BSIPIPE_APPS_TRAIN_CKPT_H

#include "tasks/bsipipe_engine.h"

typedef struct train_ckpt {
    const char *dir;         /* --checkpoint DIR: where saves go (NULL: none) */
    const char *resume_from; /* --resume-from PATH (NULL: --resume reads DIR) */
    int resume, overwrite;
    int save_interval;       /* >= 1 */
    int keep_last;           /* 0: DIR's latest only; N: also DIR/iter_NNNNNNN of the last N saves */
} train_ckpt_t;

/* The flags' combinations, before anything is created: 0, or 2 (the exit
 * status) after a message on stderr. emulate: --emulate was given. */
int train_ckpt_check_flags(train_ckpt_t *c, int emulate);

/* Creates DIR, takes its lock for the run's life (released at exit) and
 * refuses a checkpoint already there unless the run continues it or
 * --overwrite replaces it. 0, or 1 (the exit status) after a message.
 * Under --mpi rank 0 alone calls it (the ranks share DIR). */
int train_ckpt_open(const train_ckpt_t *c);

/* Where a resume reads (DIR or --resume-from's PATH); NULL when the run
 * starts afresh. */
const char *train_ckpt_load_dir(const train_ckpt_t *c);

/* Releases DIR's lock now (before an early exit that other ranks wait on). */
void train_ckpt_release(void);

/* After iteration `it` (1-based count of iterations done): saves when the
 * interval or the last iteration says so, then on rank 0 keeps the last N.
 * 0, or the save's negative code (its message printed). A failure to keep
 * is a warning: DIR's own checkpoint is saved. */
int train_ckpt_after_iteration(const train_ckpt_t *c, bsipipe_engine_t *e, int it, int iters, int rank);

#endif
