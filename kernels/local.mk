# kernels/local.mk: CPU transformer kernels (plain C on raw pointers, CBLAS) and
# the sequential reference trainer. kernels_tmpl.h is compiled twice, as
# kernels_f32.c (the engine's fp32 kernels) and kernels_f64.c (_f64 names,
# for finite-difference tests). See docs/kernels.md.
libbsipipe_la_SOURCES += \
	kernels/cpu/model_dims.c kernels/cpu/config.c kernels/cpu/tp_common.c \
	kernels/cpu/kernels_f32.c kernels/cpu/kernels_f64.c \
	kernels/reference_trainer.c
nobase_pkginclude_HEADERS += \
	kernels/bsipipe_model.h kernels/bsipipe_kernels.h kernels/bsipipe_kernels_decl.h \
	kernels/reference_trainer.h kernels/bsipipe_tp.h kernels/bsipipe_tp_decl.h
noinst_HEADERS += kernels/cpu/internal.h kernels/cpu/kernels_tmpl.h kernels/cpu/tp_tmpl.h
# threads of attention, dlsym of OpenBLAS extensions (in libc on glibc >= 2.34)
libbsipipe_la_LIBADD += -lpthread -ldl
EXTRA_DIST += docs/kernels.md docs/tensor-parallel.md
