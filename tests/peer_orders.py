#!/usr/bin/env python3
"""peer_orders.py: the peers' own op orders, written from their sources, as
torch.distributed.pipelining's per-rank action CSV (one row per rank, cells
"{stage}{F|I|W}{microbatch}"), for tests/test_peer_orders.sh to compare with
`bsipipe-plan --format torch-csv`.

  zb-v      torch's ScheduleZBVZeroBubble._calculate_single_rank_operations
            (sail-sg's handcrafted ZB-V): 2w-1 micro-batches at least, the
            slots of those past m left empty (None);
  dualpipev torch's ScheduleDualPipeV._calculate_single_rank_operations,
            op for op DeepSeek's dualpipev.py;
  zb-i      torch's ScheduleInterleavedZeroBubble._calculate_single_rank_operations
            and _get_1f1b_rank_ops(enable_zero_bubble=True): P stages per
            rank, looped (stage = chunk * W + rank), rounds of M / max(1, M // W)
            micro-batches; its _add_bubbles_to_actions only inserts empty
            slots, which the rows drop;
  1f1b-i    Megatron-LM's forward_backward_pipelining_with_interleaving
            (schedules.py: get_schedule_table, get_pp_rank_microbatches and
            its warmup / 1F1B / cooldown loops), P model chunks per rank,
            stage = chunk * W + rank, micro-batch groups of G
            (microbatch_group_size_per_vp_stage; the remainder M mod G must
            be 0 or at least W, as Megatron checks; G = 0: the smallest such
            G, which is what bsipipe plans);
  dualpipe  DeepSeek's DualPipe.step (dualpipe.py): two opposing pipes, rank r
            holding stage r of the one whose inputs enter at rank 0 ("down")
            and stage w-1-r of the other ("up"), half of the micro-batches
            each (the first half down); torch has no CSV for it, so its rows
            are written "{F|I|W}{d|u}{micro-batch}c{stage}" and compared with
            a bsipipe-plan --format json export (--json FILE writes that
            export's compute ops the same way).

Each function follows its source step by step (the same warmup counts and
loop bounds, named as there) so that it can be read beside it. The rows are
normalised as bsipipe writes a plan: empty slots dropped, a full backward
(type B) written as I then W, an overlapped pair as its two halves in order.
With --torch-notation, dualpipev is written as torch writes it instead (B for
a full backward, "(a;b)OVERLAP_F_B" for a pair): for W = 4, M = 10 that is
byte for byte torch's own test artifact dualpipev_4rank_10mb.csv.

With --comms, a compute_only CSV (bsipipe-plan --format torch-csv) gets
torch's SEND/RECV actions (_add_send_recv, over the rows with empty slots
dropped): the compute_comms listing.

usage: peer_orders.py [--torch-notation] zb-v|dualpipev|dualpipe W M | 1f1b-i W M P G | zb-i W M P | --json FILE | --comms looped|v FILE
"""
import sys


def zbv(pp, n_mb):
    """Rows of ScheduleZBVZeroBubble for pp ranks, n_mb micro-batches."""
    num_stages = 2 * pp
    count = max(2 * pp - 1, n_mb)
    rows = []
    for rank in range(pp):
        acts = [None] * rank
        f0 = f1 = b0 = b1 = 0
        s0, s1 = rank, num_stages - 1 - rank
        for _ in range(2 * (pp - rank) - 1):
            acts.append((s0, "F", f0)); f0 += 1
        for _ in range(rank):
            acts.append((s1, "F", f1)); f1 += 1
            acts.append((s0, "F", f0)); f0 += 1
        for _ in range(pp - rank):
            acts.append((s1, "F", f1)); f1 += 1
            acts.append((s1, "I", b1))
            acts.append((s1, "W", b1)); b1 += 1
        while f1 < f0 or f0 < count:
            if f0 < count:
                acts.append((s0, "F", f0)); f0 += 1
            acts.append((s0, "I", b0))
            acts.append((s0, "W", b0)); b0 += 1
            acts.append((s1, "F", f1)); f1 += 1
            acts.append((s1, "I", b1))
            acts.append((s1, "W", b1)); b1 += 1
        w0, w1 = b0, b1
        for _ in range(rank):
            acts.append((s0, "I", b0)); b0 += 1
            acts.append((s1, "I", b1)); b1 += 1
        for _ in range(pp - rank):
            acts.append((s0, "I", b0)); b0 += 1
            acts.append((s0, "W", w0)); w0 += 1
        while w1 < b1:
            acts.append((s1, "W", w1)); w1 += 1
        while w0 < b0:
            acts.append((s0, "W", w0)); w0 += 1
        assert w0 == b0 == f0 and w1 == b1 == f1
        # torch turns the actions of micro-batches past n_mb into None.
        rows.append([a for a in acts if a is not None and a[2] < n_mb])
    return rows


