/* bsipipe_builder.h: schedules composed by a driver — built op by op with a
 * builder, or imported from JSON (docs/plan-json.md, "Importing a plan").
 *
 * A plan is the order of the compute ops (F, B and, where the backward is
 * split, W) on each device. Everything else is derived exactly as for the
 * planner's own schedules (bsipipe_schedule_create): the placement of the
 * chunks and the subsequence partition from the parallel config and the
 * model, the SEND/RECV pairs and their order from the config's comm order,
 * then the gradient SYNC and the STEP; and the result is validated. So a
 * hand-built plan is refused with the validator's own sentences: an op out
 * of range, on the wrong device for its chunk, duplicated, missing, a
 * dependency never satisfied in list order, a deadlock.
 *
 * The config's `schedule` names the family the plan belongs to, which fixes
 * the placement and the op kinds (bsipipe_schedule_kind_traits): sequential
 * or interleaved chunks on one pipe (gpipe, 1f1b, 1f1b-i, zb-h1, terapipe,
 * seq1f1b, seq1f1b-i), two opposing pipes (chimera), two V-shaped pipes
 * (bsipipe, bitpipe); W ops only for zb-h1. The order is the caller's. The
 * config must pass bsipipe_parallel_config_validate() like a preset's.
 *
 * Ownership: the builder is an opaque handle (create/destroy); the schedule
 * returned by finish or import belongs to the caller, who frees it with
 * bsipipe_schedule_destroy(). Errors are negative codes with a sentence in
 * bsipipe_error_detail().
 */
#ifndef BSIPIPE_BUILDER_H
#define BSIPIPE_BUILDER_H

#include "graph/bsipipe_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_builder bsipipe_builder_t;

/* Starts an empty plan of pc for a model (dims NULL: the nominal model of
 * bsipipe_schedule_create, one layer per chunk). BSIPIPE_ECONFIG when the
 * config breaks a rule (the sentence names it), -ENOMEM. */
int bsipipe_builder_create(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                           bsipipe_builder_t **out);
void bsipipe_builder_destroy(bsipipe_builder_t *b); /* NULL is fine */

/* The placement of the plan being built, as a schedule whose op lists hold
 * the ops appended so far: ask it bsipipe_schedule_chunk_device(),
 * bsipipe_schedule_mb_pipe(), bsipipe_schedule_n_chunks() ... to know where
 * an op goes. Owned by the builder, valid until finish or destroy; NULL
 * after finish. */
const bsipipe_schedule_t *bsipipe_builder_placement(const bsipipe_builder_t *b);

/* Appends a compute op (kind F, B or W) of (pipe, mb, sub, chunk) to the end
 * of `device`'s list: each device runs its list in order. Checked at once:
 * -EINVAL when the device, kind or indices are out of range, W where the
 * backward is not split, the pipe is not the micro-batch's
 * (bsipipe_schedule_mb_pipe), placement puts the chunk on another device
 * ("runs on device 1, placement says device 0"), or the op was already
 * appended ("appears twice"). The builder is unchanged on error. -ENOMEM;
 * -EINVAL after finish. */
int bsipipe_builder_append(bsipipe_builder_t *b, int device, bsipipe_op_kind_t kind, bsipipe_pipe_t pipe, int mb,
                           int sub, int chunk);

/* The same with an op's fields (kind, device, pipe, mb, sub, chunk; the
 * others are ignored): e.g. the compute ops of another schedule's lists.
 * SEND, RECV, SYNC and STEP are refused (-EINVAL): they are derived. */
int bsipipe_builder_append_op(bsipipe_builder_t *b, const bsipipe_op_t *op);

/* Ops appended to `device` so far (-EINVAL for a bad device). */
int bsipipe_builder_n_ops(const bsipipe_builder_t *b, int device);

/* Finishes the plan: every compute op must be there ("compute op F down mb3
 * s0 c1 is missing from every device (it belongs on device 1)", -EINVAL),
 * every op's inputs must be produced earlier in list order
 * (BSIPIPE_EDEPEND: "device 1 cannot run op 0 (F down mb0 s0 c1): a
 * dependency is never satisfied in list order"); then the transfers are
 * inserted in the config's comm order, SYNC and STEP appended, and the
 * schedule validated (BSIPIPE_EDEADLOCK names the cycle, e.g. under
 * --comm naive). On success *out is the schedule. Whatever the outcome the
 * builder is spent: only bsipipe_builder_destroy() may follow. */
int bsipipe_builder_finish(bsipipe_builder_t *b, bsipipe_schedule_t **out);

