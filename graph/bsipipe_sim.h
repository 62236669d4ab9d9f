/* bsipipe_sim.h: discrete-event simulation of a schedule under a cost model.
 *
 * The execution model is the engine's: every device runs its op list in
 * order; a RECV posts a buffer and the device goes on, and under early
 * receive it is posted ahead (bsipipe_sim_recv_ahead); a SEND blocks its
 * device until the matching RECV is posted, then occupies it for the transfer
 * time; a SYNC waits for the other replica's SYNC (all-reduce); compute ops
 * wait for their inputs. With cost->blocking_recv a RECV also blocks its
 * device until the data has arrived. A schedule that cannot finish under
 * these rules is reported as a deadlock naming the cycle of waiting devices.
 */
#ifndef BSIPIPE_SIM_H
#define BSIPIPE_SIM_H

#include "graph/bsipipe_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bsipipe_cost_model {
    int unit;               /* 1: F, B, W cost f_unit, b_unit, w_unit per op;
                               0: FLOPs of the op / device_flops */
    double f_unit, b_unit, w_unit;
    double device_flops;    /* FLOP/s of one device (FLOPs mode) */
    double bytes_per_element; /* activations and gradients moved (4: fp32) */
    double intra_latency, intra_bandwidth; /* seconds, bytes/s; bandwidth 0 = free */
    double inter_latency, inter_bandwidth;
    double step_time;       /* optimizer step per device */
    int devices_per_node;   /* link class of a device pair: same node or not; 0 = one node */
    const int *device_node; /* optional: node of each device (overrides devices_per_node);
                               borrowed, must outlive the simulation call */
    int async_send;         /* 0: a SEND holds its device while its bytes move (the CPU
                               engine's copy); 1: only until the RECV is posted, the bytes
                               then move on the device's outgoing link (one transfer at a
                               time per link class) while it computes (NCCL/MPI-like) */
    int shared_nic;         /* 1: every device of a node shares one inter-node link (a
                               server's NIC): its inter-node transfers, gradient syncs
                               included, go one at a time */
    int blocking_recv;      /* 0: a RECV posts its buffer and the device goes on (the
                               engine's model); 1: a RECV blocks its device until the
                               data has arrived (rendezvous both ways, a transport that
                               cannot post ahead) */
    int recv_in_place;      /* 1: a posted RECV is posted where it stands in the list,
                               not ahead of the compute op before it (the engine's
                               bsipipe_engine_options.recv_in_place; the ablation) */
    int free_transfers;     /* 1: SEND and SYNC move their bytes at no cost while the
                               tensor-parallel collectives keep their link class's
                               charge (the engine's --emulate: its transfers are real
                               copies, its collectives emulated) */
    const double *op_seconds; /* optional: measured time of each compute op, by
                               bsipipe_sim_op_slot (F, B and W of each piece and chunk,
                               the same for every micro-batch and pipe), overriding the
                               unit and FLOPs costs of compute ops; from a run, e.g.
                               bsipipe_engine_op_seconds. Borrowed: must outlive the
                               calls that use the model */
    const double *op_replay; /* optional: every compute op's own duration, by
                               bsipipe_sim_op_index, overriding op_seconds and the
                               unit and FLOPs costs: a run replayed
                               (bsipipe_engine_op_durations). Borrowed, like op_seconds */
    double piece_half_tokens; /* FLOPs costs: 0, every FLOP at device_flops whatever the
                               piece's length; n > 0, an op on a piece of len tokens runs
                               at len / (len + n) of it (Hockney's half-performance
                               length: the per-call work that does not shrink with the
                               piece, such as packing a weight or launching a kernel;
                               docs/schedules.md, "Choosing k") */
    int sync_free;          /* 1: a SYNC of replicas moves its bytes at no cost (to
                               measure what the syncs add to an iteration) */
    int sync_reduce_back;   /* 1: a SYNC of replicas on two nodes sends the gradient one
                               way and the sum back (the StarPU-MPI engine's); 0: both
                               ways at once (a two-rank ring all-reduce, NCCL; one
                               process) */
    double overlap_fb;      /* DualPipe's overlapped F&B pairs (BSIPIPE_OP_PAIR_F/B): 0 or
                               1, the halves in sequence, each as soon as its own input
                               is there (as torch runs a pair by default); x in (0, 1),
                               the two halves share the device: the pair starts when
                               both inputs are there and its ops take x times their
                               costs (e.g. 0.6 where communication and compute of the
                               two halves overlap) */
} bsipipe_cost_model_t;

