/* tasks/transport/transport.c: the table of transports (transport.h), the
 * choice of one per op, and the hooks around an iteration. */
#include "tasks/transport/transport.h"

/* Asked in this order: the first that carries an op moves it; the last
 * (local, with no carries function) takes whatever is left. A new
 * transport is one line here. */
static const engine_transport_t *const transports[] = {
    &engine_transport_mpi,
    &engine_transport_nccl,
    &engine_transport_local,
};
enum { N_TRANSPORTS = sizeof transports / sizeof transports[0] };

const engine_transport_t *engine_transport_for(const struct bsipipe_engine *e, int d, const bsipipe_op_t *op)
{
    int k = 0;
    while (k < N_TRANSPORTS - 1 && !(transports[k]->carries && transports[k]->carries(e, d, op)))
        k++;
    return transports[k];
}

int engine_insert_send(engine_insert_t *t)
{
    return t->a->transport->insert_send(t);
}

int engine_insert_recv(engine_insert_t *t)
{
    return t->a->transport->insert_recv(t);
}

int engine_insert_sync(engine_insert_t *t)
{
    return t->a->transport->insert_sync(t);
}

void engine_transports_begin(struct bsipipe_engine *e)
{
    for (int k = 0; k < N_TRANSPORTS; k++)
        if (transports[k]->iteration_begin)
            transports[k]->iteration_begin(e);
}

void engine_transports_abort(struct bsipipe_engine *e, const char *why)
{
    for (int k = 0; k < N_TRANSPORTS; k++)
        if (transports[k]->iteration_abort)
            transports[k]->iteration_abort(e, why);
}

int engine_transports_wait(struct bsipipe_engine *e, int rc)
{
    for (int k = 0; k < N_TRANSPORTS; k++)
        if (transports[k]->iteration_wait)
            rc = transports[k]->iteration_wait(e, rc);
    return rc;
}

void engine_transports_end(struct bsipipe_engine *e)
{
    for (int k = 0; k < N_TRANSPORTS; k++)
        if (transports[k]->iteration_end)
            transports[k]->iteration_end(e);
}

int engine_transports_norm_exchange(struct bsipipe_engine *e, int c, int owned)
{
    int rc = 0;
    for (int k = 0; k < N_TRANSPORTS && rc == 0; k++)
        if (transports[k]->norm_exchange)
            rc = transports[k]->norm_exchange(e, c, owned);
    return rc;
}

void engine_transports_traffic(struct bsipipe_engine *e, double act[2], double sync[2])
{
    for (int k = 0; k < N_TRANSPORTS; k++)
        if (transports[k]->traffic)
            transports[k]->traffic(e, act, sync);
}
