#!/bin/sh
# test_pkgconfig: build-aux/gen-pc writes a relocatable bsipipe.pc (paths
# relative to ${pcfiledir}) exactly when libdir, includedir and pkgconfigdir
# are under the prefix, absolute paths otherwise; and pkg-config expands the
# relocatable one, placed in a tree anywhere, to that tree. (The real install,
# move and build of the example is `make installcheck`, run by distcheck.)
set -u
src="${srcdir:-.}"
pc=${PKG_CONFIG:-pkg-config}
gen="$src/build-aux/gen-pc"
fails=0
fail() { echo "test_pkgconfig: FAIL: $*" >&2; fails=$((fails + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_pkgconfig.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# gen PREFIX LIBDIR INCLUDEDIR PKGCONFIGDIR -> the path lines
gen() { ${SHELL:-/bin/sh} "$gen" "$src/bsipipe.pc.in" "$1" "$2" "$3" "$4" 9.8.7 "" "-lm" | sed -n '/^[a-z_]*=/p' | tr '\n' ' '; }
expect() { # ARGS... = EXPECTED
    got=$(gen "$1" "$2" "$3" "$4")
    [ "$got" = "$5" ] || fail "gen-pc $1 $2 $3 $4: got '$got', expected '$5'"
}
expect /usr/local /usr/local/lib /usr/local/include /usr/local/lib/pkgconfig \
    'prefix=${pcfiledir}/../.. exec_prefix=${prefix} libdir=${prefix}/lib includedir=${prefix}/include '
expect /usr /usr/lib/x86_64-linux-gnu /usr/include /usr/lib/x86_64-linux-gnu/pkgconfig \
    'prefix=${pcfiledir}/../../.. exec_prefix=${prefix} libdir=${prefix}/lib/x86_64-linux-gnu includedir=${prefix}/include '
expect /opt/b/ /opt/b/lib /opt/b/include /opt/b/share/pkgconfig \
    'prefix=${pcfiledir}/../.. exec_prefix=${prefix} libdir=${prefix}/lib includedir=${prefix}/include '
# outside the prefix, or climbing out of it: absolute
expect /opt/b /usr/lib /opt/b/include /usr/lib/pkgconfig \
    'prefix=/opt/b exec_prefix=${prefix} libdir=/usr/lib includedir=/opt/b/include '
expect /opt/b /opt/b/lib /usr/include /opt/b/lib/pkgconfig \
    'prefix=/opt/b exec_prefix=${prefix} libdir=/opt/b/lib includedir=/usr/include '
expect /opt/b /opt/b/lib /opt/b/include /usr/share/pkgconfig \
    'prefix=/opt/b exec_prefix=${prefix} libdir=/opt/b/lib includedir=/opt/b/include '
expect /opt/b /opt/b/../lib /opt/b/include /opt/b/lib/pkgconfig \
    'prefix=/opt/b exec_prefix=${prefix} libdir=/opt/b/../lib includedir=/opt/b/include '
# the rest of the file is substituted
${SHELL:-/bin/sh} "$gen" "$src/bsipipe.pc.in" /p /p/lib /p/include /p/lib/pkgconfig 9.8.7 "starpu-1.3 hwloc" "-L/a&b -lm" > "$tmp/x.pc"
grep -q '^Version: 9.8.7$' "$tmp/x.pc" || fail "Version not substituted"
grep -q '^Requires.private: starpu-1.3 hwloc$' "$tmp/x.pc" || fail "Requires.private not substituted"
grep -q '^Libs.private: -L/a&b -lm$' "$tmp/x.pc" || fail "Libs.private not substituted"
grep -q '@' "$tmp/x.pc" && fail "a placeholder is left: $(grep '@' "$tmp/x.pc")"

# pkg-config expands a relocatable file to wherever it lies
if command -v "$pc" >/dev/null 2>&1; then
    for root in "$tmp/a" "$tmp/b c"; do
        case "$root" in *' '*) continue ;; esac # pkg-config output is not quoted for spaces
        mkdir -p "$root/lib/pkgconfig" "$root/include/bsipipe"
        ${SHELL:-/bin/sh} "$gen" "$src/bsipipe.pc.in" /usr/local /usr/local/lib /usr/local/include /usr/local/lib/pkgconfig \
            1.0.0 "" "" > "$root/lib/pkgconfig/bsipipe.pc"
        out=$(PKG_CONFIG_PATH="$root/lib/pkgconfig" $pc --cflags --libs bsipipe) || { fail "pkg-config failed in $root"; continue; }
        inc=$(printf '%s\n' $out | sed -n 's/^-I//p' | head -1)
        lib=$(printf '%s\n' $out | sed -n 's/^-L//p' | head -1)
        [ "$(cd "$inc" && pwd -P)" = "$(cd "$root/include/bsipipe" && pwd -P)" ] || fail "-I$inc is not $root/include/bsipipe"
        [ "$(cd "$lib" && pwd -P)" = "$(cd "$root/lib" && pwd -P)" ] || fail "-L$lib is not $root/lib"
    done
else
    echo "test_pkgconfig: no $pc: expansion not checked"
fi
[ $fails -eq 0 ] || exit 1
echo "test_pkgconfig: PASS"