/* Measured op times (cost->op_seconds): the slot of compute op `op` and the
 * number of slots of s, 3 (F, B, W) x pieces x chunks. */
int bsipipe_sim_op_slot(const bsipipe_schedule_t *s, const bsipipe_op_t *op);
int bsipipe_sim_op_slots(const bsipipe_schedule_t *s);

/* A replayed run (cost->op_replay): the index of compute op `op` (one per
 * F, B and W of each micro-batch, piece and chunk) and the number of
 * indices of s, 3 x m x pieces x chunks. */
long bsipipe_sim_op_index(const bsipipe_schedule_t *s, const bsipipe_op_t *op);
long bsipipe_sim_op_count(const bsipipe_schedule_t *s);

/* Posting ahead: how many places before its own the RECV at index i of
 * device d is posted. A post never blocks, so under early receive (comm
 * orders bsipipe and no-reversal) a device posts a RECV when it reaches the
 * compute op before it, before that op starts: a neighbour's send then
 * need not wait for the op to end. bsipipe: two compute ops back, over the
 * transfers between (the sends stay where they are: only receives move, so
 * any plan that cannot deadlock with receives in place cannot with them
 * ahead), so that a device running up to an op behind the plan's timeline
 * still posts before its neighbour sends; no-reversal: the last compute op
 * before it, over receives only (its sends-before-receives order at a
 * boundary is the point of that ablation). 0 with ordered and naive (no early
 * receive), blocking receives, c->recv_in_place, for any op but a RECV, and
 * when nothing but transfers precede it (at most BSIPIPE_SIM_MAX_AHEAD). */
#define BSIPIPE_SIM_MAX_AHEAD 63
int bsipipe_sim_recv_ahead(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *c, int d, int i);

/* Unit costs of the paper's analysis: F = 1, B = 2 per subsequence and chunk
 * (B = W = 1 when the backward is split), free transfers and step. */
bsipipe_cost_model_t bsipipe_cost_model_unit(void);

/* Costs from FLOPs: a device of `device_flops` FLOP/s, intra-node links of
 * 300 GB/s / 5 us, inter-node 25 GB/s / 10 us, fp32 tensors. */
bsipipe_cost_model_t bsipipe_cost_model_flops(double device_flops);

/* The engine's emulated devices (--emulate, docs/tensor-parallel.md): an
 * F/B/W op holds its device for its FLOPs / device_flops, a tensor-parallel
 * collective for its charge over the links of bsipipe_cost_model_flops
 * (intra-node unless devices_per_node puts a TP group across nodes);
 * pipeline transfers, SYNC and STEP free (the engine really copies the
 * first, skips the others). The prediction an emulated run is measured
 * against. */
bsipipe_cost_model_t bsipipe_cost_model_emulated(double device_flops);

typedef struct bsipipe_sim_device {
    double busy;             /* time in F/B/W */
    double comm;             /* time blocked in or moving data for SEND, SYNC and blocking RECV */
    double idle;             /* makespan - busy */
    double compute_end;      /* end of the device's last compute op */
    int peak_act_units;      /* most subsequence-chunk activations held at once (M_a) */
    double peak_act_bytes;   /* same, in bytes: stash + KV cache and its gradient */
    double param_units;      /* parameter memory in units of M_Θ (one stage) */
    double param_bytes;      /* weights, gradients, two AdamW moments (fp32) */
    double tp_comm;          /* part of busy spent in tensor-parallel collectives (D_t > 1, FLOPs costs) */
} bsipipe_sim_device_t;

typedef struct bsipipe_sim_result {
    int n_devices;
    double makespan;         /* end of the last compute op */
    double iteration_time;   /* end of the last op (after SYNC and STEP) */
    double bubble_ratio;     /* 1 - sum(busy) / (n_devices * makespan) */
    bsipipe_sim_device_t *device;         /* [n_devices] */
    double act_bytes[2];     /* activations/gradients moved: [0] intra-node, [1] inter-node */
    double sync_bytes[2];    /* gradient sync traffic, same classes */
    double tp_bytes[2];      /* tensor-parallel collectives, bytes each TP rank sends, summed
                                over the pipeline devices: [1] when a TP group spans nodes */
    double **op_start, **op_end; /* [device][op index], aligned with the op lists */
    long n_order;            /* every op once, in an order that respects all dependencies */
    int *order_device, *order_index; /* (the simulator's resolution order: a valid
                                        submission order for a runtime with sequential
                                        data consistency) */
} bsipipe_sim_result_t;

