#!/bin/sh
# test_no_circles: the library's files call each other without circles.
# A call is what the linker sees: file A calls file B when A's object leaves
# undefined a symbol that B's object defines (nm on the objects libtool built
# for libbsipipe; static functions and macros are no calls between files).
# Fails when
#  - two or more files of one folder (base/, graph/, kernels/, policies/,
#    tasks/, ...) call each other in a circle, or
#  - the folders do (graph/ calling tasks/ and tasks/ calling graph/);
#  - a file of tasks/ other than engine_create.c calls into the simulator's
#    files (the engine reads the plan lowered at create, graph/plan_lower.h).
# No circle is allowed. tasks/ is layered (docs/engine.md): the task core
# (engine_core.c) at the bottom, the op files (tasks/ops/) and the
# transports (tasks/transport/) above it, the tensor-parallel builder above
# those, the watchdog and the MPI runtime above that, the driver on top.
# Prints every circle found with the symbols that close it.
set -u
top="${top_builddir:-.}"
command -v nm >/dev/null 2>&1 || { echo "test_no_circles: FAIL: nm (binutils) not found" >&2; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "test_no_circles: FAIL: python3 is needed" >&2; exit 1; }
python3 - "$top" "${srcdir:-.}" <<'PY'
import glob, os, re, subprocess, sys

top, srcdir = sys.argv[1], sys.argv[2]


def objects():
    """source path -> object path, from the libtool objects (.lo) of the library."""
    out = {}
    for lo in glob.glob(os.path.join(top, "*", "**", "*.lo"), recursive=True):
        rel = os.path.relpath(lo, top)
        if rel.startswith(("tests/", "fuzz/", "apps/", "examples/")) or "/_build/" in rel:
            continue
        text = open(lo).read()
        obj = None
        for key in ("pic_object", "non_pic_object"):
            m = re.search(r"^%s='([^']+)'" % key, text, re.M)
            if m and m.group(1) != "none":
                obj = os.path.join(os.path.dirname(lo), m.group(1))
                if os.path.exists(obj):
                    break
                obj = None
        if obj is None:
            continue
        base = os.path.basename(rel)[:-3]
        base = re.sub(r"^libbsipipe_la-", "", base)
        folder = os.path.dirname(rel)
        src = os.path.join(folder, base + ".c")
        if not os.path.exists(os.path.join(srcdir, src)) and os.path.exists(os.path.join(srcdir, folder, base + ".cu")):
            src = os.path.join(folder, base + ".cu")
        if os.path.exists(os.path.join(srcdir, src)):  # not a stale object of a moved file
            out[src] = obj
    return out


objs = objects()
if len(objs) < 20:
    print("test_no_circles: FAIL: found %d library objects under %s (build the library first)" % (len(objs), top),
          file=sys.stderr)
    sys.exit(1)
defined, undefined = {}, {}
for src, obj in objs.items():
    lines = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout.splitlines()
    undefined[src] = set()
    for line in lines:
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined[src].add(name)
        elif kind in "TDBRCGSVW":
            defined.setdefault(name, src)
calls = {src: {} for src in objs}
for src, names in undefined.items():
    for name in names:
        to = defined.get(name)
        if to and to != src:
            calls[src].setdefault(to, []).append(name)


def circles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]; counter[0] += 1
        stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in nodes:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop(); on.discard(w); comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def show(comp, edges):
    for a in sorted(comp):
        for b in sorted(edges.get(a, ())):
            if b in comp:
                names = sorted(edges[a][b]) if isinstance(edges[a], dict) else []
                more = " and %d more" % (len(names) - 4) if len(names) > 4 else ""
                print("    %s -> %s: %s%s" % (a, b, ", ".join(names[:4]), more))


fails = 0
folders = sorted({os.path.dirname(s).split("/")[0] for s in objs})
for folder in folders:
    nodes = {s for s in objs if s.split("/")[0] == folder}
    for comp in circles(nodes, calls):
        fails += 1
        print("FAIL: %d files of %s/ call each other in a circle:" % (len(comp), folder))
        show(comp, calls)
folder_calls = {}
for a, tos in calls.items():
    fa = a.split("/")[0]
    for b, names in tos.items():
        fb = b.split("/")[0]
        if fa != fb:
            folder_calls.setdefault(fa, {}).setdefault(fb, []).extend("%s (%s)" % (n, a) for n in names)
for comp in circles(set(folders), folder_calls):
    fails += 1
    print("FAIL: the folders %s call each other in a circle:" % ", ".join(sorted(comp)))
    show(comp, folder_calls)
# The engine reads the lowered plan and runs the planner's simulation of a
# plan only when it is created (graph/plan_lower.h): no other file of tasks/
# calls a function that simulates or validates a plan. (The link model of
# emulated links, graph/sim_links.c, and the cost models' constructors are
# not simulations of the plan.)
SIMULATES = re.compile(r"^(bsipipe_simulate|bsipipe_schedule_validate|bsipipe_schedule_critical_path|bsipipe_sim_op_|"
                       r"bsipipe_sim_recv_ahead|bsipipe_sim_tp_comm|plan_lower$)")
CREATE = {"tasks/engine_create.c"}
for a in sorted(objs):
    if not a.startswith("tasks/") or a in CREATE:
        continue
    used = sorted(n for b, names in calls[a].items() if b.startswith("graph/") for n in names if SIMULATES.match(n))
    if used:
        fails += 1
        print("FAIL: %s calls the simulator after the engine's create: %s (lower it at create: graph/plan_lower.h)"
              % (a, ", ".join(used)))
order = " ".join("%s->%s" % (a, ",".join(sorted(folder_calls[a]))) for a in sorted(folder_calls))
print("folders: %s" % order)
print("test_no_circles: %d files, %d failed" % (len(objs), fails))
sys.exit(1 if fails else 0)
PY
