/* bsipipe_layout.h: which layers each chunk holds.
 *
 * A plan cuts the model into p·w chunks along its data path (chunk 0 takes
 * the tokens, chunk p·w-1 computes the loss); a layout gives each chunk a
 * contiguous range of the L transformer layers. The embedding always sits
 * in chunk 0 and the LM head (with the loss) in the last chunk, since the
 * data enters and leaves there; a layout places them by counting them in
 * its chunks' costs.
 *
 * A layout is written as Megatron-LM's --pipeline-model-parallel-layout
 * string, one stage per chunk in data order:
 *
 *     layout := item*            stages separated by '|'
 *     item   := atom ('*' N)?    N in 1..65536 repeats the atom
 *     atom   := 'E' | 't' | 'L' | '|' | '(' layout ')'
 *
 * E is the embedding, t one transformer layer, L the loss (the head); ','
 * and blanks are ignored. E must open the first stage and L close the last,
 * each once; every stage holds at least one t (bsipipe's chunks are never
 * empty); the stages number p·w and the t's number L. Megatron's "m" (MTP
 * layers) is refused. Example, 30 layers on 8 chunks with a costly head:
 * "Et*4|(t*4|)*6t*2L".
 *
 * bsipipe_parallel_config_t.layout holds such a string, or "auto" (the
 * split bsipipe_layout_auto computes), or NULL for L/(p·w) layers each. */
#ifndef BSIPIPE_LAYOUT_H
#define BSIPIPE_LAYOUT_H

#include <stddef.h>

#include "kernels/bsipipe_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses `text` for a plan of n_chunks chunks over n_layers layers into
 * counts[0..n_chunks) (caller-owned). 0, or BSIPIPE_ECONFIG with a sentence
 * naming the 1-based character position of the error and what was
 * expected; counts is then unspecified. */
int bsipipe_layout_parse(const char *text, int n_chunks, int n_layers, int *counts);

/* The head's cost in layers: its FLOPs over a transformer layer's, both
 * over the whole sequence (0 for dimensions the FLOPs model refuses). */
double bsipipe_layout_head_layers(const bsipipe_model_dims_t *d);

/* Cost of one chunk's forward and backward under the FLOPs model, in
 * layers: a transformer layer costs 1, the head its FLOPs over a layer's
 * (both over the whole sequence; the engine runs the head's forward and
 * backward inside the last chunk's forward), the embedding 0 (a gather).
 * The cost model the simulator uses for an F and a B, summed. */
double bsipipe_layout_chunk_cost(const bsipipe_model_dims_t *d, const int *counts, int n_chunks, int chunk);

/* The split of d->n_layers layers over n_chunks chunks (each at least one)
 * whose slowest chunk is as cheap as possible under
 * bsipipe_layout_chunk_cost; among those, the earlier chunks (which hold
 * the most activations in every schedule) get fewer layers. Into
 * counts[0..n_chunks). 0, or BSIPIPE_ECONFIG (fewer layers than chunks),
 * -ENOMEM. */
int bsipipe_layout_auto(const bsipipe_model_dims_t *d, int n_chunks, int *counts);

/* Moves layers between neighbouring chunks of counts[0..n_chunks) while
 * that lowers the slowest device's cost (ties: the slowest chunk's), a
 * device's cost being the sum over pipes of its chunks' costs;
 * chunk_dev[pipe * n_chunks + c] is the device of chunk c in each of the
 * n_pipes pipes. Every chunk keeps one layer or more. A local search, from
 * bsipipe_layout_auto's split: where a device holds several chunks (both
 * pipes, both arms of a V, interleaving) the slowest chunk is not the
 * slowest device. Skipped (0) above 1024 chunks. 0 or -ENOMEM. */
int bsipipe_layout_balance_devices(const bsipipe_model_dims_t *d, int *counts, int n_chunks, const int *chunk_dev,
                                   int n_pipes, int n_devices);

/* Slowest chunk's cost over the mean chunk's: 1 is perfect balance. */
double bsipipe_layout_imbalance(const bsipipe_model_dims_t *d, const int *counts, int n_chunks);

/* Writes the layout string of counts (runs of equal middle stages folded,
 * "(t*4|)*6") into buf; returns buf, or NULL if len is too small. The
 * string parses back to counts. */
char *bsipipe_layout_format(const int *counts, int n_chunks, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
