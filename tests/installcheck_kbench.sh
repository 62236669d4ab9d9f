#!/bin/sh
# installcheck_kbench.sh LABEL BINDIR LIBDIR PKGDATADIR
# Run by `make installcheck` on an installed (and then on a moved) tree: the
# installed bsipipe-kbench finds its PyTorch companion script in that tree's
# PKGDATADIR (never the source tree's), and prints where (a tiny --no-torch run).
set -u
[ $# -eq 4 ] || { echo "usage: installcheck_kbench.sh LABEL BINDIR LIBDIR PKGDATADIR" >&2; exit 2; }
label=$1 bindir=$2 libdir=$3 datadir=$4
me="installcheck ($label: bsipipe-kbench)"
fail() { echo "$me: FAIL: $*" >&2; exit 1; }
real() { (cd "$1" 2>/dev/null && pwd -P); }
kb="$bindir/bsipipe-kbench"
[ -x "$kb" ] || fail "no $kb"
want_dir=$(real "$datadir") || fail "no $datadir"
[ -r "$want_dir/bsipipe-kbench-torch.py" ] || fail "bsipipe-kbench-torch.py not installed in $datadir"
out=$(env -u BSIPIPE_KBENCH_TORCH LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$kb" --no-torch --seq 64 --hidden 64 --heads 2 --reps 1 --threads 1 2>&1) || fail "exited $?: $out"
got=$(printf '%s\n' "$out" | sed -n 's/^# PyTorch script: //p')
case "$got" in
/*) got_dir=$(real "$(dirname "$got")") ;;
*) fail "no script found: ${got:-no '# PyTorch script' line}" ;;
esac
[ "$got_dir" = "$want_dir" ] || fail "uses $got, not the copy in $datadir"
echo "$me: PASS: uses $got"
