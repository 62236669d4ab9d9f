# tests/policy.mk: tests of the `bsipipe` StarPU scheduling policy (policies/).
#  test_policy_order      4 CPU workers, random plans with cross-worker dependencies: every
#                         task runs on its planned worker, each worker in slot order
#  test_policy_wait       a worker idles rather than run a ready later slot early
#  test_policy_configure  bsipipe_policy_configure: names, -EINVAL list, STARPU_SCHED conflict
#  test_policy_unplanned  tasks without a plan position (and with a bad one) still run
#  test_policy_valgrind.sh  unplanned, wait and order under valgrind memcheck
check_PROGRAMS += tests/test_policy_order tests/test_policy_wait tests/test_policy_configure \
	tests/test_policy_unplanned
TESTS += tests/test_policy_order tests/test_policy_wait tests/test_policy_configure \
	tests/test_policy_unplanned tests/test_policy_valgrind.sh
tests_test_policy_order_LDADD = libbsipipe.la $(STARPU_LIBS)
tests_test_policy_wait_LDADD = libbsipipe.la $(STARPU_LIBS)
tests_test_policy_configure_LDADD = libbsipipe.la $(STARPU_LIBS)
tests_test_policy_unplanned_LDADD = libbsipipe.la $(STARPU_LIBS)
noinst_HEADERS += tests/policy_util.h
EXTRA_DIST += tests/test_policy_valgrind.sh tests/valgrind.supp tests/valgrind_util.sh
