# tests/transport.mk: tests of the `local` transport (tasks/bsipipe_transport.c),
# with real StarPU tasks on 4 CPU workers (STARPU_NCPU=4, set by the tests). They call StarPU
# directly, so they link $(STARPU_LIBS) besides libbsipipe.la.
#  test_transport_data        many channels between 4 workers; consumers see the data
#  test_transport_rendezvous  a SEND before its RECV blocks until the post
#  test_transport_deadlock    head-to-head sends: watchdog, -ETIMEDOUT, report, no hang
#  test_transport_reset       bad arguments, double post, size mismatch, reset rules
#  test_transport_offer       eager sends: offered before or after the post, errors, failure
check_PROGRAMS += tests/test_transport_data tests/test_transport_rendezvous \
	tests/test_transport_deadlock tests/test_transport_reset tests/test_transport_offer
TESTS += tests/test_transport_data tests/test_transport_rendezvous \
	tests/test_transport_deadlock tests/test_transport_reset tests/test_transport_offer
tests_test_transport_data_LDADD = libbsipipe.la $(STARPU_LIBS)
tests_test_transport_rendezvous_LDADD = libbsipipe.la $(STARPU_LIBS)
tests_test_transport_deadlock_LDADD = libbsipipe.la $(STARPU_LIBS)
tests_test_transport_reset_LDADD = libbsipipe.la $(STARPU_LIBS) -lpthread
tests_test_transport_offer_LDADD = libbsipipe.la $(STARPU_LIBS)
noinst_HEADERS += tests/transport/tt_util.h
