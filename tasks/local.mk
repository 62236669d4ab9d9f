# tasks/local.mk: StarPU-side runtime pieces. The `local` transport
# (rendezvous point-to-point copies between devices of one process, watchdog).
# See docs/transport.md.
libbsipipe_la_SOURCES += tasks/bsipipe_transport.c
nobase_pkginclude_HEADERS += tasks/bsipipe_transport.h
EXTRA_DIST += docs/transport.md
# The `nccl` transport (CUDA devices on different GPUs): only with NCCL.
# The TP groups' collectives over NCCL (a group spread over GPUs).
if HAVE_NCCL
libbsipipe_la_SOURCES += tasks/bsipipe_transport_nccl.c tasks/bsipipe_tp_nccl.c
endif
noinst_HEADERS += tasks/bsipipe_transport_nccl.h tasks/bsipipe_tp_nccl.h tasks/nccl_try.h