/* ---- JSON import (docs/plan-json.md) ----
 *
 * Reads a plan in the format `bsipipe-plan/1`: the planner's own output
 * (bsipipe-plan --format json, bsipipe_export_json) or a smaller
 * hand-written file. Required: "format", "config" (schedule, w, p, k, m;
 * optional tp, partition, comm, concat, n_s checked against m*k) and "ops",
 * the compute ops in execution order per device ({"device", "kind", "mb",
 * "chunk"}, "sub" unless k = 1, optional "pipe" and "index", both checked).
 * Optional: "model" (layers, hidden, heads, seq_len; family gpt, ffn
 * 4*hidden, vocab 256 by default); without it the model is `dims` (NULL:
 * the nominal model). SEND, RECV, SYNC and STEP ops and the simulated
 * times are ignored: transfers are derived again, in the config's comm
 * order, and the result is validated (bsipipe_builder_finish).
 * Errors name the file, the op and the field: BSIPIPE_EFORMAT for malformed
 * JSON ("plan.json:3:14: ..."), a missing or mistyped field ("plan.json:
 * ops[17]: missing field \"chunk\""), an unknown kind or name ("plan.json:
 * ops[17]: unknown kind \"X\""); BSIPIPE_ECONFIG for a config that breaks a
 * rule; -EINVAL / BSIPIPE_EDEPEND / BSIPIPE_EDEADLOCK for a plan the
 * builder refuses, prefixed with the file and, for an op refused when
 * appended, "ops[N]"; -ENOENT etc. when the file cannot be read. */
int bsipipe_schedule_import_json(const char *path, const bsipipe_model_dims_t *dims, bsipipe_schedule_t **out);

/* The same from a string; `name` stands for the file in messages (NULL:
 * "<string>"). */
int bsipipe_schedule_import_json_string(const char *text, const char *name, const bsipipe_model_dims_t *dims,
                                        bsipipe_schedule_t **out);

/* Both in one, with what the file held: text NULL reads the file `path`;
 * otherwise text is parsed and `path` names it in messages. info (may be
 * NULL) says whether the file had a "model" (else `dims` was used) and how
 * many SEND/RECV/SYNC/STEP ops it ignored: for drivers that check explicit
 * flags against the file. */
typedef struct bsipipe_import_info {
    int has_model;    /* 1: the model came from the file */
    long ignored_ops; /* SEND, RECV, SYNC, STEP entries skipped */
    long compute_ops; /* F, B, W entries read */
    long comm_ops;    /* torch CSV: SEND/RECV actions, checked against the plan's transfers */
} bsipipe_import_info_t;
int bsipipe_schedule_import_json_ex(const char *path, const char *text, const bsipipe_model_dims_t *dims,
                                    bsipipe_schedule_t **out, bsipipe_import_info_t *info);

/* ---- torch.distributed.pipelining's action CSV ----
 *
 * Reads a per-rank action CSV as torch's _dump_csv writes it (or
 * bsipipe-plan --format torch-csv): row r is rank r's actions in order, a
 * cell "{stage}{F|I|B|W}{mb}" (stage = chunk), "(a;b)OVERLAP_F_B" its two
 * actions in sequence, an empty cell an empty slot; UNSHARD, RESHARD and
 * REDUCE_GRAD are skipped (info->ignored_ops). Transfers are derived again;
 * a compute_comms file's SEND_F/RECV_F/SEND_B/RECV_B (info->comm_ops) must
 * be exactly those, each send after its producer and each receive before its
 * consumer on the rank's row. The config comes from the actions: w = rows,
 * p = stages / w, m = largest micro-batch + 1, k = 1; a V placement (stage s
 * and 2w-1-s on rank s) is zb-v (every backward split: a B becomes B then
 * W), a looped one 1f1b, zb-h1 (I/W present), 1f1b-i (p > 1) or zb-i (p > 1,
 * I/W present). The model
 * is `dims`. Errors: BSIPIPE_EFORMAT naming the line and column of a
 * malformed action, a placement bsipipe lacks, a file that is not regular
 * or is over 64 MiB; the builder's errors prefixed with the file and the
 * action; -errno when it cannot be opened. bsipipe_schedule_import_json_ex
 * reads a path ending in ".csv" with this. */
int bsipipe_schedule_import_torch_csv(const char *path, const bsipipe_model_dims_t *dims, bsipipe_schedule_t **out,
                                      bsipipe_import_info_t *info);

#ifdef __cplusplus
}
#endif
#endif