/* Simulates s. On success *out is a result the caller frees with
 * bsipipe_sim_result_destroy(). Errors: BSIPIPE_EDEADLOCK (detail names the
 * cycle of waiting devices and ops), BSIPIPE_EDEPEND, -ENOMEM, -EINVAL. */
int bsipipe_simulate(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost,
                     bsipipe_sim_result_t **out);
void bsipipe_sim_result_destroy(bsipipe_sim_result_t *r);

/* The plan under op-time noise: every compute op's duration drawn as its
 * cost under `cost` times an independent lognormal factor of mean 1 and
 * coefficient of variation cv (measured ops spread like that on a shared
 * machine: docs/schedules.md, "Op-time noise"), simulated `samples` times
 * from `seed` (the same seed, the same numbers). Makespans and bubbles as
 * bsipipe_simulate's; the noiseless ones for reference. cv = 0 gives the
 * noiseless plan in every sample. Errors: -EINVAL (cv outside
 * 0..BSIPIPE_SIM_NOISE_MAX_CV, samples outside 1..BSIPIPE_SIM_NOISE_MAX_SAMPLES,
 * NULL), those of bsipipe_simulate (a deadlock, before any sample), -ENOMEM. */
typedef struct bsipipe_sim_noise {
    double cv;
    int samples;
    double noiseless_makespan, noiseless_bubble;
    double mean_makespan, p90_makespan; /* p90: the 90th percentile (nearest rank) */
    double mean_bubble, p90_bubble;
} bsipipe_sim_noise_t;
#define BSIPIPE_SIM_NOISE_MAX_CV 2.0
#define BSIPIPE_SIM_NOISE_MAX_SAMPLES 100000
int bsipipe_simulate_noise(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, double cv, int samples,
                           unsigned long long seed, bsipipe_sim_noise_t *out);

/* Choosing k, the pieces a sequence is cut into (docs/schedules.md,
 * "Choosing k"): pc planned and simulated under `cost` (FLOPs costs; unit
 * costs are refused: they charge a piece like a whole sequence) at every k
 * in 1..BSIPIPE_CHOOSE_K_MAX the config allows (k = 1 alone for schedules
 * that do not cut sequences). out->k: among the k whose largest device
 * holds at most act_budget_bytes of activations (0: no budget), those
 * predicted within BSIPIPE_CHOOSE_K_TIE of the fastest, the one holding the
 * least (then the fewer pieces). Every k
 * tried is in out->tried, with its prediction (rc < 0: it did not plan).
 * Errors: -ENOSPC when no k fits the budget (detail: the least memory and
 * its k), BSIPIPE_EDEADLOCK from the plan, -EINVAL, -ENOMEM. */
#define BSIPIPE_CHOOSE_K_MAX 16
#define BSIPIPE_CHOOSE_K_TIE 0.001 /* 0.1%: below what a prediction can tell apart */
typedef struct bsipipe_k_candidate {
    int k, rc;
    int fits;               /* within the budget */
    double iteration_time;  /* predicted, seconds */
    double bubble_ratio;
    double peak_act_bytes;  /* the largest device's */
} bsipipe_k_candidate_t;
typedef struct bsipipe_k_choice {
    int k;                  /* the choice */
    int chosen;             /* its index in tried */
    int fastest;            /* index in tried of the fastest k, budget aside */
    int n_tried;
    bsipipe_k_candidate_t tried[BSIPIPE_CHOOSE_K_MAX];
} bsipipe_k_choice_t;
int bsipipe_schedule_choose_k(const bsipipe_parallel_config_t *pc, const bsipipe_model_dims_t *dims,
                              const bsipipe_cost_model_t *cost, double act_budget_bytes, bsipipe_k_choice_t *out);

/* The links of a cost model and their clocks (graph/sim_links.c says the
 * model): the simulator's transfers and the emulated engine's
 * (bsipipe_engine_options.emulate_links) take their time from here, so the
 * two describe one cluster. Not thread safe; the engine locks around it.
 * create copies the model (and its device_node map); -EINVAL, -ENOMEM. */
