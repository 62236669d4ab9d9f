#!/bin/sh
# test_policy_valgrind.sh: the policy tests under valgrind memcheck (no
# invalid read/write, no use of uninitialised values, no definite leak outside
# StarPU's own one-time ones, see tests/valgrind.supp). Skips (77) only when
# valgrind is absent.
. "${srcdir:-.}/tests/valgrind_util.sh"
valgrind_tests test_policy_unplanned test_policy_wait test_policy_order
