#!/bin/sh
# test_trace: `bsipipe-train --trace DIR` on a tiny model (docs/tracing.md).
#  - starpu_fxt_tool exits 0 and DIR holds paje.trace (naming tasks like
#    "F down ...", which pajeng's pj_dump reads without an error), dag.dot,
#    tasks.rec, trace.rec; tasks.rec lists as many F
#    tasks as the plan has (per iteration), each on the StarPU worker that
#    trace.json says ran it;
#  - trace.json is valid JSON and holds every op of the plan
#    (`bsipipe-plan --format json` of the same config) exactly once, on its
#    planned device (tid), in plan order per device (ts non-decreasing: the
#    bsipipe policy runs each device's ops in plan order); with a StarPU policy
#    (eager) every op is still there and on its device;
#  - timeline.svg and planned.svg parse as XML, have a viewBox, are at most
#    1600 px wide and have a time axis; index.html holds both inline with its
#    zoom script and refers to nothing outside the directory;
#  - trace.json has a flow arrow per transfer: "s" inside the SEND's slice,
#    "f" (same id, bound to the enclosing slice) inside its RECV's;
#  - dag.dot holds the engine's ops only, each once per iteration (eager
#    SENDs, run inside their producer, have no task), edges
#    only between them, acyclic and transitively reduced, and Graphviz's dot
#    renders it; with BSIPIPE_TRACE_DAG=full it is StarPU's
#    whole graph (its data-acquire tasks too);
#  - ViTE opens paje.trace headlessly (scripts/vite-screenshot.sh: xvfb-run)
#    with 0 errors and 0 warnings and exports a PNG;
#  - a bad DIR (a file, or a path under a file) is refused before training.
# Exit 77 (skip) only when starpu_fxt_tool cannot be found (StarPU without
# FxT tools); python3 is needed to parse the outputs (setup installs it).
set -u
top="${top_builddir:-.}"
train="$top/apps/bsipipe-train"
plan="$top/apps/bsipipe-plan"
tool="${STARPU_FXT_TOOL:-}"
[ -n "$tool" ] && [ -x "$tool" ] || tool="${STARPU_BINDIR:-}/starpu_fxt_tool"
[ -x "$tool" ] || tool=$(command -v starpu_fxt_tool 2>/dev/null) || tool=
if [ -z "$tool" ] || [ ! -x "$tool" ]; then
    echo "test_trace: SKIP: starpu_fxt_tool not found (set STARPU_FXT_TOOL or STARPU_BINDIR)" >&2
    exit 77
fi
export STARPU_FXT_TOOL="$tool"
if ! command -v python3 >/dev/null 2>&1; then
    echo "test_trace: FAIL: python3 is needed to parse the trace files" >&2
    exit 1
fi
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
export STARPU_SILENT=1
export STARPU_HOME="$tmp/home" # the performance models a traced run calibrates: the test's own
fails=0 checks=0
ok() { checks=$((checks + 1)); }
fail() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }

model="--layers 8 --hidden 32 --heads 2 --seq 32 --m 8"
noeval="--eval-every 0" # the trace counts tasks per training iteration: no validation passes

