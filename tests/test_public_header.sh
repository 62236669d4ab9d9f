#!/bin/sh
# test_public_header.sh: the public API as a user's program meets it.
#  - a file that includes <bsipipe.h> compiles with -std=c11 -pedantic -Werror, and so do the
#    opt-in <bsipipe_kernels.h> and <bsipipe_starpu.h> and the examples: no public header pulls
#    in StarPU's, whose headers need POSIX; <bsipipe.h> leaves the kernels and the policy out;
#  - a program that only plans (config, schedule, simulator) builds with bsipipe's include
#    path alone, no StarPU, MPI or CUDA header reachable, links against libbsipipe and runs;
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
# the opt-in headers: the kernels, and the StarPU pieces (policy, channel)
printf '#include <bsipipe_kernels.h>\nint main(void) { bsipipe_adamw_t h = {0}; return (int)h.lr; }\n' >"$tmp/kern.c"
printf '#include <bsipipe_starpu.h>\nint main(void) { return 0; }\n' >"$tmp/starpu_api.c"
# bsipipe.h keeps them opt-in: the kernels and the policy are not declared by it
printf '#include <bsipipe.h>\n#ifdef BSIPIPE_KERNELS_H\n#error bsipipe.h includes the kernels\n#endif\n#ifdef BSIPIPE_POLICY_H\n#error bsipipe.h includes the policy\n#endif\nint main(void) { return 0; }\n' >"$tmp/optin.c"
for f in "$tmp/user.c" "$tmp/kern.c" "$tmp/starpu_api.c" "$tmp/optin.c" "$src/examples/plan_and_run.c" "$src/examples/custom_schedule.c"; do
    if $cc -std=c11 -pedantic -Wall -Wextra -Werror -I"$src" -I"$top" -fsyntax-only "$f" 2>"$tmp/err"; then ok
    else fail "$(basename "$f") does not compile with -std=c11 -pedantic: $(head -3 "$tmp/err")"; fi
done
cat >"$tmp/plan_only.c" <<'C'
/* Plans BSIPipe and 1F1B on 4 devices and compares their simulated bubbles. */
#include <bsipipe.h>
#include <stdio.h>
static double bubble(bsipipe_schedule_kind_t kind, int p, int k)
{
    bsipipe_model_dims_t dims = {BSIPIPE_MODEL_GPT, 8, 128, 4, 512, 256, 128};
    bsipipe_parallel_config_t pc = bsipipe_parallel_config_default(kind);
    pc.w = 4; pc.m = 8; pc.p = p; pc.k = k;
    bsipipe_schedule_t *s = NULL;
    bsipipe_sim_result_t *r = NULL;
    bsipipe_cost_model_t unit = bsipipe_cost_model_unit();
    if (bsipipe_schedule_create(&pc, &dims, &s) < 0 || bsipipe_schedule_validate(s) < 0 ||
        bsipipe_simulate(s, &unit, &r) < 0) {
        fprintf(stderr, "plan_only: %s\n", bsipipe_error_detail());
        bsipipe_schedule_destroy(s);
        return -1;
    }
    double b = r->bubble_ratio;
    bsipipe_sim_result_destroy(r);
    bsipipe_schedule_destroy(s);
    return b;
}
int main(void)
{
    double bsi = bubble(BSIPIPE_SCHED_BSIPIPE, 2, 2), one = bubble(BSIPIPE_SCHED_1F1B, 1, 1);
    printf("plan_only: bubble bsipipe %.4f, 1f1b %.4f\n", bsi, one);
    return bsi > 0 && bsi < one && one < 1 ? 0 : 1;
}
C
# Only the source tree and the build tree (bsipipe_version.h): no -isystem for StarPU.
if $cc -std=c11 -pedantic -Wall -Wextra -Werror -I"$src" -I"$top" "$tmp/plan_only.c" -o "$tmp/plan_only" \
        -L"$top/.libs" -lbsipipe -Wl,-rpath,"$(cd "$top/.libs" && pwd)" 2>"$tmp/err"; then
    if "$tmp/plan_only" >"$tmp/out" 2>&1; then ok; cat "$tmp/out"
    else fail "the plan-only program failed: $(cat "$tmp/out")"; fi
else
    fail "a plan-only program does not build with bsipipe's include path alone: $(head -3 "$tmp/err")"
fi
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
