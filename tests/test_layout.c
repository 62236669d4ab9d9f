/* test_layout: layout strings (Megatron's grammar, each refusal naming its
 * position), their canonical form read back, the split by cost against an
 * exhaustive search, and plans built on uneven layouts (the simulator and
 * the JSON plan follow the chunks' layer ranges). */
#include "bsipipe.h"
#include "graph/bsipipe_layout.h"
#include "tests/check.h"

#include <stdlib.h>
#include <unistd.h>

static void parses(const char *text, int chunks, int layers, const int *want)
{
    int got[64];
    int rc = bsipipe_layout_parse(text, chunks, layers, got);
    CHECK(rc == 0, "\"%s\" (%d chunks, L = %d): %s", text, chunks, layers, bsipipe_error_detail());
    for (int c = 0; rc == 0 && c < chunks; c++)
        CHECK(got[c] == want[c], "\"%s\": chunk %d holds %d layers, expected %d", text, c, got[c], want[c]);
}

static void refused(const char *text, int chunks, int layers, const char *want)
{
    int got[64];
    int rc = bsipipe_layout_parse(text, chunks, layers, got);
    CHECK(rc == BSIPIPE_ECONFIG, "\"%s\" accepted (rc %d)", text, rc);
    if (rc == BSIPIPE_ECONFIG)
        CHECK_CONTAINS(bsipipe_error_detail(), want);
}

static double max_cost(const bsipipe_model_dims_t *d, const int *n, int C)
{
    double m = 0;
    for (int c = 0; c < C; c++) {
        double x = bsipipe_layout_chunk_cost(d, n, C, c);
        m = x > m ? x : m;
    }
    return m;
}

/* The least slowest-chunk cost over every split of L layers into C
 * chunks of one or more (compositions, enumerated). */
static double brute_best(const bsipipe_model_dims_t *d, int C, int *n, int c, int left)
{
    if (c == C - 1) {
        n[c] = left;
        return max_cost(d, n, C);
    }
    double best = 1e300;
    for (int k = 1; k <= left - (C - 1 - c); k++) {
        n[c] = k;
        double x = brute_best(d, C, n, c + 1, left - k);
        best = x < best ? x : best;
    }
    return best;
}

