/* test_checkpoint: checkpoint and resume of the engine.
 *
 * 1. Bit-identical resume: 6 iterations straight vs 3 iterations, save,
 *    destroy, a fresh engine loads and runs the last 3: losses and final
 *    parameters bitwise equal; the saved iteration counter comes back.
 * 2. Saving over an existing checkpoint leaves only checkpoint.bin in DIR,
 *    whose CRC is CRC-32/ISO-HDLC (a bitwise reference here, zlib's crc32 there);
 *    a symlink planted at the temporary file's name is not followed.
 * 3. Refusals with a clear detail, engine unchanged (its state saved before
 *    and after is the same file): missing dir, missing file, truncated file,
 *    a flipped byte (corrupted), bad magic, and a checkpoint of another
 *    config (w=4 loaded into a w=2 engine), an iteration counter >= 2^31 or
 *    a huge step count under a valid CRC, a state that is not finite (NaN
 *    or negative Adam second moment, infinite parameter) under a valid CRC,
 *    a FIFO named checkpoint.bin.
 * 4. A step whose result is not finite (lr 1e38) is not saved: refused by
 *    tensor, the checkpoint before it intact.
 * One engine per process at a time: each is destroyed before the next. */
#include "tasks/bsipipe_engine.h"
#include "base/bsipipe_error.h"
#include "tests/check.h"
#include "tests/test_data.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 8, 32, 2, 64, 64, 32};
enum { M = 4, ITERS = 6, HALF = 3 };

/* layout: which layers each chunk holds (NULL: the even split). */
static bsipipe_engine_t *make_layout(int w, const char *layout)
{
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
    pc.w = w;
    pc.m = M;
    pc.layout = layout;
    bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &pc);
    o.watchdog_s = 20;
    bsipipe_engine_t *e = NULL;
    int rc = bsipipe_engine_create(&o, &e);
    CHECK(rc == 0, "create (w=%d): %s", w, bsipipe_error_detail());
    return e;
}

static bsipipe_engine_t *make(int w)
{
    return make_layout(w, NULL);
}

/* Runs iterations [from, to), losses into loss[it]. */
static int run(bsipipe_engine_t *e, int from, int to, double *loss)
{
    int S = gpt.seq_len, tokens[M * 32], targets[M * 32];
    for (int it = from; it < to; it++) {
        test_data_make(M, S, gpt.vocab, 100 + (unsigned)it, tokens, targets);
        int rc = bsipipe_engine_iteration(e, tokens, targets, &loss[it], NULL);
        CHECK(rc == 0, "iteration %d: %s", it, bsipipe_error_detail());
        if (rc)
            return rc;
    }
    return 0;
}

