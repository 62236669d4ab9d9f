#!/bin/sh
# test_public_header.sh: the public API as a user's program meets it.
#  - a file that includes <bsipipe.h> compiles with -std=c11 -pedantic -Werror, and so do the
#    examples: no public header pulls in StarPU's, whose headers need POSIX;
#  - the installed programs carry a run path relative to themselves ($ORIGIN/...), so an
#    install tree moved elsewhere still finds libbsipipe (make installcheck runs a moved one).
set -u
top=${top_builddir:-.}
src=${srcdir:-.}
cc=${CC:-cc}
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
ok() { checks=$((checks + 1)); }
fail() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL: $*" >&2; }
cat >"$tmp/user.c" <<'C'
#include <bsipipe.h>
int main(void) { return bsipipe_version()[0] != '\0' ? 0 : 1; }
C
for f in "$tmp/user.c" "$src/examples/plan_and_run.c" "$src/examples/custom_schedule.c"; do
    if $cc -std=c11 -pedantic -Wall -Wextra -Werror -I"$src" -I"$top" -fsyntax-only "$f" 2>"$tmp/err"; then ok
    else fail "$(basename "$f") does not compile with -std=c11 -pedantic: $(head -3 "$tmp/err")"; fi
done
if ! command -v readelf >/dev/null 2>&1; then
    fail "readelf not found (binutils)"
else
    for app in bsipipe-train bsipipe-plan bsipipe-bench; do
        bin="$top/apps/.libs/$app"
        [ -x "$bin" ] || bin="$top/apps/$app"
        path=$(readelf -d "$bin" 2>/dev/null | sed -n -E 's/.*\((RUNPATH|RPATH)\).*\[(.*)\]/\2/p')
        case ":$path:" in
        *':$ORIGIN/'*) ok ;;
        *) fail "$app: run path '$path' has no \$ORIGIN entry: a moved install would not find libbsipipe" ;;
        esac
    done
fi
echo "test_public_header: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
