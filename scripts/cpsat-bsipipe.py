#!/usr/bin/env python3
"""scripts/cpsat-bsipipe.py: the exact BSIPipe schedule of a small case, by
constraint programming (CP-SAT from Google OR-tools: pip install ortools;
not part of setup). Research aid for the constructive generator
(docs/schedules.md): prints the optimal idle per device under unit costs
(F = 1, B = 2) with at most `cap` stashes per device, and each device's op
order (Fdi/Fui/Fuo/Fdo: forward of the down pipe's inner chunk, up pipe's
inner, up outer, down outer; B likewise; [n]: n idle units).

    scripts/cpsat-bsipipe.py W K UNITS [CAP]      (CAP default: one unit, 2kw)
    scripts/cpsat-bsipipe.py --periodic W K [CAP]
    scripts/cpsat-bsipipe.py --steady W [CAP]

--periodic: the best schedule that repeats one basic unit every T = 6kw
(T = 12kw and a pair of units for odd w): the ops of one unit with their
times, copies shifted by multiples of T must not overlap on a device and
hold at most CAP stashes together (spans up to T + 4w are searched). Such a plan's idle per device is
L - T for every number of units (L: one unit's span), so it meets the
paper's bound for every N_s iff L - T <= 2(w - 1).

--steady (k = 1): whether the middle of a long plan can run without idle
within CAP stashes: one down and one up micro-batch every 12 units on every
device (each device's 8 ops of a pair tile the period), the copies of all
earlier pairs sharing the memory. Prints the shortest span of one pair.
"""
import sys

try:
    from ortools.sat.python import cp_model
except ImportError:
    sys.exit("cpsat-bsipipe.py: needs Google OR-tools' CP-SAT, which the build does not install "
             "(it is not a Debian package): python3 -m venv /tmp/ortools && "
             "/tmp/ortools/bin/pip install ortools && /tmp/ortools/bin/python3 scripts/cpsat-bsipipe.py ...")


def placement(w):
    dev = {}
    for c in range(2 * w):
        down = c if c < w else 2 * w - 1 - c
        dev[(0, c)], dev[(1, c)] = down, w - 1 - down
    return dev


def deps(op, k, chunks):
    kind, pipe, mb, s, c = op
    if kind == 'F':
        return ([('F', pipe, mb, s, c - 1)] if c > 0 else []) + ([('F', pipe, mb, s - 1, c)] if s > 0 else [])
    return ([('F', pipe, mb, s, c)] + ([('B', pipe, mb, s, c + 1)] if c < chunks - 1 else [])
            + ([('B', pipe, mb, s + 1, c)] if s < k - 1 else []))