static char *path_in(const char *dir, const char *name)
{
    static char buf[4][4096];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static unsigned char *slurp(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static int spit(const char *path, const unsigned char *b, long n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(b, 1, (size_t)n, f) == (size_t)n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Entries of dir other than . and .. (names joined by spaces into out). */
static int list_dir(const char *dir, char *out, size_t n)
{
    DIR *d = opendir(dir);
    int count = 0;
    out[0] = 0;
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        count++;
        size_t l = strlen(out);
        snprintf(out + l, n - l, "%s%s", l ? " " : "", de->d_name);
    }
    closedir(d);
    return count;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            unlink(path_in(dir, de->d_name));
    closedir(d);
    rmdir(dir);
}

/* zlib's crc32 (the format's): re-seals an edited image so only the edit is checked. */
static void reseal(unsigned char *b, long n)
{
    uint32_t c = (uint32_t)crc32(0L, b, (uInt)(n - 4));
    for (int i = 0; i < 4; i++)
        b[n - 4 + i] = (unsigned char)(c >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const unsigned char *p)
{
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_checkpoint: FAIL: timed out (a load hung on a FIFO?)\n";
    if (write(2, msg, sizeof msg - 1) < 0) {}
    _exit(1);
}

static char *make_dir(const char *base, const char *name)
{
    char *p = malloc(strlen(base) + strlen(name) + 2);
    sprintf(p, "%s/%s", base, name);
    CHECK(mkdir(p, 0777) == 0, "mkdir %s", p);
    return p;
}

/* The engine's whole state, as a checkpoint image (iteration 0). */
static unsigned char *state_of(bsipipe_engine_t *e, const char *dir, long *n)
{
    int rc = bsipipe_engine_save(e, dir, 0);
    CHECK(rc == 0, "save state: %s", bsipipe_error_detail());
    return rc ? NULL : slurp(path_in(dir, "checkpoint.bin"), n);
}

/* A load that must fail with `code`, a detail containing `want` (and
 * `want2` if not NULL), and leave the engine and *iteration unchanged. */
static void expect_refused(bsipipe_engine_t *e, const char *dir, int code, const char *want, const char *want2,
                           const unsigned char *state, long state_n, const char *scratch)
{
    long iter = -12345;
    int rc = bsipipe_engine_load(e, dir, &iter);
    const char *why = bsipipe_error_detail();
    printf("refused (%d): %s\n", rc, why);
    CHECK(rc == code, "load %s: rc %d, expected %d (%s)", dir, rc, code, why);
    CHECK_CONTAINS(why, want);
    if (want2)
        CHECK_CONTAINS(why, want2);
    CHECK(iter == -12345, "iteration written by a failed load");
    long n = 0;
    unsigned char *now = state_of(e, scratch, &n);
    CHECK(now && n == state_n && !memcmp(now, state, (size_t)n), "a failed load changed the engine");
    free(now);
}

int main(void)
{
    setenv("STARPU_SILENT", "1", 1);
    const char *tmp = getenv("TMPDIR");
    char base[4096];
    snprintf(base, sizeof base, "%s/bsipipe-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 99;
    }
    char *ck = make_dir(base, "ck"), *scratch = make_dir(base, "scratch"), *bad = make_dir(base, "bad"),
         *empty = make_dir(base, "empty");
    double straight[ITERS], resumed[ITERS];
    long np = 0;
    float *p_straight = NULL, *p_resumed = NULL;

    /* 1a. Six iterations straight. */
    bsipipe_engine_t *e = make(4);
    if (e) {
        np = bsipipe_engine_n_params(e);
        p_straight = malloc(sizeof(float) * (size_t)np);
        p_resumed = malloc(sizeof(float) * (size_t)np);
        run(e, 0, ITERS, straight);
        CHECK(bsipipe_engine_params(e, p_straight) == 0, "params");
    }
    bsipipe_engine_destroy(e);

    /* 1b. Three iterations, save, destroy. */
    e = make(4);
    if (e) {
        run(e, 0, HALF, resumed);
        int rc = bsipipe_engine_save(e, ck, HALF);
        CHECK(rc == 0, "save: %s", bsipipe_error_detail());
    }
    bsipipe_engine_destroy(e);

    /* 1c. A fresh engine loads and runs the last three. */
    e = make(4);
    if (e && p_resumed) {
        long iter = -1;
        int rc = bsipipe_engine_load(e, ck, &iter);
        CHECK(rc == 0, "load: %s", bsipipe_error_detail());
        CHECK(iter == HALF, "saved iteration %ld, expected %d", iter, HALF);
        run(e, (int)iter, ITERS, resumed);
        CHECK(bsipipe_engine_params(e, p_resumed) == 0, "params");
        for (int it = 0; it < ITERS; it++)
            printf("iteration %d: loss straight %.9g, %s %.9g\n", it, straight[it], it < HALF ? "before save" : "resumed",
                   resumed[it]);
        CHECK(!memcmp(straight, resumed, sizeof straight), "losses differ after resume");
        long diff = 0;
        for (long i = 0; i < np; i++)
            diff += memcmp(&p_straight[i], &p_resumed[i], sizeof(float)) != 0;
        printf("final parameters: %ld of %ld differ bitwise\n", diff, np);
        CHECK(diff == 0, "resumed parameters differ from the straight run's");
    }

    /* 2. Save over an existing checkpoint: nothing left behind, and it loads. */
    if (e) {
        char names[1024];
        CHECK(bsipipe_engine_save(e, ck, ITERS) == 0, "save over: %s", bsipipe_error_detail());
        CHECK(bsipipe_engine_save(e, ck, ITERS) == 0, "save over again: %s", bsipipe_error_detail());
        int n = list_dir(ck, names, sizeof names);
        CHECK(n == 1 && !strcmp(names, "checkpoint.bin"), "after saving over a checkpoint, %s holds: %s", ck, names);
        /* The stored CRC is CRC-32/ISO-HDLC (zlib's crc32), as computed bit by
         * bit here: the format does not depend on the library that seals it. */
        long cn = 0;
        unsigned char *img = slurp(path_in(ck, "checkpoint.bin"), &cn);
        CHECK(img && cn > 4, "read back %s/checkpoint.bin", ck);
        if (img && cn > 4) {
            unsigned char copy[4];
            memcpy(copy, img + cn - 4, 4);
            reseal(img, cn);
            CHECK(!memcmp(copy, img + cn - 4, 4), "checkpoint CRC %02x%02x%02x%02x is not CRC-32/ISO-HDLC",
                  copy[3], copy[2], copy[1], copy[0]);
        }
        free(img);
        long iter = -1;
        CHECK(bsipipe_engine_load(e, ck, &iter) == 0 && iter == ITERS, "reload: %s", bsipipe_error_detail());
        CHECK(bsipipe_engine_params(e, p_resumed) == 0 && !memcmp(p_resumed, p_straight, sizeof(float) * (size_t)np),
              "reload changed the parameters");
        /* Saving into a missing directory fails and names it. */
        char missing[4200];
        snprintf(missing, sizeof missing, "%s/no-such-dir", base);
        CHECK(bsipipe_engine_save(e, missing, 1) == -ENOENT, "save into a missing dir");
        CHECK_CONTAINS(bsipipe_error_detail(), "no-such-dir");

        /* A symlink planted at the temporary file's name is not followed: the
         * file it points to stays as it was, checkpoint.bin is a regular file. */
        char victim[4200], planted[4200], tmpname[64];
        snprintf(victim, sizeof victim, "%s/victim", base);
        snprintf(tmpname, sizeof tmpname, ".checkpoint.bin.%ld.tmp", (long)getpid());
        snprintf(planted, sizeof planted, "%s", path_in(ck, tmpname));
        CHECK(spit(victim, (const unsigned char *)"precious", 8) == 0, "write %s", victim);
        CHECK(symlink(victim, planted) == 0, "symlink %s", planted);
        CHECK(bsipipe_engine_save(e, ck, ITERS) == 0, "save with a planted symlink: %s", bsipipe_error_detail());
        long vn = 0;
        unsigned char *v = slurp(victim, &vn);
        CHECK(v && vn == 8 && !memcmp(v, "precious", 8), "save followed the symlink planted at %s (victim now %ld "
              "bytes)", planted, vn);
        free(v);
        struct stat lst;
        CHECK(lstat(path_in(ck, "checkpoint.bin"), &lst) == 0 && S_ISREG(lst.st_mode),
              "checkpoint.bin is not a regular file after a save over a planted symlink");
        CHECK(bsipipe_engine_load(e, ck, NULL) == 0, "load after a planted symlink: %s", bsipipe_error_detail());
        unlink(planted);
        unlink(victim);
        n = list_dir(ck, names, sizeof names);
        CHECK(n == 1 && !strcmp(names, "checkpoint.bin"), "%s holds: %s", ck, names);
    }

    /* 3. Refusals leave the engine unchanged. */
    long good_n = 0, state_n = 0;
    unsigned char *good = slurp(path_in(ck, "checkpoint.bin"), &good_n);
    unsigned char *state = e ? state_of(e, scratch, &state_n) : NULL;
    CHECK(good && good_n > 1000, "checkpoint read back");
    if (e && good && state) {
        char missing[4200], expect[128];
        snprintf(missing, sizeof missing, "%s/no-such-dir", base);
        expect_refused(e, missing, -ENOENT, "no-such-dir/checkpoint.bin", NULL, state, state_n, scratch);
        expect_refused(e, empty, -ENOENT, "empty/checkpoint.bin", NULL, state, state_n, scratch);

        /* Truncated to half. */
        char bp[4200]; /* path_in's buffers are reused */
        snprintf(bp, sizeof bp, "%s", path_in(bad, "checkpoint.bin"));
        CHECK(spit(bp, good, good_n / 2) == 0, "write %s", bp);
        snprintf(expect, sizeof expect, "expected %ld bytes, found %ld", good_n, good_n / 2);
        expect_refused(e, bad, BSIPIPE_EFORMAT, "truncated", expect, state, state_n, scratch);
        /* Empty file. */
        CHECK(spit(bp, good, 0) == 0, "write %s", bp);
        expect_refused(e, bad, BSIPIPE_EFORMAT, "truncated", NULL, state, state_n, scratch);

        /* One flipped byte in the middle (the parameters). */
        unsigned char *b = malloc((size_t)good_n);
        memcpy(b, good, (size_t)good_n);
        b[good_n / 2] ^= 0x10;
        CHECK(spit(bp, b, good_n) == 0, "write %s", bp);
        expect_refused(e, bad, BSIPIPE_EFORMAT, "corrupted", NULL, state, state_n, scratch);
        /* A flipped byte in the header's configuration is corruption too, not "another config". */
        memcpy(b, good, (size_t)good_n);
        b[56] ^= 0x01; /* pc.w */
        CHECK(spit(bp, b, good_n) == 0, "write %s", bp);
        expect_refused(e, bad, BSIPIPE_EFORMAT, "corrupted", NULL, state, state_n, scratch);
        /* Bad magic. */
        memcpy(b, good, (size_t)good_n);
        b[0] = 'X';
        CHECK(spit(bp, b, good_n) == 0, "write %s", bp);
        expect_refused(e, bad, BSIPIPE_EFORMAT, "magic", NULL, state, state_n, scratch);
        /* Unknown format version. */
        memcpy(b, good, (size_t)good_n);
        b[8] = 9;
        CHECK(spit(bp, b, good_n) == 0, "write %s", bp);
        expect_refused(e, bad, BSIPIPE_EFORMAT, "version 9", NULL, state, state_n, scratch);
        /* An iteration counter >= 2^31 (or a step count) with a valid CRC is
         * refused, not wrapped into a negative int by the caller. */
        memcpy(b, good, (size_t)good_n);
        put_le64(b + 144, (uint64_t)1 << 31);
        reseal(b, good_n);
        CHECK(spit(bp, b, good_n) == 0, "write %s", bp);
        expect_refused(e, bad, BSIPIPE_EFORMAT, "iteration counter 2147483648", NULL, state, state_n, scratch);
        memcpy(b, good, (size_t)good_n);
        put_le64(b + 136, (uint64_t)1 << 40);
        reseal(b, good_n);
        CHECK(spit(bp, b, good_n) == 0, "write %s", bp);
        expect_refused(e, bad, BSIPIPE_EFORMAT, "step count", NULL, state, state_n, scratch);
        /* A state that is not finite, under a valid CRC (saved so by an
         * older build, or edited), is refused by tensor: a NaN Adam second
         * moment, a negative one, an infinite parameter. Replica 0's params,
         * m and v follow the header (160 bytes + 32 per replica). */
        long nrep = (long)(get_le32(good + 152) * get_le32(good + 156)), n0 = (long)get_le64(good + 160 + 24);
        long data = 160 + 32 * nrep;
        static const struct { int which; long j; uint32_t bits; const char *want, *want2; } bad_values[] = {
            {2, 5, 0x7fc00000u, "Adam second moment of wte [64 x 32], element 5 = nan", "(replica pipe 0, chunk 0)"},
            {2, 40, 0xbf800000u, "Adam second moment of wte [64 x 32], element 40 = -1", NULL},
            {0, 2048 + 3, 0x7f800000u, "parameter of wpe [32 x 32], element 3 = inf", NULL},
        };
        for (size_t k = 0; k < sizeof bad_values / sizeof bad_values[0]; k++) {
            memcpy(b, good, (size_t)good_n);
            unsigned char *at = b + data + 4 * (bad_values[k].which * n0 + bad_values[k].j);
            for (int i = 0; i < 4; i++)
                at[i] = (unsigned char)(bad_values[k].bits >> (8 * i));
            reseal(b, good_n);
            CHECK(spit(bp, b, good_n) == 0, "write %s", bp);
            expect_refused(e, bad, BSIPIPE_EFORMAT, bad_values[k].want, bad_values[k].want2, state, state_n, scratch);
        }
        /* A FIFO named checkpoint.bin is refused, not waited on. */
        unlink(bp);
        CHECK(mkfifo(bp, 0666) == 0, "mkfifo %s", bp);
        signal(SIGALRM, on_alarm);
        alarm(60);
        expect_refused(e, bad, -EINVAL, "not a regular file", NULL, state, state_n, scratch);
        alarm(0);
        unlink(bp);
        free(b);
    }
    free(state);
    bsipipe_engine_destroy(e);

    /* 3b. A checkpoint of another config: w=4 into a w=2 engine. */
    e = make(2);
    if (e && good) {
        unsigned char *st2 = state_of(e, scratch, &state_n);
        if (st2)
            expect_refused(e, ck, BSIPIPE_EFORMAT, "checkpoint has w=4, this run has w=2", NULL, st2, state_n, scratch);
        free(st2);
    }
    bsipipe_engine_destroy(e);

    /* 3c. Another layout: a checkpoint of the even split (w = 2, 4 chunks of
     * 2 layers) loads into an engine placing 1, 3, 3 and 1 layers; that
     * engine's save loads back into an even one, whose save is the first
     * file byte for byte (parameters and both moments, every chunk). */
    e = make(2);
    if (e) {
        run(e, 0, HALF, resumed);
        CHECK(bsipipe_engine_save(e, ck, HALF) == 0, "save (even): %s", bsipipe_error_detail());
    }
    bsipipe_engine_destroy(e);
    long even_n = 0, back_n = 0;
    unsigned char *even = slurp(path_in(ck, "checkpoint.bin"), &even_n), *back = NULL;
    e = make_layout(2, "Et|t*3|t*3|tL");
    if (e && even) {
        long iter = -1;
        CHECK(bsipipe_engine_load(e, ck, &iter) == 0 && iter == HALF, "load under another layout: %s",
              bsipipe_error_detail());
        CHECK(bsipipe_engine_save(e, scratch, HALF) == 0, "save (uneven): %s", bsipipe_error_detail());
    }
    bsipipe_engine_destroy(e);
    e = make(2);
    if (e && even) {
        long iter = -1;
        CHECK(bsipipe_engine_load(e, scratch, &iter) == 0 && iter == HALF, "load the uneven save: %s",
              bsipipe_error_detail());
        CHECK(bsipipe_engine_save(e, scratch, HALF) == 0, "save (even again): %s", bsipipe_error_detail());
        back = slurp(path_in(scratch, "checkpoint.bin"), &back_n);
        CHECK(back && back_n == even_n && !memcmp(back, even, (size_t)even_n),
              "even -> uneven -> even layout changed the checkpoint (%ld vs %ld bytes)", back_n, even_n);
        printf("layouts: even -> Et|t*3|t*3|tL -> even: %ld bytes, %s\n", back_n,
               back && back_n == even_n && !memcmp(back, even, (size_t)even_n) ? "identical" : "DIFFERENT");
    }
    bsipipe_engine_destroy(e);
    free(even);
    free(back);

    /* 4. A step whose result is not finite is never saved: a learning rate
     * of 1e38 takes the parameters past the float range in one step (the
     * iteration's loss and gradient norm, computed before the step, are
     * finite). The save is refused by tensor and the checkpoint in DIR stays
     * the one before. */
    {
        bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
        pc.w = 4;
        pc.m = M;
        bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &pc);
        o.watchdog_s = 20;
        o.opt.lr = 1e38;
        e = NULL;
        CHECK(bsipipe_engine_create(&o, &e) == 0, "create (lr 1e38): %s", bsipipe_error_detail());
        if (e) {
            double loss[1] = {0};
            long before_n = 0, after_n = 0;
            unsigned char *before = slurp(path_in(ck, "checkpoint.bin"), &before_n);
            if (run(e, 0, 1, loss) == 0) {
                CHECK(isfinite(loss[0]), "the diverging step's own loss %g is finite", loss[0]);
                int rc = bsipipe_engine_save(e, ck, 1);
                printf("save refused (%d): %s\n", rc, bsipipe_error_detail());
                CHECK(rc == -EDOM, "save of a non-finite state: rc %d, expected -EDOM", rc);
                CHECK_CONTAINS(bsipipe_error_detail(), "not finite: parameter of ");
                CHECK_CONTAINS(bsipipe_error_detail(), "it is not saved");
            }
            unsigned char *after = slurp(path_in(ck, "checkpoint.bin"), &after_n);
            CHECK(before && after && before_n == after_n && !memcmp(before, after, (size_t)after_n),
                  "a refused save changed %s/checkpoint.bin", ck);
            char names[1024];
            CHECK(list_dir(ck, names, sizeof names) == 1, "a refused save left files in %s: %s", ck, names);
            free(before);
            free(after);
        }
        bsipipe_engine_destroy(e);
    }

    free(good);
    free(p_straight);
    free(p_resumed);
    remove_dir(ck);
    remove_dir(scratch);
    remove_dir(bad);
    remove_dir(empty);
    rmdir(base);
    free(ck);
    free(scratch);
    free(bad);
    free(empty);
    return check_finish("test_checkpoint");
}