# check DIR ITERS SCHEDULE POLICY ORDERED DAG: the files of one traced run
# (DAG: "ops", dag.dot filtered to the engine's ops, or "full", StarPU's).
check() {
    dir=$1 iters=$2 sched=$3 policy=$4 ordered=$5 dag=$6
    if ! "$plan" --schedule "$sched" --w 4 $model --format json >"$tmp/plan.json" 2>"$tmp/plan.err"; then
        fail "bsipipe-plan $sched: $(tail -2 "$tmp/plan.err")"; return
    fi
    for f in paje.trace dag.dot tasks.rec trace.rec trace.json timeline.svg planned.svg index.html; do
        if [ -s "$dir/$f" ]; then ok; else fail "$sched/$policy: no $f in $dir"; fi
    done
    if [ -f "$dir/starpu_fxt_tool.log" ] && ! grep -qi "error\|abort" "$dir/starpu_fxt_tool.log"; then ok; else
        fail "$sched/$policy: starpu_fxt_tool log: $(head -3 "$dir/starpu_fxt_tool.log" 2>/dev/null)"; fi
    if grep -q "bsipipe_fwd" "$dir/paje.trace"; then ok; else fail "$sched/$policy: paje.trace names no bsipipe_fwd task"; fi
    # A Paje reader parses the whole file (pajeng's pj_dump, strict mode) and
    # sees the engine's ops as named worker states.
    if ! command -v pj_dump >/dev/null 2>&1; then
        fail "pj_dump not found: pajeng is installed by scripts/setup.sh"
    elif pj_dump "$dir/paje.trace" >"$tmp/pj.csv" 2>"$tmp/pj.err" && [ ! -s "$tmp/pj.err" ]; then
        if grep -q '^State, .*, bsipipe_fwd$' "$tmp/pj.csv"; then ok; else
            fail "$sched/$policy: pj_dump shows no state named 'bsipipe_fwd'"; fi
        # Few stable state names (the codelets'), not one per op.
        n_names=$(awk -F', ' '$1 == "State" && $3 == "Worker State" && $8 ~ /^bsipipe_/ {print $8}' "$tmp/pj.csv" |
                  sort -u | wc -l)
        if [ "$n_names" -ge 3 ] && [ "$n_names" -le 14 ]; then ok; else
            fail "$sched/$policy: $n_names distinct bsipipe_* worker states (want the codelets' few names)"; fi
    else
        fail "$sched/$policy: pj_dump cannot read paje.trace: $(head -3 "$tmp/pj.err")"
    fi
    # dag.dot: by default the engine's ops only, small enough for Graphviz
    # to lay out (within the test's timeout; no timing asserted).
    if [ "$dag" = ops ]; then
        if ! command -v dot >/dev/null 2>&1; then
            fail "dot not found: graphviz is installed by scripts/setup.sh"
        elif timeout 300 dot -Tsvg "$dir/dag.dot" -o "$tmp/dag.svg" 2>"$tmp/dot.err" && [ -s "$tmp/dag.svg" ]; then
            ok
        else
            fail "$sched/$policy: dot -Tsvg dag.dot failed: $(head -3 "$tmp/dot.err")"
        fi
    fi
    if python3 - "$tmp/plan.json" "$dir" "$iters" "$ordered" "$sched/$policy" "$dag" <<'PY'
import json, re, sys, collections
import xml.etree.ElementTree as ET
plan_path, d, iters, ordered, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
dag_mode = sys.argv[6]
bad = []
plan = json.load(open(plan_path))
trace = json.load(open(d + "/trace.json"))
ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
cfg = trace["otherData"]
for key in ("w", "p", "k", "m"):
    if cfg[key] != plan["config"][key]:
        bad.append("config %s: trace %s, plan %s" % (key, cfg[key], plan["config"][key]))
by_pos = {}
for e in ev:
    pos = (e["args"]["device"], e["args"]["index"])
    if pos in by_pos:
        bad.append("op %s twice in trace.json" % (pos,))
    by_pos[pos] = e
if len(ev) != len(plan["ops"]):
    bad.append("trace.json has %d ops, the plan %d" % (len(ev), len(plan["ops"])))
last_ts = {}
eager_of = {}
kinds_of = {}
for op in sorted(plan["ops"], key=lambda o: (o["device"], o["index"])):
    pos = (op["device"], op["index"])
    e = by_pos.get(pos)
    if e is None:
        bad.append("planned op %s %s missing from trace.json" % (pos, op["kind"]))
        continue
    a = e["args"]
    for key in ("pipe", "mb", "sub", "chunk", "peer", "channel"):
        if a[key] != op[key]:
            bad.append("op %s: %s %s in trace, %s in plan" % (pos, key, a[key], op[key]))
    if e["cat"] != op["kind"] or not e["name"].startswith(op["kind"] + " " if op["kind"] != "STEP" else "STEP"):
        bad.append("op %s: kind %s / name %r, plan says %s" % (pos, e["cat"], e["name"], op["kind"]))
    if e["tid"] != op["device"]:
        bad.append("op %s (%s) ran on device %s, planned on %s" % (pos, e["name"], e["tid"], op["device"]))
    if e["dur"] < 0 or e["ts"] < 0:
        bad.append("op %s: negative time" % (pos,))
    # posting ahead (bsipipe_sim_recv_ahead, docs/policies.md): a RECV may start before
    # the transfers and the compute op before it; nothing else starts before an earlier op
    starts = last_ts.setdefault(op["device"], [])
    eagers = eager_of.setdefault(op["device"], [])
    kinds = kinds_of.setdefault(op["device"], [])
    ahead = 0
    mode = plan["config"].get("comm", "bsipipe")
    if op["kind"] == "RECV" and mode in ("bsipipe", "no-reversal"):
        # bsipipe: two compute ops back over the transfers; no-reversal: one, over receives
        over = ("RECV", "SEND") if mode == "bsipipe" else ("RECV",)
        k = len(kinds) - 1
        for _ in range(2 if mode == "bsipipe" else 1):
            while k >= 0 and kinds[k] in over:
                k -= 1
            if k < 0 or kinds[k] not in ("F", "B", "W") or len(kinds) - k > 63:
                break
            ahead = len(kinds) - k
            k -= 1
    earlier = starts[:len(starts) - ahead] if ahead else starts
    # an eager SEND runs inside its producer (no task): its slice starts at the
    # producer's end, which a RECV listed before it may follow; it is not ordered
    earlier = [t for t, eg in zip(earlier, eagers) if not eg]
    if ordered and earlier and not a.get("eager") and e["ts"] < max(earlier):
        bad.append("op %s (%s) started before the op planned ahead of it on device %d" % (pos, e["name"], op["device"]))
    starts.append(e["ts"])
    eagers.append(a.get("eager", 0))
    kinds.append(op["kind"])
# tasks.rec: tasks named by their codelets (few names, no blanks), every F of the plan in
# every iteration; each op of trace.json is the StarPU job it names (args.job), of its
# codelet, on the worker trace.json names, in the iteration it says.
recs = {}
cur = {}
def flush(cur):
    if "JobId" in cur:
        recs[int(cur["JobId"])] = cur
for line in open(d + "/tasks.rec", errors="replace"):
    line = line.rstrip("\n")
    if not line:
        flush(cur)
        cur = {}
    elif ": " in line:
        k, v = line.split(": ", 1)
        cur[k] = v
flush(cur)
symbol = {"F": ("bsipipe_fwd", "bsipipe_fwd_head"), "B": ("bsipipe_bwd",), "W": ("bsipipe_wgrad",),
          "SEND": ("bsipipe_send",), "RECV": ("bsipipe_recv",), "SYNC": ("bsipipe_sync",), "STEP": ("bsipipe_step",)}
n_f_plan = sum(1 for o in plan["ops"] if o["kind"] == "F")
n_f_rec = sum(1 for r in recs.values() if r.get("Name") in symbol["F"])
if n_f_rec != iters * n_f_plan:
    bad.append("tasks.rec has %d F tasks, expected %d iterations x %d planned" % (n_f_rec, iters, n_f_plan))
if any(" " in r.get("Name", "") for r in recs.values()):
    bad.append("tasks.rec: a task name holds a blank")
for e in ev:
    a = e["args"]
    if a.get("eager"):
        continue
    r = recs.get(a.get("job", 0))
    if r is None:
        bad.append("op %s (job %s) has no task in tasks.rec" % (e["name"], a.get("job")))
        break
    if r.get("Name") not in symbol[e["cat"]] or r.get("Model") != r.get("Name"):
        bad.append("op %s: task %s named %s, model %s" % (e["name"], a["job"], r.get("Name"), r.get("Model")))
        break
    if r.get("WorkerId") is not None and int(r["WorkerId"]) != a["worker"]:
        bad.append("op %s: tasks.rec says worker %s, trace.json %d" % (e["name"], r["WorkerId"], a["worker"]))
        break
    if r.get("Iteration", "").split(" ")[0] != str(iters):
        bad.append("op %s of the last iteration: tasks.rec Iteration %r" % (e["name"], r.get("Iteration")))
        break
# ops.tsv: every task of an op, every iteration, joined to the plan by (device, index).
rows = [l.rstrip("\n").split("\t") for l in open(d + "/ops.tsv") if not l.startswith("#")]
plan_at = {(o["device"], o["index"]): o for o in plan["ops"]}
n_tasks_plan = len(plan["ops"]) - sum(1 for e in ev if e["cat"] == "SEND" and e["args"].get("eager"))
if len(rows) != iters * n_tasks_plan:
    bad.append("ops.tsv has %d rows, expected %d iterations x %d tasks" % (len(rows), iters, n_tasks_plan))
for job, it, pas, dev, idx, label, colour in rows[:100000]:
    o = plan_at.get((int(dev), int(idx)))
    r = recs.get(int(job))
    if o is None or not label.startswith(o["kind"]) or r is None or r.get("Name") not in symbol[o["kind"]] \
            or pas != "train" or not 1 <= int(it) <= iters:
        bad.append("ops.tsv row %s: not a task of op %s/%s in tasks.rec" % (job, dev, idx))
        break
for f in ("timeline.svg", "planned.svg"):
    try:
        root = ET.parse(d + "/" + f).getroot()
        if not root.tag.endswith("svg") or len(root.findall(".//{http://www.w3.org/2000/svg}rect")) < n_f_plan:
            bad.append("%s: not an SVG with a box per op" % f)
    except ET.ParseError as x:
        bad.append("%s does not parse: %s" % (f, x))
    else:
        svg = open(d + "/" + f).read()
        m = re.search(r'<svg [^>]*width="([0-9.]+)" height="([0-9.]+)" viewBox="0 0 ([0-9.]+) ([0-9.]+)"', svg)
        if not m or float(m.group(1)) > 1600 or m.group(1) != m.group(3):
            bad.append("%s: no viewBox of its size, or wider than 1600 px" % f)
        if svg.count('class="tick"') < 3 or "time (" not in svg:
            bad.append("%s: no time axis (ticks and a 'time (unit)' label)" % f)
# index.html: both timelines inline, zoomable with inline script, nothing downloaded.
html = open(d + "/index.html").read()
if html.count("<svg ") != 2 or "<script>" not in html or "viewBox" not in html:
    bad.append("index.html: not two inline SVGs with the zoom script")
if re.search(r'(src|href)="(https?:)?//', html) or "<img" in html:
    bad.append("index.html refers to something outside the directory")
# Flow arrows: each SEND's "s" inside its slice, the RECV's "f" (same id) inside its slice.
flows = collections.defaultdict(dict)
for e in trace["traceEvents"]:
    if e.get("ph") in ("s", "f"):
        if e["ph"] in flows[e["id"]]:
            bad.append("flow %s: two '%s' events" % (e["id"], e["ph"]))
        flows[e["id"]][e["ph"]] = e
def inside(e, op):
    x = by_pos.get((op["device"], op["index"]))
    return x is not None and x["tid"] == e["tid"] and x["ts"] - 0.01 <= e["ts"] <= x["ts"] + x["dur"] + 0.01
sends = [o for o in plan["ops"] if o["kind"] == "SEND"]
recv_of = {o["channel"]: o for o in plan["ops"] if o["kind"] == "RECV"}
if len(flows) != len(sends):
    bad.append("trace.json: %d flows for %d SENDs" % (len(flows), len(sends)))
for o in sends:
    fl = flows.get(o["channel"], {})
    if "s" not in fl or "f" not in fl:
        bad.append("SEND channel %d: no flow start and end" % o["channel"])
    elif not inside(fl["s"], o) or not inside(fl["f"], recv_of[o["channel"]]):
        bad.append("flow %d: not from its SEND's slice to its RECV's" % o["channel"])
    elif fl["s"]["cat"] != fl["f"]["cat"] or fl["s"]["name"] != fl["f"]["name"] or fl["f"].get("bp") != "e":
        bad.append("flow %d: start and end differ in cat/name, or the end is not bound to its slice" % o["channel"])
# dag.dot: the engine's ops only (each once per iteration), or StarPU's whole graph.
nodes = re.findall(r'^\s*"([^"]+)" \[.*?label="([^"]*)"', open(d + "/dag.dot").read(), re.M)
kinds = ("F", "B", "W", "SEND", "RECV", "SYNC", "STEP")
# filtered: the ops' labels (DIR/ops.tsv); full: StarPU's task names (the codelets')
op_names = set(sum(symbol.values(), ())) if dag_mode == "full" else ()
n_ops = sum(1 for _, l in nodes if l.split(" ")[0] in kinds or l in op_names)
others = [l for _, l in nodes if l.split(" ")[0] not in kinds and l not in op_names]
if dag_mode == "ops":
    if others:
        bad.append("dag.dot holds %d nodes that are not the engine's ops (%s ...)" % (len(others), others[0]))
    # an eager SEND runs inside its producer's task: no task, no node of its own
    n_tasks = len(plan["ops"]) - sum(1 for e in ev if e["cat"] == "SEND" and e["args"].get("eager"))
    if n_ops != iters * n_tasks:
        bad.append("dag.dot: %d op nodes, expected %d iterations x %d ops run as tasks" % (n_ops, iters, n_tasks))
    ids = {n for n, _ in nodes}
    succ = collections.defaultdict(set)
    for a, b in re.findall(r'^\s*"([^"]+)" -> "([^"]+)"', open(d + "/dag.dot").read(), re.M):
        if a not in ids or b not in ids:
            bad.append("dag.dot: an edge %s -> %s to a node that is not an op" % (a, b))
        succ[a].add(b)
    if not succ:
        bad.append("dag.dot has no edge")
    # Acyclic, and reduced: no edge a -> b where b is reachable from another successor of a.
    index = {n: i for i, n in enumerate(sorted(ids))}
    indeg = collections.Counter(b for a in succ for b in succ[a])
    order, todo = [], [n for n in ids if indeg[n] == 0]
    while todo:
        n = todo.pop()
        order.append(n)
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                todo.append(m)
    if len(order) != len(ids):
        bad.append("dag.dot has a cycle")
    else:
        reach = {}
        for n in reversed(order):
            r = 0
            for m in succ[n]:
                r |= 1 << index[m] | reach[m]
            reach[n] = r
        implied = sum(1 for a in succ for b in succ[a] if any(c != b and reach[c] >> index[b] & 1 for c in succ[a]))
        if implied:
            bad.append("dag.dot: %d edges implied by others (not transitively reduced)" % implied)
elif not any(l.startswith("_starpu") for l in others) or n_ops == 0:
    bad.append("BSIPIPE_TRACE_DAG=full: dag.dot lacks StarPU's own tasks or the ops")
for b in bad[:10]:
    print("%s: %s" % (label, b), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
    then ok; else fail "$sched/$policy: trace content (see above)"; fi
}

# BSIPipe under the in-order policy, two iterations (trace.json: the last).
# Filtered dag.dot (the default), rendered by Graphviz.
"$train" $model $noeval --iters 2 --trace "$tmp/t" >"$tmp/out" 2>&1 || fail "traced run: $(tail -3 "$tmp/out")"
grep -q "^trace: $tmp/t: paje.trace" "$tmp/out" && ok || fail "no trace summary line: $(tail -2 "$tmp/out")"
check "$tmp/t" 2 bsipipe bsipipe 1 ops
# ViTE reads it headlessly without an error or warning and exports a picture.
if sh "${srcdir:-.}/scripts/vite-screenshot.sh" "$tmp/t" "$tmp/vite.png" 600 >"$tmp/vite.out" 2>&1 &&
   [ "$(head -c 8 "$tmp/vite.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then ok; else
    fail "ViTE screenshot: $(tail -3 "$tmp/vite.out")"; fi
# StarPU's own tools on the run's raw FxT file, as a user would run them by hand
# (docs/tracing.md): starpu_fxt_tool's own paje.trace is read by pj_dump and ViTE
# without an error; starpu_codelet_profile and starpu_codelet_histo_profile draw the
# codelets of distrib.data; starpu_tasks_rec_complete estimates every task of tasks.rec
# (a traced run calibrates its models); starpu_paje_summary tables the codelets' states.
bindir=$(dirname "$tool")
mkdir "$tmp/raw"
if (cd "$tmp/raw" && "$tool" -i "$tmp/t/prof_file_0" -d "$tmp/raw" >"$tmp/raw/tool.log" 2>&1); then ok; else
    fail "starpu_fxt_tool by hand: $(tail -2 "$tmp/raw/tool.log")"; fi
if pj_dump "$tmp/raw/paje.trace" >"$tmp/raw.csv" 2>"$tmp/raw.err" && [ ! -s "$tmp/raw.err" ] &&
   grep -q '^State, .*, bsipipe_bwd$' "$tmp/raw.csv"; then ok; else
    fail "pj_dump on starpu_fxt_tool's own paje.trace: $(head -2 "$tmp/raw.err")"; fi
if sh "${srcdir:-.}/scripts/vite-screenshot.sh" "$tmp/raw" "$tmp/raw.png" 400 >"$tmp/vite-raw.out" 2>&1; then ok; else
    fail "ViTE on starpu_fxt_tool's own paje.trace: $(tail -3 "$tmp/vite-raw.out")"; fi
starpu_tool() { # NAME: the tool next to starpu_fxt_tool, or fail
    if [ -x "$bindir/$1" ]; then echo "$bindir/$1"; else fail "$1 not found next to $tool"; echo false; fi
}
# starpu_codelet_profile splits the codelet's rows per worker and writes a gnuplot script.
(cd "$tmp/raw" && PATH="$bindir:$PATH" "$(starpu_tool starpu_codelet_profile)" distrib.data bsipipe_fwd \
    >"$tmp/cp.out" 2>&1 && gnuplot distrib.data.gp >>"$tmp/cp.out" 2>&1)
if [ -s "$tmp/raw/distrib.data.gp" ] && [ "$(cat "$tmp/raw"/distrib.data.[0-9]* 2>/dev/null | grep -c '^bsipipe_fwd	')" -gt 0 ] &&
   [ -s "$tmp/raw/distrib.data.eps" ]; then ok; else
    fail "starpu_codelet_profile distrib.data bsipipe_fwd drew nothing: $(tail -2 "$tmp/cp.out")"; fi
(cd "$tmp/raw" && "$(starpu_tool starpu_codelet_histo_profile)" distrib.data >"$tmp/hp.out" 2>&1)
if ls "$tmp/raw"/distrib.data.bsipipe_fwd.*.pdf >/dev/null 2>&1; then ok; else
    fail "starpu_codelet_histo_profile drew no bsipipe_fwd histogram: $(tail -2 "$tmp/hp.out")"; fi
if "$(starpu_tool starpu_tasks_rec_complete)" "$tmp/t/tasks.rec" "$tmp/tasks-est.rec" >"$tmp/trc.out" 2>&1 &&
   [ "$(grep -c '^EstimatedTime: [0-9]' "$tmp/tasks-est.rec")" -eq "$(grep -c '^Model: ' "$tmp/t/tasks.rec")" ]; then ok
else fail "starpu_tasks_rec_complete: $(grep -v Warning "$tmp/trc.out" | tail -2)"; fi
(cd "$tmp/raw" && PATH="$bindir:$PATH" "$(starpu_tool starpu_paje_summary)" "$tmp/raw/paje.trace" >"$tmp/ps.out" 2>&1)
if [ -s "$tmp/raw/summary.md" ] && grep -q "bsipipe_fwd" "$tmp/raw/summary.md" &&
   ! grep -q '^## Error' "$tmp/raw/summary.md"; then ok; else
    fail "starpu_paje_summary: no summary naming bsipipe_fwd: $(grep -m2 '^## Error' "$tmp/raw/summary.md" 2>/dev/null; tail -2 "$tmp/ps.out")"; fi

# With validation passes (--eval-every 1): trace.json shows the last training iteration, not
# the validation pass after it; ops.tsv lists the validation passes' tasks apart ("eval").
for _ in $(seq 1 200); do echo "the pipeline sends activations forward and gradients back"; done >"$tmp/corpus"
"$train" $model --eval-every 1 --iters 2 --data "$tmp/corpus" --trace "$tmp/ev" >"$tmp/out-ev" 2>&1 ||
    fail "traced run with validation: $(tail -3 "$tmp/out-ev")"
if grep -q "validation loss" "$tmp/out-ev" && python3 - "$tmp/ev" <<'PY'
import json, sys, collections
d = sys.argv[1]
trace = json.load(open(d + "/trace.json"))
rows = [l.rstrip("\n").split("\t") for l in open(d + "/ops.tsv") if not l.startswith("#")]
by_job = {int(r[0]): r for r in rows}
passes = collections.Counter((r[2], r[1]) for r in rows)
bad = []
if passes[("eval", "1")] == 0 or passes[("eval", "2")] != passes[("train", "2")]:
    bad.append("ops.tsv passes: %s (want a validation pass after each of the 2 iterations)" % dict(passes))
for e in trace["traceEvents"]:
    if e.get("ph") == "X" and not e["args"].get("eager"):
        r = by_job.get(e["args"]["job"])
        if r is None or r[2] != "train" or r[1] != "2":
            bad.append("trace.json shows %s of job %s: %s, not the training iteration 2" % (e["name"], e["args"]["job"], r and r[1:3]))
            break
for b in bad:
    print("validation trace: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
then ok; else fail "with --eval-every, the trace is not the training iteration's"; fi

# Another schedule (split backward: W tasks) under a StarPU policy, into a nested new directory.
# StarPU's whole task graph on request (BSIPIPE_TRACE_DAG=full).
BSIPIPE_TRACE_DAG=full "$train" $model $noeval --iters 1 --schedule zb-h1 --k 1 --p 1 --policy eager \
    --trace "$tmp/a/b/c" >"$tmp/out2" 2>&1 || fail "traced run zb-h1/eager: $(tail -3 "$tmp/out2")"
check "$tmp/a/b/c" 1 zb-h1 eager 0 full

# A bad DIR is refused before training starts.
: >"$tmp/file"
for bad in "$tmp/file" "$tmp/file/sub"; do
    "$train" $model --iters 1 --trace "$bad" >"$tmp/out3" 2>&1; rc=$?
    if [ "$rc" -eq 1 ] && grep -q "not a directory" "$tmp/out3" && ! grep -q "^iter" "$tmp/out3"; then ok; else
        fail "--trace $bad: exit $rc, $(head -2 "$tmp/out3")"; fi
done
# Without --trace nothing is traced (no FxT file in the prefix StarPU would use).
mkdir "$tmp/quiet"
STARPU_FXT_PREFIX="$tmp/quiet" "$train" $model --iters 1 >/dev/null 2>&1 || fail "untraced run"
if [ -z "$(ls "$tmp/quiet")" ]; then ok; else fail "an untraced run wrote $(ls "$tmp/quiet")"; fi

echo "test_trace: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
