#!/bin/sh
# vite-screenshot.sh TRACE_DIR OUT.png [WIDTH]
# Opens TRACE_DIR/paje.trace (bsipipe-train --trace, docs/tracing.md) in ViTE
# without a display (xvfb-run), exports the interval of the engine's compute
# ops (F/B/W states, found with pajeng's pj_dump) as SVG, and converts it to
# a WIDTH-pixel PNG (default 1200) with rsvg-convert. Fails (exit 1) when
# ViTE reports any parsing error or warning, prints an error line, or
# exports nothing. Debian: vite xvfb xauth pajeng librsvg2-bin (setup.sh).
set -u
[ $# -ge 2 ] || { echo "usage: vite-screenshot.sh TRACE_DIR OUT.png [WIDTH]" >&2; exit 2; }
dir=$1 out=$2 width=${3:-1200}
me=vite-screenshot
fail() { echo "$me: $*" >&2; exit 1; }
[ -s "$dir/paje.trace" ] || fail "no $dir/paje.trace (run bsipipe-train --trace $dir first)"
for t in vite xvfb-run pj_dump rsvg-convert; do
    command -v "$t" >/dev/null 2>&1 ||
        fail "$t not found: install vite, xvfb, xauth, pajeng and librsvg2-bin (scripts/setup.sh lists them)"
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The ops' interval, so the picture shows them rather than StarPU's start-up.
span=$(pj_dump "$dir/paje.trace" 2>"$tmp/pj.err" | awk -F', ' '
    $1 == "State" && $8 ~ /^bsipipe_(fwd|fwd_head|bwd|wgrad|tp_seg)$/ { if (min == "" || $4 + 0 < min) min = $4 + 0; if ($5 + 0 > max) max = $5 + 0 }
    END { if (min != "") printf "%.6f:%.6f", min, max }')
[ -s "$tmp/pj.err" ] && fail "pj_dump: $(head -3 "$tmp/pj.err")"
[ -n "$span" ] || fail "no F/B/W op in $dir/paje.trace"
# ViTE writes the SVG when given -e, then exits; HOME and XDG_RUNTIME_DIR
# keep its settings file out of the user's.
HOME="$tmp" XDG_RUNTIME_DIR="$tmp" timeout 300 xvfb-run -a vite "$dir/paje.trace" -t "$span" -e "$tmp/vite.svg" \
    >"$tmp/vite.log" 2>&1
rc=$?
cat "$tmp/vite.log"
[ $rc -eq 0 ] || fail "vite exited $rc"
grep -q "^0 errors and 0 warnings were found" "$tmp/vite.log" ||
    fail "ViTE did not read the trace cleanly: $(grep -i "errors\|warnings" "$tmp/vite.log" | head -3)"
if grep -i "error\|warning\|invalid\|cannot\|failed" "$tmp/vite.log" | grep -v "^0 errors and 0 warnings" >"$tmp/bad"; then
    fail "ViTE printed: $(head -3 "$tmp/bad")"
fi
[ -s "$tmp/vite.svg" ] || fail "ViTE exported nothing"
rsvg-convert -w "$width" -o "$out" "$tmp/vite.svg" || fail "rsvg-convert failed on ViTE's SVG"
echo "$me: $out (interval $span ms of $dir/paje.trace)"
