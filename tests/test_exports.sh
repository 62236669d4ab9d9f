#!/bin/sh
# test_exports: libbsipipe exports exactly the API its installed headers declare.
#  - every exported symbol is named in the code (comments stripped) of an
#    installed header: an internal function left global (generate_fixed,
#    a codelet, a kernel's helper) lets an application's function of the
#    same name silently replace the library's, or the other way round, and
#    promises a symbol nobody documented;
#  - every function that the umbrella headers (<bsipipe.h> and the opt-in
#    <bsipipe_kernels.h>, <bsipipe_starpu.h>) declare is exported: a
#    prototype without its symbol fails only when a user's program links.
# The installed headers are the Makefile's (BSIPIPE_INSTALLED_HEADERS).
set -u
top="${top_builddir:-.}"
src="${srcdir:-.}"
lib="$top/.libs/libbsipipe.so"
if [ ! -f "$lib" ]; then
    echo "test_exports: FAIL: $lib not built (a shared build is the default; see docs/building.md)" >&2
    exit 1
fi
for tool in nm python3 "${CC:-cc}"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "test_exports: FAIL: $tool not found" >&2; exit 1; }
done
if [ -z "${BSIPIPE_INSTALLED_HEADERS:-}" ]; then
    echo "test_exports: FAIL: BSIPIPE_INSTALLED_HEADERS is not set (run it through make check)" >&2
    exit 1
fi
nm -D --defined-only "$lib" | awk 'NF == 3 { print $3 }' | python3 -c '
import os, re, subprocess, sys
src, top, cc, headers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
exported = set(sys.stdin.read().split())
named, texts = set(), 0
for h in headers:
    path = next((p for p in (os.path.join(src, h), os.path.join(top, h)) if os.path.exists(p)), None)
    if path is None:
        sys.exit("test_exports: FAIL: installed header %s not found" % h)
    code = re.sub(r"/\*.*?\*/|//[^\n]*", " ", open(path).read(), flags=re.S)
    named |= set(re.findall(r"\b[A-Za-z_]\w*\b", code))
    texts += 1
fails = 0
outside = sorted(s for s in exported if not s.startswith("bsipipe_"))
if outside:
    fails += 1
    print("FAIL: exported outside the bsipipe_ prefix: " + " ".join(outside[:20]))
class Pre:
    stdout = ""
pp = Pre()
for umbrella in ("bsipipe.h", "bsipipe_kernels.h", "bsipipe_starpu.h"):
    run = subprocess.run([cc, "-E", "-P", "-I" + src, "-I" + top, os.path.join(src, umbrella)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("test_exports: FAIL: %s does not preprocess: %s" % (umbrella, run.stderr[:300]))
    pp.stdout += run.stdout
named |= set(re.findall(r"\b[A-Za-z_]\w*\b", pp.stdout))  # names pasted by macros (the _f64 twins)
undeclared = sorted(s for s in exported if s not in named)
if undeclared:
    fails += 1
    print("FAIL: %d exported symbols no installed header declares (make them static, or give them an"
          " internal name: the export rule is ^bsipipe_[a-z0-9]): %s" % (len(undeclared), " ".join(undeclared[:30])))
inline = set(re.findall(r"static\s+(?:inline\s+)?[\w\s*]*?\b(bsipipe_\w+)\s*\(", pp.stdout))
declared = set(re.findall(r"(?<![\w*])\b(bsipipe_\w+)\s*\(", pp.stdout)) - inline
missing = sorted(declared - exported)
if missing:
    fails += 1
    print("FAIL: %d functions the umbrella headers declare are not exported: %s"
          % (len(missing), " ".join(missing[:30])))
if len(exported) < 50:
    fails += 1
    print("FAIL: only %d symbols exported (expected the whole API)" % len(exported))
print("test_exports: %d symbols exported, %d functions declared by the umbrella headers, %d installed headers; %d failed"
      % (len(exported), len(declared), texts, fails))
sys.exit(1 if fails else 0)
' "$src" "$top" "${CC:-cc}" "$BSIPIPE_INSTALLED_HEADERS"