typedef struct bsipipe_links bsipipe_links_t;
int bsipipe_links_create(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, bsipipe_links_t **out);
void bsipipe_links_destroy(bsipipe_links_t *links); /* NULL is fine */
void bsipipe_links_reset(bsipipe_links_t *links);   /* every link free at time 0 */
/* 1 when devices a and b are on two nodes. */
int bsipipe_links_inter(const bsipipe_links_t *links, int a, int b);
/* Seconds to move `bytes` from a to b on a free link. */
double bsipipe_links_time(const bsipipe_links_t *links, int a, int b, double bytes);
/* Moves `bytes` from a to b, ready at `ready` seconds: the arrival, after
 * any wait for a shared link (which it then holds until the arrival). */
double bsipipe_links_move(bsipipe_links_t *links, int a, int b, double bytes, double ready);
/* The gradient SYNC of replicas on a and b, `bytes` each, ready at `ready`:
 * when both hold the sum. */
double bsipipe_links_sync(bsipipe_links_t *links, int a, int b, double bytes, double ready);

/* Cost (seconds or units) of one compute op under a cost model. */
double bsipipe_sim_op_cost(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost,
                           const bsipipe_op_t *op);

/* Time (and *bytes, each TP rank's share, when bytes is not NULL) of the
 * tensor-parallel collectives of compute op `op` under FLOPs costs: Megatron
 * TP with sequence parallelism, 4 all-gather/reduce-scatter per layer in F,
 * 6 in B (docs/schedules.md). 0 under unit costs or D_t = 1. Included in
 * bsipipe_sim_op_cost. */
double bsipipe_sim_tp_comm(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, const bsipipe_op_t *op,
                           double *bytes);
/* 1 when a TP group of s spans nodes (D_t above the GPUs per node). */
int bsipipe_sim_tp_crosses_nodes(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost);

/* Each op's remaining critical path: the longest chain of compute costs
 * under `cost` (NULL: unit costs) from the op's start to the end of the
 * iteration's compute, through data dependencies only (not the devices' list
 * order), its own cost included. A SEND or RECV gets the path of the op its
 * data feeds (transfers themselves cost nothing here), SYNC 0, STEP the step
 * time. On success *out is one array, the devices' op lists one after the
 * other (device 0's ops, then device 1's, ...), that the caller frees with
 * free(). Errors: those of bsipipe_simulate, -EINVAL, -ENOMEM. */
int bsipipe_schedule_critical_path(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost, double **out);

/* Validates a schedule: every compute op exactly once, SEND/RECV paired on
 * one channel with matching devices, every dependency satisfiable in list
 * order, and no deadlock under rendezvous send/recv. 0 or a negative code
 * with a detail sentence. Transfer errors are named: "sends before its
 * producer" (a SEND ahead of the op making its data), "names the wrong peer"
 * (either end), "label differs from its SEND" (a RECV's micro-batch,
 * subsequence, chunk, tensor or pipe). */
int bsipipe_schedule_validate(const bsipipe_schedule_t *s);

/* The same checks, with the dependency and deadlock simulation run under
 * `cost` (NULL: unit costs): with cost->blocking_recv set it proves the plan
 * deadlock-free when receives block too, or names the cycle. */
int bsipipe_schedule_validate_ex(const bsipipe_schedule_t *s, const bsipipe_cost_model_t *cost);

/* Closed-form bubble ratio of the schedule's configuration under unit costs
 * (docs/schedules.md derives each): F = 1, B = 2 (split backward: B = W = 1;
 * zb-v and dualpipev (w-1)/(6N+w-1), dualpipe (w/2-1)/(3N+w/2-1), seq-zbv
 * (w-1)/(6N_s+w-1) as a bound, bsipipe-zb
 * floor((w-1)/2)/(6N_s+floor((w-1)/2)), the floor its plans meet), except
 * Chimera's, which holds for F = B and m >= w: (w-2)/(2N+w-2) for even w,
 * (w-1)/(2N+w-1) for odd w. For BSIPipe it is the paper's formula, an upper
 * bound. Negative if none is known. */
double bsipipe_bubble_closed_form(const bsipipe_parallel_config_t *pc);

#ifdef __cplusplus
}
#endif
#endif