def model(w, k, units, cap, horizon, period=0, copies=1):
    """CP-SAT model of `units` basic units: one start per op; with a period,
    `copies` shifted copies of every op share the devices and the memory."""
    chunks, dev, m = 2 * w, placement(w), units * w
    # units of w micro-batches; odd w: the extra one alternates between pipes
    pipes = [0 if mb % w < ((w + 1) // 2 if (mb // w) % 2 == 0 else w // 2) else 1 for mb in range(m)]
    M = cp_model.CpModel()
    start, ivs, ops = {}, {d: [] for d in range(w)}, []
    dur = lambda op: 1 if op[0] == 'F' else 2
    for mb in range(m):
        for s in range(k):
            for c in range(chunks):
                for kind in 'FB':
                    op = (kind, pipes[mb], mb, s, c)
                    ops.append(op)
                    start[op] = M.NewIntVar(0, horizon, '')
                    for j in range(copies):
                        ivs[dev[(op[1], c)]].append(M.NewFixedSizeIntervalVar(start[op] + j * period, dur(op), ''))
    for op in ops:
        for dp in deps(op, k, chunks):
            M.Add(start[op] >= start[dp] + dur(dp))
    for d in range(w):
        M.AddNoOverlap(ivs[d])
        held = []
        for op in ops:
            if op[0] == 'F' and dev[(op[1], op[4])] == d:
                size = M.NewIntVar(0, horizon, '')
                M.Add(size == start[('B',) + op[1:]] + 2 - start[op])
                for j in range(copies):
                    held.append(M.NewIntervalVar(start[op] + j * period, size,
                                                 start[('B',) + op[1:]] + 2 + j * period, ''))
        M.AddCumulative(held, [1] * len(held), cap)
    span = M.NewIntVar(0, horizon, '')
    for op in ops:
        M.Add(span >= start[op] + dur(op))
    M.Minimize(span)
    return M, start, span


def run(M, seconds):
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    return solver, solver.Solve(M)


def solve(w, k, units, cap, seconds=60):
    M, start, makespan = model(w, k, units, cap, units * 6 * k * w + 8 * w * k)
    solver, status = run(M, seconds)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, solver.StatusName(status), None
    return solver.Value(makespan), solver.StatusName(status), {op: solver.Value(t) for op, t in start.items()}


def solve_periodic(w, k, cap, seconds=120):
    units = 1 if w % 2 == 0 else 2
    period = units * 6 * k * w
    # Spans up to T + 4w decide the bound (T + 2(w - 1)); the copies that can
    # overlap one unit are then those of the next unit or two.
    M, _, span = model(w, k, units, cap, period + 4 * w, period, 2 + (4 * w > period))
    solver, status = run(M, seconds)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        sys.exit(f"no periodic schedule found ({solver.StatusName(status)})")
    L = solver.Value(span)
    print(f"w={w} k={k} cap={cap} periodic: unit span L={L}, period T={period}, idle per device L-T={L - period} "
          f"({solver.StatusName(status)}; lower bound {solver.BestObjectiveBound() - period:.0f}); "
          f"paper's 2(w-1) = {2 * w - 2}")


def solve_steady(w, cap, seconds=120):
    period, chunks, dev = 12, 2 * w, placement(w)
    horizon = 12 * w + 24
    dur = {'F': 1, 'B': 2}
    M = cp_model.CpModel()
    T = {(kind, pipe, c): M.NewIntVar(0, horizon, '') for pipe in (0, 1) for c in range(chunks) for kind in 'FB'}
    for pipe in (0, 1):
        for c in range(chunks):
            if c:
                M.Add(T[('F', pipe, c)] >= T[('F', pipe, c - 1)] + 1)
            if c < chunks - 1:
                M.Add(T[('B', pipe, c)] >= T[('B', pipe, c + 1)] + 2)
        M.Add(T[('B', pipe, chunks - 1)] >= T[('F', pipe, chunks - 1)] + 1)
    M.Add(T[('F', 0, 0)] == 0)
    copies = horizon // period + 4  # enough for the oldest live pair
    for d in range(w):
        slots, held = [], []
        for (kind, pipe, c), t in T.items():
            if dev[(pipe, c)] != d:
                continue
            q, r = M.NewIntVar(0, horizon // period + 1, ''), M.NewIntVar(0, period - 1, '')
            M.Add(t == period * q + r)
            slots += [M.NewFixedSizeIntervalVar(r + period * j, dur[kind], '') for j in (0, 1)]
            if kind == 'F':
                end = T[('B', pipe, c)] + 2
                size = M.NewIntVar(1, horizon, '')
                M.Add(size == end - t)
                held += [M.NewIntervalVar(t + period * j, size, end + period * j, '') for j in range(copies)]
        M.AddNoOverlap(slots)  # residues mod 12, wrapped
        M.AddCumulative(held, [1] * len(held), cap)
    span = M.NewIntVar(0, horizon + 2, '')
    for (kind, _, _), t in T.items():
        M.Add(span >= t + dur[kind])
    M.Minimize(span)
    solver, status = run(M, seconds)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    print(f"w={w} k=1 cap={cap} idle-free steady state: {solver.StatusName(status)}"
          + (f", span of one pair {solver.Value(span)} (critical path 6w = {6 * w})" if found else ""))


def main():
    if sys.argv[1:2] == ['--steady']:
        w = int(sys.argv[2])
        solve_steady(w, int(sys.argv[3]) if len(sys.argv) > 3 else 2 * w)
        return
    if sys.argv[1:2] == ['--periodic']:
        w, k = int(sys.argv[2]), int(sys.argv[3])
        solve_periodic(w, k, int(sys.argv[4]) if len(sys.argv) > 4 else 2 * k * w)
        return
    w, k, units = (int(a) for a in sys.argv[1:4])
    cap = int(sys.argv[4]) if len(sys.argv) > 4 else 2 * k * w
    makespan, status, times = solve(w, k, units, cap)
    if makespan is None:
        sys.exit(f"no schedule found ({status})")
    print(f"w={w} k={k} units={units} cap={cap}: makespan {makespan} ({status}), "
          f"idle per device {makespan - units * 6 * k * w}, paper's 2(w-1) = {2 * w - 2}")
    dev = placement(w)
    for d in range(w):
        line, prev = [], 0
        for t, op in sorted((t, op) for op, t in times.items() if dev[(op[1], op[4])] == d):
            if t > prev:
                line.append(f"[{t - prev}]")
            line.append(f"{op[0]}{'du'[op[1]]}{'i' if op[4] < w else 'o'}{op[2]}" + (f".{op[3]}" if k > 1 else ""))
            prev = t + (1 if op[0] == 'F' else 2)
        print(d, " ".join(line))


if __name__ == "__main__":
    main()