def dualpipev(num_ranks, num_chunks):
    """Rows of ScheduleDualPipeV for num_ranks ranks, num_chunks micro-batches."""
    assert num_chunks >= 2 * num_ranks, "DualPipeV needs n_microbatches >= stages"
    rows = []
    for rank in range(num_ranks):
        acts, counters, weight_queue = [], {}, []
        stage0, stage1 = rank, 2 * num_ranks - 1 - rank

        def full_backward(stage, into=None):
            mb = counters.get((stage, "I"), 0)
            (acts if into is None else into).append((stage, "B", mb))
            counters[(stage, "I")] = mb + 1
            counters[(stage, "W")] = counters.get((stage, "W"), 0) + 1

        def add(stage, kind):
            if kind == "B":
                full_backward(stage)
                return
            mb = counters.get((stage, kind), 0)
            acts.append((stage, kind, mb))
            if kind == "I":
                weight_queue.append((stage, mb))
            counters[(stage, kind)] = mb + 1

        def overlap(f_stage, b_stage):  # OVERLAP_F_B: (F of f_stage; B of b_stage)
            pair = []
            mb = counters.get((f_stage, "F"), 0)
            pair.append((f_stage, "F", mb))
            counters[(f_stage, "F")] = mb + 1
            full_backward(b_stage, pair)
            acts.append(tuple(pair))

        def weight_if_pending():
            if weight_queue:
                stage, mb = weight_queue.pop(0)
                acts.append((stage, "W", mb))
                counters[(stage, "W")] = counters.get((stage, "W"), 0) + 1

        for _ in range((num_ranks - rank - 1) * 2):          # step 1
            add(stage0, "F")
        for _ in range(rank + 1):                            # step 2
            add(stage0, "F")
            add(stage1, "F")
        for _ in range(num_ranks - rank - 1):                # step 3
            add(stage1, "I")
            weight_if_pending()
            add(stage1, "F")
        for index in range(num_chunks - num_ranks * 2 + rank + 1):  # step 4
            if index == 0 and rank == num_ranks - 1:
                add(stage0, "F")
                add(stage1, "B")
            else:
                overlap(stage0, stage1)
            overlap(stage1, stage0)
        for _ in range(num_ranks - rank - 1):                # step 5
            add(stage1, "B")
            overlap(stage1, stage0)
        step_6 = rank + 1                                    # step 6
        enable_zb = False
        for index in range(step_6):
            if index == step_6 // 2 and rank % 2 == 1:
                enable_zb = True
            add(stage1, "I" if enable_zb else "B")
            if index == step_6 // 2 and rank % 2 == 0:
                enable_zb = True
            add(stage0, "I" if enable_zb else "B")
        for _ in range(num_ranks - rank - 1):                # step 7
            weight_if_pending()
            add(stage0, "I" if enable_zb else "B")
        for _ in range(rank + 1):                            # step 8
            weight_if_pending()
        rows.append(acts)
    return rows


