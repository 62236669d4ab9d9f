/* tests/kernels/tp_run_tmpl.h: one sequence through embedding, two chunks and
 * the head, unsharded (size 0) or on `size` TP ranks over the in-process
 * communicator; results gathered into the full layout as doubles. Included
 * by test_kernel_tp.c with R (float / double), FN (kernel name decoration)
 * and SFX (local name decoration) defined. */

/* the rank-sliced [ls, h] rows of piece [s0, s0+len) <-> the [S, h] layout */
static void SFX(put_rows)(double *dst, const R *src, int s0, int len, int size, int rank, int h)
{
    int ls = len / size;
    for (long i = 0; i < (long)ls * h; i++)
        dst[(long)(s0 + rank * ls) * h + i] = src[i];
}

struct SFX(rank_args) {
    const bsipipe_model_dims_t *d;
    int size, k, l_split;
    const R *p;
    const int *tok, *tgt, *st;
    double scale;
    bsipipe_tp_comm_t comm;
    R **gs;       /* [size] gradient shards */
    double *loss; /* [size] */
    double *cpu;  /* [size] thread CPU seconds */
    struct tp_out *o;
};

static double SFX(thread_cpu)(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* One rank: the protocol of bsipipe_model_sequence with chunks [0, l_split)
 * and [l_split, L). */
static int SFX(rank_fn)(void *arg, int rank)
{
    struct SFX(rank_args) *a = arg;
    const bsipipe_model_dims_t *d = a->d;
    bsipipe_tp_t tp = {a->size, rank};
    const bsipipe_tp_comm_t *c = &a->comm;
    int S = d->seq_len, h = d->hidden, L = d->n_layers, k = a->k, ls1 = a->l_split;
    long np = bsipipe_tp_model_params(d, a->size), kvs = bsipipe_tp_kv_size(d, a->size);
    long lo0 = bsipipe_tp_layer_offset(d, a->size, 0);
    long lo1 = bsipipe_tp_layer_offset(d, a->size, ls1);
    long hoff = bsipipe_tp_layer_offset(d, a->size, L);
    R *ps = kt_alloc(sizeof(R) * np), *gs = a->gs[rank];
    R *kv = kt_alloc(sizeof(R) * L * kvs), *dkv = kt_alloc(sizeof(R) * L * kvs);
    R *work = kt_alloc(sizeof(R) * bsipipe_tp_work_size(d, a->size, S));
    R *ew = kt_alloc(sizeof(R) * bsipipe_tp_embed_work_size(d, a->size, S));
    R *hw = kt_alloc(sizeof(R) * bsipipe_tp_head_work_size(d, a->size, S));
    R *x = kt_alloc(sizeof(R) * S * h), *dx = kt_alloc(sizeof(R) * S * h);
    R **stash = kt_alloc(sizeof(R *) * k);
    double t0, loss = 0;
    KT_CHECK(FN(bsipipe_tp_model_shard)(d, &tp, a->p, ps));
    t0 = SFX(thread_cpu)();
    for (int j = 0; j < k; j++) {
        int s0 = a->st[j], len = a->st[j + 1] - s0;
        long ss = bsipipe_tp_stash_size(d, a->size, len);
        R *xj = x + (size_t)s0 * h, *dj = dx + (size_t)s0 * h; /* [ls, h] used */
        double lj;
        KT_CHECK(ss < 0 ? (int)ss : 0);
        stash[j] = kt_alloc(sizeof(R) * L * ss);
        KT_CHECK(FN(bsipipe_tp_embed_forward)(d, &tp, c, ps, a->tok + s0, s0, len, xj, ew));
        if (a->o)
            SFX(put_rows)(a->o->x_emb, xj, s0, len, a->size, rank, h);
        KT_CHECK(FN(bsipipe_tp_chunk_forward)(d, &tp, c, 0, ls1, s0, len, ps + lo0, xj, xj,
                                              stash[j], kv, work));
        KT_CHECK(FN(bsipipe_tp_chunk_forward)(d, &tp, c, ls1, L, s0, len, ps + lo1, xj, xj,
                                              stash[j] + ls1 * ss, kv + ls1 * kvs, work));
        if (a->o)
            SFX(put_rows)(a->o->x_out, xj, s0, len, a->size, rank, h);
        KT_CHECK(FN(bsipipe_tp_head_forward_backward)(d, &tp, c, ps + hoff, gs + hoff, len, xj,
                                                      a->tgt + s0, a->scale, &lj, dj, hw));
        loss += lj;
    }
    for (int j = k - 1; j >= 0; j--) {
        int s0 = a->st[j], len = a->st[j + 1] - s0;
        long ss = bsipipe_tp_stash_size(d, a->size, len);
        R *dj = dx + (size_t)s0 * h;
        KT_CHECK(FN(bsipipe_tp_chunk_backward)(d, &tp, c, ls1, L, s0, len, ps + lo1, gs + lo1,
                                               dj, dj, stash[j] + ls1 * ss, kv + ls1 * kvs,
                                               dkv + ls1 * kvs, work));
        KT_CHECK(FN(bsipipe_tp_chunk_backward)(d, &tp, c, 0, ls1, s0, len, ps + lo0, gs + lo0,
                                               dj, dj, stash[j], kv, dkv, work));
        if (a->o)
            SFX(put_rows)(a->o->dx_in, dj, s0, len, a->size, rank, h);
        KT_CHECK(FN(bsipipe_tp_embed_backward)(d, &tp, c, gs, a->tok + s0, s0, len, dj, ew));
    }
    /* replicated tensors (norms, wpe): sum of the ranks' token slices */
    for (int part = -1; part <= L; part++) {
        long off = part < 0 ? 0 : bsipipe_tp_layer_offset(d, a->size, part);
        KT_CHECK(FN(bsipipe_tp_reduce_replicated)(d, &tp, c, part, gs + off));
    }
    a->cpu[rank] = SFX(thread_cpu)() - t0;
    a->loss[rank] = loss;
    for (int j = 0; j < k; j++)
        free(stash[j]);
    free(stash); free(ps); free(kv); free(dkv); free(work); free(ew); free(hw); free(x);
    free(dx);
    return 0;
}

/* size 0: the unsharded kernels (one chunk [0, L), as bsipipe_model_sequence);
 * size >= 1: the TP kernels. Fills o (loss, activations, grads) if o != NULL;
 * returns the CPU seconds (summed over ranks). */
static double SFX(run)(const bsipipe_model_dims_t *d, int size, const R *p, const int *tok,
                       const int *tgt, int k, const int *st, struct tp_out *o)
{
    int S = d->seq_len, h = d->hidden, L = d->n_layers;
    long n = bsipipe_model_params(d);
    double scale = 1.0 / S, cpu = 0;
    R *g = kt_alloc(sizeof(R) * n);
    if (size == 0) {
        long l0 = bsipipe_model_layer_offset(d, 0), hoff = bsipipe_model_layer_offset(d, L);
        long kv = L * bsipipe_model_kv_size(d), ss = L * bsipipe_model_stash_size(d, S);
        R *x = kt_alloc(sizeof(R) * S * h), *dxl = kt_alloc(sizeof(R) * S * h);
        R *kvb = kt_alloc(sizeof(R) * kv), *dkv = kt_alloc(sizeof(R) * kv);
        R *stash = kt_alloc(sizeof(R) * ss * k);
        R *work = kt_alloc(sizeof(R) * bsipipe_model_work_size(d, S));
        R *hw = kt_alloc(sizeof(R) * bsipipe_model_head_work_size(d, S));
        double loss = 0, t0 = SFX(thread_cpu)();
        for (int j = 0; j < k; j++) {
            int s0 = st[j], len = st[j + 1] - s0;
            R *xj = x + (size_t)s0 * h;
            double lj;
            KT_CHECK(FN(bsipipe_embed_forward)(d, p, tok + s0, s0, len, xj));
            if (o)
                SFX(put_rows)(o->x_emb, xj, s0, len, 1, 0, h);
            KT_CHECK(FN(bsipipe_chunk_forward)(d, 0, L, s0, len, p + l0, xj, xj,
                                               stash + j * ss, kvb));
            if (o)
                SFX(put_rows)(o->x_out, xj, s0, len, 1, 0, h);
            KT_CHECK(FN(bsipipe_head_forward_backward)(d, p + hoff, g + hoff, len, xj,
                                                       tgt + s0, scale, &lj,
                                                       dxl + (size_t)s0 * h, hw));
            loss += lj;
        }
        for (int j = k - 1; j >= 0; j--) {
            int s0 = st[j], len = st[j + 1] - s0;
            R *dj = dxl + (size_t)s0 * h;
            KT_CHECK(FN(bsipipe_chunk_backward)(d, 0, L, s0, len, p + l0, g + l0, dj, dj,
                                                stash + j * ss, kvb, dkv, work));
            if (o)
                SFX(put_rows)(o->dx_in, dj, s0, len, 1, 0, h);
            KT_CHECK(FN(bsipipe_embed_backward)(d, g, tok + s0, s0, len, dj));
        }
        cpu = SFX(thread_cpu)() - t0;
        if (o)
            o->loss = loss;
        free(x); free(dxl); free(kvb); free(dkv); free(stash); free(work); free(hw);
    } else {
        long ns = bsipipe_tp_model_params(d, size);
        bsipipe_tp_local_t *loc;
        struct SFX(rank_args) a;
        memset(&a, 0, sizeof a);
        KT_CHECK(bsipipe_tp_local_create(size, &loc));
        a.d = d; a.size = size; a.k = k; a.l_split = L > 1 ? 1 : L;
        a.p = p; a.tok = tok; a.tgt = tgt; a.st = st; a.scale = scale;
        a.comm = bsipipe_tp_local_comm(loc);
        a.gs = kt_alloc(sizeof(R *) * size);
        a.loss = kt_alloc(sizeof(double) * size);
        a.cpu = kt_alloc(sizeof(double) * size);
        a.o = o;
        for (int r = 0; r < size; r++)
            a.gs[r] = kt_alloc(sizeof(R) * ns);
        KT_CHECK(bsipipe_tp_local_run(loc, SFX(rank_fn), &a));
        for (int r = 0; r < size; r++) {
            bsipipe_tp_t tp = {size, r};
            cpu += a.cpu[r];
            if (a.cpu[r] > tp_bench_max_rank)
                tp_bench_max_rank = a.cpu[r];
            /* after reduce_replicated every rank holds the same replicas */
            KT_CHECK(FN(bsipipe_tp_model_unshard)(d, &tp, a.gs[r], g, 0));
            if (o && a.loss[r] != a.loss[0])
                o->rank_mismatch++;
        }
        if (o) {
            bsipipe_tp_tensor_info_t *ti;
            int nt = bsipipe_tp_tensors(d, size, NULL, 0);
            ti = kt_alloc(sizeof *ti * nt);
            bsipipe_tp_tensors(d, size, ti, nt);
            for (int i = 0; i < nt; i++)
                if (ti[i].split == BSIPIPE_TP_REPLICATED)
                    for (int r = 1; r < size; r++)
                        if (memcmp(a.gs[r] + ti[i].offset, a.gs[0] + ti[i].offset,
                                   sizeof(R) * ti[i].rows * ti[i].cols))
                            o->rank_mismatch++;
            free(ti);
            o->loss = a.loss[0];
        }
        for (int r = 0; r < size; r++)
            free(a.gs[r]);
        free(a.gs); free(a.loss); free(a.cpu);
        bsipipe_tp_local_destroy(loc);
    }
    if (o)
        for (long i = 0; i < n; i++)
            o->grads[i] = g[i];
    free(g);
    return cpu;
}