int main(void)
{
    /* Megatron's examples and forms: repeats, groups holding '|', commas. */
    int megatron[31] = {3, [1 ... 29] = 2, 1};
    parses("Et*3|(tt|)*29,tL", 31, 62, megatron);
    parses("Et|t|tL", 3, 3, (int[]){1, 1, 1});
    parses("E t*2 , | t | tL", 3, 4, (int[]){2, 1, 1});
    parses("E(t|)*3tL", 4, 4, (int[]){1, 1, 1, 1});
    parses("Et*4|(t*4|)*6t*2L", 8, 30, (int[]){4, 4, 4, 4, 4, 4, 4, 2});
    parses("E((t|)*2)*2tL", 5, 5, (int[]){1, 1, 1, 1, 1});

    refused("", 2, 2, "position 1: the layout is empty");
    refused("t|tL", 2, 2, "position 1: the first stage must open with the embedding E");
    refused("Et|t", 2, 2, "position 4: the last stage must end with the loss L");
    refused("Et|EtL", 2, 2, "position 4: a second embedding E");
    refused("EtL|tL", 2, 2, "position 3: the loss L before the end");
    refused("Et||tL", 3, 2, "position 4: stage 1 holds no transformer layer t");
    refused("Et|m|tL", 3, 2, "position 4: 'm' (Megatron's MTP layer)");
    refused("Et|x|tL", 3, 2, "position 4: unexpected character 'x'");
    refused("Et|(t|tL", 2, 3, "position 4: this '(' is never closed");
    refused("Et|t)|tL", 3, 3, "position 5: ')' closes no '('");
    refused("Et*|tL", 2, 2, "position 3: '*' must be followed by a repeat count");
    refused("Et*0|tL", 2, 2, "position 3: repeat count must be in 1..65536");
    refused("Et|t|tL", 2, 3, "position 5: a stage past the plan's p*w = 2 chunks begins here");
    refused("Et|tL", 3, 2, "2 stages, but the plan has p*w = 3 chunks");
    refused("Et|t*2L", 2, 2, "3 transformer layers t, but the model has L = 2");
    refused("E(t*65536)*65536|tL", 2, 2, "position 4: the layout holds more than");
    refused("Et*3|(tt|)*29,t|L", 32, 62, "stage 31 holds no transformer layer");

    /* The canonical form reads back as the same split. */
    int ns[][8] = {{1, 1, 1, 1}, {4, 4, 4, 4, 4, 4, 4, 2}, {2, 3, 3, 2}, {5, 1, 1, 7, 7, 7, 1, 2}};
    int Cs[] = {4, 8, 4, 8};
    for (int i = 0; i < 4; i++) {
        char buf[256];
        int L = 0, back[8];
        for (int c = 0; c < Cs[i]; c++)
            L += ns[i][c];
        CHECK(bsipipe_layout_format(ns[i], Cs[i], buf, sizeof buf) != NULL, "format %d", i);
        CHECK(bsipipe_layout_parse(buf, Cs[i], L, back) == 0 && !memcmp(back, ns[i], sizeof(int) * (size_t)Cs[i]),
              "\"%s\" does not read back", buf);
        printf("canonical: %s\n", buf);
    }
    char small[8];
    CHECK(bsipipe_layout_format(ns[1], 8, small, sizeof small) == NULL, "a short buffer is refused");

    /* The split by cost is optimal: against every split of L <= 14 layers
     * over C <= 5 chunks, at heads costing 0.2 to 9 layers. */
    int cases = 0;
    for (int vocab = 64; vocab <= 8192; vocab *= 4)
        for (int C = 1; C <= 5; C++)
            for (int L = C; L <= 14; L++) {
                bsipipe_model_dims_t d = {BSIPIPE_MODEL_GPT, L, 64, 2, 256, vocab, 128};
                int n[8], brute[8];
                CHECK(bsipipe_layout_auto(&d, C, n) == 0, "auto C=%d L=%d: %s", C, L, bsipipe_error_detail());
                int sum = 0, ones = 1;
                for (int c = 0; c < C; c++) {
                    sum += n[c];
                    ones &= n[c] >= 1;
                }
                CHECK(sum == L && ones, "auto C=%d L=%d: counts sum to %d", C, L, sum);
                double best = brute_best(&d, C, brute, 0, L), mine = max_cost(&d, n, C);
                CHECK(mine <= best + 1e-9, "auto C=%d L=%d V=%d: slowest chunk %.4f, the best split's %.4f", C, L,
                      vocab, mine, best);
                cases++;
            }
    printf("split by cost: optimal on %d cases\n", cases);
    bsipipe_model_dims_t tiny = {BSIPIPE_MODEL_GPT, 3, 64, 2, 256, 64, 128};
    int n4[4];
    CHECK(bsipipe_layout_auto(&tiny, 4, n4) == BSIPIPE_ECONFIG, "3 layers over 4 chunks");
    CHECK_CONTAINS(bsipipe_error_detail(), "3 layers cannot fill 4 chunks");

    /* A 24-layer model on 8 devices whose 128k vocabulary makes the head
     * cost about 3 layers: the head's chunk holds fewer layers, and the
     * slowest chunk is cheaper than the even split's. */
    bsipipe_model_dims_t big = {BSIPIPE_MODEL_LLAMA, 24, 4096, 32, 14336, 131072, 4096};
    int n8[8], even8[8] = {3, 3, 3, 3, 3, 3, 3, 3};
    CHECK(bsipipe_layout_auto(&big, 8, n8) == 0, "auto 24 layers: %s", bsipipe_error_detail());
    double a = bsipipe_layout_imbalance(&big, n8, 8), e = bsipipe_layout_imbalance(&big, even8, 8);
    char text[128];
    bsipipe_layout_format(n8, 8, text, sizeof text);
    printf("24 layers, head %.2f layers: auto %s imbalance %.3f, even %.3f\n",
           bsipipe_layout_head_layers(&big), text, a, e);
    CHECK(n8[7] < 3 && a < e, "auto %s (%.3f) is not better than the even split (%.3f)", text, a, e);

    /* One V-shaped pipe (zb-v): device d runs chunks d and 2w-1-d, so the
     * head's chunk and chunk 0 share device 0; the device balance moves
     * layers off chunk 0 until no device is slower than the chunk split
     * left the slowest one, and zb-v's auto layout is that balance. */
    bsipipe_parallel_config_t zbv = bsipipe_parallel_config_default(BSIPIPE_SCHED_ZB_V);
    zbv.w = 16;
    zbv.layout = "auto";
    bsipipe_model_dims_t big64 = {BSIPIPE_MODEL_GPT, 64, 1280, 32, 5120, 131072, 20480}; /* the paper's, 128k */
    int n16[32], v16[32], dev[32];
    CHECK(bsipipe_layout_auto(&big64, 32, n16) == 0, "auto 64 layers on 32 chunks");
    CHECK(bsipipe_parallel_config_layers(&zbv, &big64, v16) == 0, "zb-v auto: %s", bsipipe_error_detail());
    double before = 0, after = 0, load_b[16] = {0}, load_a[16] = {0};
    int sum = 0;
    for (int c = 0; c < 32; c++) {
        dev[c] = bsipipe_parallel_config_chunk_device(&zbv, 0, c);
        load_b[dev[c]] += bsipipe_layout_chunk_cost(&big64, n16, 32, c);
        load_a[dev[c]] += bsipipe_layout_chunk_cost(&big64, v16, 32, c);
        sum += v16[c];
        CHECK(v16[c] >= 1, "chunk %d emptied", c);
    }
    for (int dv = 0; dv < 16; dv++) {
        before = load_b[dv] > before ? load_b[dv] : before;
        after = load_a[dv] > after ? load_a[dv] : after;
    }
    bsipipe_layout_format(v16, 32, text, sizeof text);
    printf("zb-v, 64 layers on 32 chunks: slowest device %.2f layers by chunk, %.2f balanced (%s)\n", before, after,
           text);
    CHECK(sum == 64 && after < before - 0.5, "device balance: %.2f -> %.2f", before, after);
    CHECK(dev[0] == 0 && dev[31] == 0 && dev[15] == 15 && dev[16] == 15, "V placement");
    CHECK(bsipipe_parallel_config_chunk_device(&(bsipipe_parallel_config_t){.schedule = BSIPIPE_SCHED_BSIPIPE,
                                               .w = 4, .p = 2}, 1, 0) == 3, "the up pipe mirrors the down pipe");

    /* A plan on an uneven layout: chunk ranges, the config's canonical
     * string, the simulator's chunk costs, and the plan read back. */
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(BSIPIPE_SCHED_1F1B);
    pc.w = 4;
    pc.layout = "Et*2|t*3|t*3|t*2L";
    bsipipe_model_dims_t d10 = {BSIPIPE_MODEL_GPT, 10, 64, 2, 256, 64, 128};
    bsipipe_schedule_t *s = NULL;
    CHECK(bsipipe_schedule_create(&pc, &d10, &s) == 0, "plan: %s", bsipipe_error_detail());
    if (s) {
        int want[5] = {0, 2, 5, 8, 10};
        for (int c = 0; c < 4; c++) {
            int l0, l1;
            bsipipe_schedule_chunk_layers(s, c, &l0, &l1);
            CHECK(l0 == want[c] && l1 == want[c + 1], "chunk %d holds [%d, %d)", c, l0, l1);
        }
        CHECK(!strcmp(bsipipe_schedule_config(s)->layout, "Et*2|(t*3|)*2t*2L"), "canonical %s",
              bsipipe_schedule_config(s)->layout);
        CHECK(bsipipe_schedule_config(s)->layout != pc.layout, "the schedule keeps its own string");
        bsipipe_cost_model_t flops = bsipipe_cost_model_flops(1e12);
        flops.free_transfers = 1;
        bsipipe_op_t f1 = {.kind = BSIPIPE_OP_F, .chunk = 1, .sub = 0}, f0 = {.kind = BSIPIPE_OP_F, .chunk = 0};
        CHECK_NEAR(bsipipe_sim_op_cost(s, &flops, &f1) / bsipipe_sim_op_cost(s, &flops, &f0), 1.5, 1e-9,
                   "chunk 1's F over chunk 0's: 3 layers over 2");
        char path[] = "/tmp/bsipipe-layout-XXXXXX";
        int fd = mkstemp(path);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        bsipipe_sim_result_t *r = NULL;
        CHECK(f && bsipipe_simulate(s, &flops, &r) == 0 && bsipipe_export_json(f, s, r, &flops) == 0, "export");
        if (f)
            fclose(f);
        bsipipe_sim_result_destroy(r);
        bsipipe_schedule_t *t = NULL;
        CHECK(bsipipe_schedule_import_json(path, NULL, &t) == 0, "import: %s", bsipipe_error_detail());
        for (int c = 0; t && c < 4; c++) {
            int l0, l1;
            bsipipe_schedule_chunk_layers(t, c, &l0, &l1);
            CHECK(l0 == want[c] && l1 == want[c + 1], "imported chunk %d holds [%d, %d)", c, l0, l1);
        }
        bsipipe_schedule_destroy(t);
        unlink(path);
    }
    bsipipe_schedule_destroy(s);
    pc.layout = "Et*2|t*3|t*3|t*3L";
    CHECK(bsipipe_schedule_create(&pc, &d10, &s) == BSIPIPE_ECONFIG, "a layout of 11 layers for 10");
    CHECK_CONTAINS(bsipipe_error_detail(), "11 transformer layers t, but the model has L = 10");
    pc.layout = NULL;
    d10.n_layers = 10;
    CHECK(bsipipe_schedule_create(&pc, &d10, &s) == BSIPIPE_ECONFIG, "10 layers, 4 chunks, even split");
    CHECK_CONTAINS(bsipipe_error_detail(), "nearest valid L: 8 or 12, or place them with --layout auto");
    pc.layout = "auto";
    CHECK(bsipipe_schedule_create(&pc, NULL, &s) == BSIPIPE_ECONFIG, "a layout without a model");
    CHECK_CONTAINS(bsipipe_error_detail(), "give the model's dimensions");
    return check_finish("test_layout");
}