def dualpipe(num_ranks, num_chunks):
    """Rows of DualPipe.step for num_ranks ranks, num_chunks micro-batches:
    items (pipe, kind, mb-within-pipe, stage), B a full backward."""
    assert num_ranks % 2 == 0 and num_chunks % 2 == 0 and num_chunks >= 2 * num_ranks
    num_half_ranks, half_num_chunks = num_ranks // 2, num_chunks // 2
    rows = []
    for rank in range(num_ranks):
        half_rank = min(rank, num_ranks - 1 - rank)
        is_in_second_half = rank >= num_half_ranks
        f_id, b_id = [0, 0], [0, 0]  # current_f_chunk_id, current_b_chunk_id per module
        weights, acts = [], []       # WeightGradStore's FIFO; the rank's ops

        def stage(module):  # module 0: the down pipe's stage r; 1: the up pipe's w-1-r
            return rank if module == 0 else num_ranks - 1 - rank

        def forward(phase):
            module = phase ^ is_in_second_half
            acts.append((module, "F", f_id[module], stage(module)))
            f_id[module] += 1

        def backward(phase, enable_zb=False):
            module = phase ^ is_in_second_half
            mb = b_id[module]
            b_id[module] += 1
            acts.append((module, "I", mb, stage(module)))
            if enable_zb:
                weights.append((module, "W", mb, stage(module)))
            else:
                acts.append((module, "W", mb, stage(module)))

        def weight():
            acts.append(weights.pop(0))

        for _ in range((num_half_ranks - half_rank - 1) * 2):  # step 1: nF0
            forward(0)
        for _ in range(half_rank + 1):                         # step 2: nF0F1
            forward(0)
            forward(1)
        for _ in range(num_half_ranks - half_rank - 1):        # step 3: nB1W1F1
            backward(1, enable_zb=True)
            weight()
            forward(1)
        for _ in range(half_num_chunks - num_ranks + half_rank + 1):  # step 4: nF0B1F1B0
            forward(0)   # (0, 1) overlapped, or on the middle ranks' first
            backward(1)  # iteration one after the other: the same order
            forward(1)
            backward(0)
        for _ in range(num_half_ranks - half_rank - 1):        # step 5: nB1F1B0
            backward(1)
            forward(1)
            backward(0)
        step_6 = half_rank + 1                                 # step 6: nB1B0
        enable_zb = False
        for i in range(step_6):
            if i == step_6 // 2 and half_rank % 2 == 1:
                enable_zb = True
            backward(1, enable_zb=enable_zb)
            if i == step_6 // 2 and half_rank % 2 == 0:
                enable_zb = True
            backward(0, enable_zb=enable_zb)
        for _ in range(num_half_ranks - half_rank - 1):        # step 7: nWB0
            weight()
            backward(0, enable_zb=True)
        for _ in range(half_rank + 1):                         # step 8: nW
            weight()
        assert not weights
        rows.append(acts)
    return rows


