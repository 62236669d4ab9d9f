/* test_blas_threads: OpenBLAS runs on one thread inside every StarPU worker
 * of an engine, under every policy, computing or emulated (issue 14: the
 * kernels' threads must not oversubscribe the cores the workers run on).
 * After an iteration, one probe task per worker asks OpenBLAS how many
 * threads a call would use, from that worker's thread. Skips (77) when the
 * BLAS is not OpenBLAS. No timing. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "tests/check.h"
#include "tests/test_data.h"
#include "tasks/bsipipe_engine.h"
#include "base/bsipipe_error.h"

#include <dlfcn.h>
#include <starpu.h>
#include <stdlib.h>

static int (*blas_threads)(void);
static int seen[STARPU_NMAXWORKERS];

static void probe_cpu(void *buffers[], void *arg)
{
    (void)buffers;
    (void)arg;
    seen[starpu_worker_get_id()] = blas_threads();
}

static struct starpu_codelet probe_cl = {.cpu_funcs = {probe_cpu}, .nbuffers = 0, .name = "blas_probe"};

int main(void)
{
    void *sym = dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    if (!sym) {
        printf("test_blas_threads: the BLAS is not OpenBLAS; skipped\n");
        return 77;
    }
    memcpy(&blas_threads, &sym, sizeof blas_threads);
    setenv("OPENBLAS_NUM_THREADS", "2", 0); /* what a user may have set: the engine still runs one per worker */
    static const bsipipe_model_dims_t gpt = {BSIPIPE_MODEL_GPT, 4, 32, 2, 64, 32, 32};
    static const char *const policies[] = {"bsipipe", "eager", "lws", "dmda", "prio"};
    int m = 4, S = gpt.seq_len;
    int *tokens = malloc(sizeof(int) * (size_t)(m * S)), *targets = malloc(sizeof(int) * (size_t)(m * S));
    test_data_make(m, S, gpt.vocab, 7, tokens, targets);
    for (int pi = 0; pi < 5; pi++)
        for (int emulate = 0; emulate < 2; emulate++) {
            bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_BSIPIPE);
            pc.w = 2;
            pc.m = m;
            bsipipe_engine_options_t o = bsipipe_engine_options_default(&gpt, &pc);
            o.policy = policies[pi];
            o.emulate_flops = emulate ? 1e12 : 0;
            bsipipe_engine_t *e = NULL;
            int rc = bsipipe_engine_create(&o, &e);
            CHECK(rc == 0, "%s: create: %s", policies[pi], bsipipe_error_detail());
            if (rc)
                continue;
            double loss, gn;
            CHECK(bsipipe_engine_iteration(e, tokens, targets, &loss, &gn) == 0, "%s: iteration: %s", policies[pi],
                  bsipipe_error_detail());
            unsigned nw = starpu_worker_get_count();
            for (unsigned w = 0; w < nw; w++) {
                seen[w] = -1;
                struct starpu_task *t = starpu_task_create();
                t->cl = &probe_cl;
                t->execute_on_a_specific_worker = 1;
                t->workerid = w;
                CHECK(starpu_task_submit(t) == 0, "probe on worker %u", w);
            }
            starpu_task_wait_for_all();
            for (unsigned w = 0; w < nw; w++)
                CHECK(seen[w] == 1, "policy %s%s: OpenBLAS would use %d threads on worker %u", policies[pi],
                      emulate ? " (emulated)" : "", seen[w], w);
            printf("policy %-7s %s: %u workers, OpenBLAS threads per worker:", policies[pi],
                   emulate ? "emulated" : "computed", nw);
            for (unsigned w = 0; w < nw; w++)
                printf(" %d", seen[w]);
            printf("\n");
            bsipipe_engine_destroy(e);
        }
    free(tokens);
    free(targets);
    return check_finish("test_blas_threads");
}
