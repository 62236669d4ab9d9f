# tests/graph.mk: tests of the planner.
check_PROGRAMS += tests/test_partition tests/test_config tests/test_schedules tests/test_comm_order \
	tests/test_mapping tests/test_validate_mutations tests/test_bsipipe_bound tests/test_plan_import
TESTS += tests/test_partition tests/test_config tests/test_schedules tests/test_comm_order tests/test_mapping \
	tests/test_validate_mutations tests/test_bsipipe_bound tests/test_plan_cli.sh tests/test_plan_import \
	tests/test_plan_json_cli.sh
tests_test_partition_LDADD = libbsipipe.la
tests_test_config_LDADD = libbsipipe.la
tests_test_schedules_LDADD = libbsipipe.la
tests_test_comm_order_LDADD = libbsipipe.la
noinst_HEADERS += tests/check.h tests/test_data.h tests/grad_check.h
EXTRA_DIST += tests/test_plan_cli.sh tests/cli_util.sh
tests_test_mapping_LDADD = libbsipipe.la
tests_test_validate_mutations_LDADD = libbsipipe.la
tests_test_bsipipe_bound_LDADD = libbsipipe.la
tests_test_plan_import_LDADD = libbsipipe.la
# Hand-written plans read by the tests and the docs' example.
EXTRA_DIST += tests/test_plan_json_cli.sh tests/data/plan-seq1f1b-w2.json
# test_critical_path: each op's remaining longest path (task priorities).
check_PROGRAMS += tests/test_critical_path
TESTS += tests/test_critical_path
tests_test_critical_path_LDADD = libbsipipe.la
# test_tp_cost: the planner's tensor-parallel collectives, counted and timed.
check_PROGRAMS += tests/test_tp_cost
TESTS += tests/test_tp_cost
tests_test_tp_cost_LDADD = libbsipipe.la
# test_draw_svg: the SVG timeline's frame, axis and merging of sub-pixel ops.
check_PROGRAMS += tests/test_draw_svg
TESTS += tests/test_draw_svg
tests_test_draw_svg_LDADD = libbsipipe.la
# test_sim_noise: the plan simulated under op-time noise (Monte Carlo).
check_PROGRAMS += tests/test_sim_noise
TESTS += tests/test_sim_noise
tests_test_sim_noise_LDADD = libbsipipe.la
# test_choose_k: k chosen by prediction; the pieces' half-performance length.
check_PROGRAMS += tests/test_choose_k
TESTS += tests/test_choose_k
tests_test_choose_k_LDADD = libbsipipe.la -lm
# test_zero_bubble: the split-backward V schedules against their bounds (sweep).
check_PROGRAMS += tests/test_zero_bubble
TESTS += tests/test_zero_bubble
tests_test_zero_bubble_LDADD = libbsipipe.la
# test_layout: layout strings, the split by cost, plans on uneven layouts.
check_PROGRAMS += tests/test_layout
TESTS += tests/test_layout
tests_test_layout_LDADD = libbsipipe.la
# test_shapes: any micro-batch count the interleaved schedules can run (sweep).
check_PROGRAMS += tests/test_shapes
TESTS += tests/test_shapes
tests_test_shapes_LDADD = libbsipipe.la
# test_peer_orders: zb-v and dualpipev against torch's and DeepSeek's orders.
TESTS += tests/test_peer_orders.sh
EXTRA_DIST += tests/test_peer_orders.sh tests/peer_orders.py