def interleaved_zb(pp, n_mb, n_local):
    """Rows of ScheduleInterleavedZeroBubble for pp ranks, n_local stages each."""
    number_of_rounds = max(1, n_mb // pp)
    microbatches_per_round = n_mb // number_of_rounds
    if n_mb % number_of_rounds != 0:
        raise ValueError(f"M={n_mb} is not a multiple of the rounds ({number_of_rounds})")
    rows = []
    for rank in range(pp):
        # _get_warmup_ops(multiply_factor=1)
        warmup_ops = (n_local - 1) * microbatches_per_round + 1 * ((pp - 1) - rank)
        warmup_ops = min(warmup_ops, n_mb * n_local)
        microbatch_ops = n_local * n_mb
        fwd_bwd_ops = microbatch_ops - warmup_ops
        cooldown_ops = microbatch_ops - fwd_bwd_ops

        def forward_stage_index(step):
            local_index = (step // microbatches_per_round) % n_local
            return local_index * pp + rank

        def backward_stage_index(step):
            local_index = n_local - 1 - ((step - warmup_ops) // microbatches_per_round) % n_local
            return local_index * pp + rank

        num_1f1b_microbatches = rank
        # _get_1f1b_rank_ops(..., enable_zero_bubble=True), empty slots left out
        fwd_mb, bwd_mb, weight_mb = {}, {}, {}
        acts, backward_op_ids, weight_op_count = [], [], 0

        def take(counter, stage):
            counter[stage] = counter.get(stage, 0) + 1
            return counter[stage] - 1

        for op in range(warmup_ops + fwd_bwd_ops + cooldown_ops):
            if op < warmup_ops:
                st = forward_stage_index(op)
                acts.append((st, "F", take(fwd_mb, st)))
                continue
            if op < warmup_ops + fwd_bwd_ops:
                st = forward_stage_index(op)
                acts.append((st, "F", take(fwd_mb, st)))
            st = backward_stage_index(op)
            acts.append((st, "I", take(bwd_mb, st)))
            backward_op_ids.append(op)
            if op - warmup_ops >= num_1f1b_microbatches:
                st = backward_stage_index(backward_op_ids[weight_op_count])
                acts.append((st, "W", take(weight_mb, st)))
                weight_op_count += 1
        while weight_op_count < len(backward_op_ids):
            st = backward_stage_index(backward_op_ids[weight_op_count])
            acts.append((st, "W", take(weight_mb, st)))
            weight_op_count += 1
        rows.append(acts)
    return rows


def megatron_interleaved(pp, num_microbatches, num_model_chunks, group):
    """Rows of Megatron's interleaved 1F1B for pp ranks (compute only)."""
    if group > num_microbatches or group < pp:
        raise ValueError(f"group {group} outside [PP={pp}, M={num_microbatches}]")
    final = num_microbatches % group
    if 0 < final < pp:
        raise ValueError(f"remainder {final} of M mod G is below PP={pp}")
    # get_schedule_table
    table = []
    for lo in range(0, num_microbatches, group):
        hi = num_microbatches if lo + group >= num_microbatches else lo + group
        table.extend((mb, chunk) for chunk in range(num_model_chunks) for mb in range(lo, hi))
    total = num_microbatches * num_model_chunks
    rows = []
    for rank in range(pp):
        # get_pp_rank_microbatches (pipeline_parallel_size > 1, interleaved)
        warmup = (pp - rank - 1) * 2 + (num_model_chunks - 1) * group
        warmup = min(warmup, total)
        remaining = total - warmup

        def forward(v):
            mb, chunk = table[v]
            return (chunk * pp + rank, "F", mb)

        def backward(v):
            mb, chunk = table[v]
            return ((num_model_chunks - 1 - chunk) * pp + rank, "B", mb)

        acts = [forward(k) for k in range(warmup)]
        for k in range(remaining):
            acts.append(forward(k + warmup))
            acts.append(backward(k))
        acts.extend(backward(k) for k in range(remaining, total))
        rows.append(acts)
    return rows


def add_send_recv(rows, stage_to_rank, num_stages):
    """torch's _add_send_recv over compute rows: after a compute action whose
    output crosses ranks, its SEND on this rank and the RECV appended to the
    peer's row; a rank's next compute waits until its input's RECV (or the
    producer, on the same rank) is in its row. Returns the compute_comms rows."""
    todo = {r: list(row) for r, row in enumerate(rows) if row}
    out = {r: [] for r in range(len(rows))}
    prev = {r: set() for r in range(len(rows))}

    def has_comms(a):
        st, kind, _ = a
        if kind == "F":
            return st != num_stages - 1 and stage_to_rank(st + 1) != stage_to_rank(st)
        if kind in ("I", "B"):
            return st != 0 and stage_to_rank(st - 1) != stage_to_rank(st)
        return False

    def ready(a, seen):
        st, kind, mb = a
        if kind == "F" and st != 0:
            return (st, "RECV_F", mb) in seen or (st - 1, "F", mb) in seen
        if kind in ("I", "B") and st != num_stages - 1:
            return ((st, "RECV_B", mb) in seen or (st + 1, "I", mb) in seen or (st + 1, "B", mb) in seen)
        return True

    while todo:
        progress = False
        for rank in sorted(todo):
            a = todo[rank][0]
            if not ready(a, prev[rank]):
                continue
            out[rank].append(a)
            prev[rank].add(a)
            if has_comms(a):
                st, kind, mb = a
                send = (st, "SEND_F" if kind == "F" else "SEND_B", mb)
                recv_st = st + 1 if kind == "F" else st - 1
                recv = (recv_st, "RECV_F" if kind == "F" else "RECV_B", mb)
                out[rank].append(send)
                prev[rank].add(send)
                out[stage_to_rank(recv_st)].append(recv)
                prev[stage_to_rank(recv_st)].add(recv)
            todo[rank].pop(0)
            if not todo[rank]:
                del todo[rank]
            progress = True
        assert progress, "Malformed compute schedule, can't schedule sends/recvs"
    return [out[r] for r in range(len(rows))]


def csv_rows(path):
    """A compute_only CSV (bsipipe-plan --format torch-csv) as rows of (stage, type, mb)."""
    import re
    rows = []
    with open(path) as f:
        for line in f:
            cells = [c for c in line.strip().split(",") if c]
            rows.append([(int(m.group(1)), m.group(2), int(m.group(3)))
                         for m in (re.fullmatch(r"(\d+)([FIBW])(\d+)", c) for c in cells)])
    return rows


def json_rows(path):
    """A bsipipe-plan --format json export's compute ops, as dualpipe's rows
    (its micro-batches numbered within their pipe, the first half down)."""
    import json
    with open(path) as f:
        plan = json.load(f)
    m, w = plan["config"]["m"], plan["config"]["w"]
    rows = [[] for _ in range(w)]
    for op in plan["ops"]:
        if op["kind"] in ("F", "B", "W"):
            pipe = 0 if op["pipe"] == "down" else 1
            kind = "I" if op["kind"] == "B" else op["kind"]
            rows[op["device"]].append((pipe, kind, op["mb"] - pipe * (m // 2), op["chunk"]))
    return rows


def torch_cell(item):
    """An action as torch's _Action.__repr__ writes it."""
    if isinstance(item[0], tuple):
        return "(" + ";".join(torch_cell(a) for a in item) + ")OVERLAP_F_B"
    return f"{item[0]}{item[1]}{item[2]}"


def bsipipe_cells(item):
    """The same as bsipipe runs it: pairs in sequence, B as I then W."""
    if isinstance(item[0], tuple):
        return [c for a in item for c in bsipipe_cells(a)]
    s, k, mb = item
    return [f"{s}I{mb}", f"{s}W{mb}"] if k == "B" else [f"{s}{k}{mb}"]


def main():
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--json" or len(args) == 3 and args[0] == "dualpipe":
        rows = json_rows(args[1]) if args[0] == "--json" else dualpipe(int(args[1]), int(args[2]))
        for row in rows:
            print(",".join(f"{k}{'du'[p]}{mb}c{st}" for p, k, mb, st in row))
        return
    if len(args) == 5 and args[0] == "1f1b-i":
        w, m, p, g = (int(a) for a in args[1:])
        if g == 0:
            g = next(g for g in range(w, m + 1) if m % g == 0 or m % g >= w)
        for row in megatron_interleaved(w, m, p, g):
            print(",".join(f"{st}{k}{mb}" for st, k, mb in row))
        return
    if len(args) == 3 and args[0] == "--comms":
        # --comms looped|v FILE: torch's compute_comms rows of a compute_only CSV
        rows = csv_rows(args[2])
        w = len(rows)
        stages = 1 + max(st for row in rows for st, _, _ in row)
        to_rank = (lambda st: st if st < w else 2 * w - 1 - st) if args[1] == "v" else (lambda st: st % w)
        for row in add_send_recv(rows, to_rank, stages):
            print(",".join(f"{st}{k}{mb}" for st, k, mb in row))
        return
    if len(args) == 4 and args[0] == "zb-i":
        for row in interleaved_zb(int(args[1]), int(args[2]), int(args[3])):
            print(",".join(f"{st}{k}{mb}" for st, k, mb in row))
        return
    notation = bool(args) and args[0] == "--torch-notation"
    args = args[1:] if notation else args
    if len(args) != 3 or args[0] not in ("zb-v", "dualpipev"):
        sys.exit(__doc__.strip().splitlines()[-1])
    w, m = int(args[1]), int(args[2])
    rows = zbv(w, m) if args[0] == "zb-v" else dualpipev(w, m)
    for row in rows:
        cells = [torch_cell(a) for a in row] if notation else [c for a in row for c in bsipipe_cells(a)]
        print(",".join(cells))


if __name__ == "__main__":
    main()
