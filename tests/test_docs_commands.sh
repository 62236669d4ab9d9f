#!/bin/sh
# test_docs_commands: the shell commands that README.md and docs/*.md show
# still work as written.
#  - Command blocks are fenced ```sh / ```bash / ```console blocks, fenced
#    blocks without a language whose lines start with "$ ", and indented
#    blocks that start with a command (apps/..., scripts/..., python3, mpirun,
#    make ...). In a block with "$ " lines only those are commands (the rest
#    is output); a trailing backslash continues a command on the next line.
#  - A block whose nearest non-blank line above is `<!-- test -->` is quick
#    and runs: its commands one by one, each under `timeout 60` (bash, with
#    pipefail), in a temporary directory shared by the file's blocks (so a
#    block can read what an earlier one wrote) where apps, tests, scripts,
#    examples and .deps/starpu lead to the build and the source tree; /tmp/
#    in a command is that directory's tmp/. The marker may set placeholders,
#    `<!-- test DIR=/tmp/tt/emu -->` (the word DIR is replaced). A command
#    must exit 0, or N when its comment says "(exit status N)".
#  - The output lines a "$ " block shows under a command must be printed by it,
#    in order ("..." elides lines, and a line's trailing "..." its last words):
#    the same words, every number within the
#    marker's tol= (relative, default 0.1) or abs= (absolute, default 0) of
#    the printed one; `output=example` in the marker skips the comparison.
#  - Every other block is skipped by design (a GPU, an MPI cluster, root,
#    minutes of work): listed with the reason of a `<!-- test skip: WHY -->`
#    marker, else "not marked quick". Even so, every --option its bsipipe-*
#    commands pass must be one that the app's --help lists, and so must those
#    of the bsipipe-* commands quoted inline in the prose (`bsipipe-plan ...`).
# Fails on a marked command's unexpected exit status, an unknown option, or
# a marker that marks no command block.
set -u
top="${top_builddir:-.}"
src="${srcdir:-.}"
export STARPU_SILENT=1
command -v python3 >/dev/null 2>&1 || { echo "test_docs_commands: FAIL: python3 is needed" >&2; exit 1; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
abs() { (cd "$1" && pwd -P); }
python3 - "$(abs "$src")" "$(abs "$top")" "$tmp" "${STARPU_BINDIR:-}" <<'PY'
import glob, os, re, shlex, subprocess, sys

src, top, tmp, starpu_bindir = sys.argv[1:5]
TIMEOUT = 60
COMMAND_START = re.compile(r"^(\$ )?([A-Z_][A-Z0-9_]*=\S* )*(apps/|scripts/|python3 |mpirun |make |\./|bsipipe-|cc |"
                           r"export |autoreconf)")
MARKER = re.compile(r"^<!--\s*test\b(.*?)-->\s*$")


def unfinished(cmd):
    """A command that goes on on the next line: a trailing backslash, or an open quote."""
    if cmd.rstrip().endswith("\\"):
        return True
    try:
        shlex.split(cmd, comments=True)
    except ValueError:
        return True
    return False


def join_continued(lines):
    """Joins the lines of one command; yields (offset, command)."""
    out, cur, start = [], None, 0
    for i, line in enumerate(lines):
        if cur is None:
            cur, start = line, i
        else:
            cur += "\n" + line
        if not unfinished(cur):
            out.append((start, cur))
            cur = None
    if cur is not None:
        out.append((start, cur))
    return out


def commands_of(lines):
    """The commands of a block's lines: its "$ " lines (and their continuations) if
    it has any, each with the output lines the doc shows under it; else every
    non-blank, non-comment line (no output shown)."""
    if any(l.startswith("$ ") for l in lines):
        cmds, i = [], 0
        while i < len(lines):
            if lines[i].startswith("$ "):
                j, cmd = i, lines[i][2:]
                while unfinished(cmd) and j + 1 < len(lines):
                    j += 1
                    cmd += "\n" + lines[j]
                k = j + 1
                while k < len(lines) and not lines[k].startswith("$ "):
                    k += 1
                cmds.append((i, cmd, lines[j + 1:k]))
                i = k
            else:
                i += 1
        return cmds
    return [(k, c, []) for k, c in join_continued([l for l in lines])
            if c.strip() and not c.lstrip().startswith("#")]


NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def line_matches(shown, actual, tol, slack):
    """A shown output line against a printed one: the same words, and every number
    within tol (relative) or slack (absolute) of the printed one; a shown line that
    ends in "..." is matched against the printed line's first words only."""
    a = shown.split()
    b = actual.split()
    if a and a[-1] == "...":
        a = a[:-1]
        b = b[:len(a)]
    if len(a) != len(b):
        return False
    for wa, wb in zip(a, b):
        if wa == wb:
            continue
        na, nb = NUMBER.findall(wa), NUMBER.findall(wb)
        if NUMBER.sub("#", wa) != NUMBER.sub("#", wb) or len(na) != len(nb):
            return False
        for x, y in zip(na, nb):
            fx, fy = float(x), float(y)
            if abs(fx - fy) > max(tol * max(abs(fx), abs(fy)), slack):
                return False
    return True


def output_differs(shown, out, tol, slack):
    """The first shown line ("..." elides any lines) that the command's output does
    not hold, in order; None when all do."""
    lines = out.splitlines()
    at = 0
    for s in shown:
        if not s.strip() or s.strip() == "...":
            continue
        while at < len(lines) and not line_matches(s, lines[at], tol, slack):
            at += 1
        if at == len(lines):
            return s
        at += 1
    return None


def blocks_of(path):
    """(line number, marker text or None, commands) of every command block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    found, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^```(\w*)\s*$", line)
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body, lang = lines[i + 1:j], m.group(1)
            if lang in ("sh", "bash", "console", "shell") or (lang == "" and any(l.startswith("$ ") for l in body)):
                found.append((i + 1, i, commands_of(body)))
            i = j + 1
            continue
        if line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            body = [l[4:] for l in lines[i:j]]
            while body and not body[-1].strip():
                body.pop()
            if COMMAND_START.match(body[0]):
                found.append((i + 1, i, commands_of(body)))
            i = j
            continue
        i += 1
    result = []
    for lineno, first, cmds in found:
        k = first - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        m = MARKER.match(lines[k].strip()) if k >= 0 else None
        result.append((lineno, m.group(1).strip() if m else None, [(lineno + 1 + o, c, sh) for o, c, sh in cmds],
                       k + 1))
    markers = [n + 1 for n, l in enumerate(lines) if MARKER.match(l.strip())]
    return result, markers


help_cache = {}


def app_help(app):
    if app not in help_cache:
        exe = os.path.join(top, "apps", app)
        try:
            p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=TIMEOUT)
            help_cache[app] = p.stdout + p.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            help_cache[app] = None
            print("cannot run %s --help: %s" % (exe, e))
    return help_cache[app]


def unknown_options(cmd):
    """Options given to a bsipipe-* app that its --help does not list."""
    bad = []
    for seg in re.split(r"\|\||&&|[|;]", cmd.split("#")[0] if "'" not in cmd else cmd):
        m = re.search(r"(?:^|\s)(?:\S*/)?(bsipipe-(?:train|plan|bench|ref|kbench))(\s|$)", seg)
        if not m:
            continue
        text = app_help(m.group(1))
        if text is None:
            bad.append("%s: no --help" % m.group(1))
            continue
        for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", seg[m.end(1):]):
            if not re.search(re.escape(opt) + r"(?![a-z0-9-])", text):
                bad.append("%s %s" % (m.group(1), opt))
    return bad


def workdir_for(name):
    d = os.path.join(tmp, re.sub(r"[^\w.-]", "_", name))
    os.makedirs(os.path.join(d, "tmp"))
    for link, target in (("apps", os.path.join(top, "apps")), ("tests", os.path.join(src, "tests")),
                         ("scripts", os.path.join(src, "scripts")), ("examples", os.path.join(src, "examples"))):
        os.symlink(target, os.path.join(d, link))
    if starpu_bindir:
        os.makedirs(os.path.join(d, ".deps"))
        os.symlink(os.path.dirname(starpu_bindir.rstrip("/")), os.path.join(d, ".deps", "starpu"))
    return d


failures, ran, skipped = [], 0, []
docs = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
for path in docs:
    rel = os.path.relpath(path, src)
    blocks, markers = blocks_of(path)
    used = set()
    work = None
    for lineno, marker, cmds, marker_line in blocks:
        for cl, cmd, _ in cmds:
            for b in unknown_options(cmd):
                failures.append("%s:%d: unknown option %s (not in its --help): %s" % (rel, cl, b, cmd.splitlines()[0]))
        if marker is None or marker.startswith("skip"):
            why = marker.split(":", 1)[1].strip() if marker and ":" in marker else "not marked quick"
            skipped.append("%s:%d: %s  [%s]" % (rel, lineno, cmds[0][1].splitlines()[0] if cmds else "(empty)", why))
            if marker is not None:
                used.add(marker_line)
            continue
        used.add(marker_line)
        subst = dict(w.split("=", 1) for w in marker.split() if "=" in w)
        tol = float(subst.pop("tol", "0.1"))
        slack = float(subst.pop("abs", "0"))
        example = subst.pop("output", "") == "example"
        if work is None:
            work = workdir_for(rel)
        for cl, cmd, shown in cmds:
            run = cmd
            for k, v in subst.items():
                run = re.sub(r"\b%s\b" % re.escape(k), v, run)
            run = run.replace("/tmp/", os.path.join(work, "tmp") + "/")
            m = re.search(r"\(exit status (\d+)\)", cmd)
            want = int(m.group(1)) if m else 0
            try:
                p = subprocess.run(["timeout", str(TIMEOUT), "bash", "-o", "pipefail", "-c", run], cwd=work,
                                   capture_output=True, text=True)
                rc, out = p.returncode, p.stdout + p.stderr
            except OSError as e:
                rc, out = -1, str(e)
            ran += 1
            status = "ok" if rc == want else "FAIL"
            print("%s %s:%d: exit %d%s: %s" % (status, rel, cl, rc, "" if want == 0 else " (expected %d)" % want,
                                                cmd.splitlines()[0]))
            if rc != want:
                tail = "\n    ".join(out.strip().splitlines()[-6:])
                failures.append("%s:%d: exit %d, expected %d%s: %s\n    %s" % (
                    rel, cl, rc, want, " (timed out after %d s)" % TIMEOUT if rc == 124 else "", cmd, tail))
            elif shown and not example:
                shown_here = [l.replace("/tmp/", os.path.join(work, "tmp") + "/") for l in shown]
                miss = output_differs(shown_here, out, tol, slack)
                print("  %s output: %d shown lines %s (numbers within %g, or %g)" % (
                    "ok" if miss is None else "FAIL", len([l for l in shown if l.strip() not in ("", "...")]),
                    "printed" if miss is None else "not all printed", tol, slack))
                if miss is not None:
                    failures.append("%s:%d: the doc shows a line the command no longer prints (numbers within "
                                    "%g or %g): %s\n    printed:\n    %s" % (rel, cl, tol, slack, miss,
                                    "\n    ".join(out.strip().splitlines()[-4:])))
    # Commands quoted inline in the prose (`bsipipe-train --plan FILE`): their options too.
    for n, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
        for span in re.findall(r"`([^`]+)`", line):
            if re.match(r"^([A-Z_][A-Z0-9_]*=\S* )*(apps/)?bsipipe-(train|plan|bench|ref|kbench) ", span):
                for b in unknown_options(span):
                    failures.append("%s:%d: unknown option %s (not in its --help): `%s`" % (rel, n, b, span))
    for n in markers:
        if n not in used:
            failures.append("%s:%d: a <!-- test --> marker that marks no command block" % (rel, n))

print("\nskipped by design (%d blocks):" % len(skipped))
for s in skipped:
    print("  " + s)
for f in failures:
    print("FAIL: " + f, file=sys.stderr)
print("test_docs_commands: %d commands run, %d blocks skipped, %d failures" % (ran, len(skipped), len(failures)))
if ran == 0:
    print("FAIL: no marked command ran", file=sys.stderr)
    sys.exit(1)
sys.exit(1 if failures else 0)
PY
