# api/local.mk: the umbrella headers: bsipipe.h (planning and training),
# bsipipe_kernels.h (the kernels, opt-in) and bsipipe_starpu.h (the policy
# and the rendezvous channel, opt-in); the configured bsipipe_version.h (BSIPIPE_VERSION_*, from
# AC_INIT's version) and bsipipe_version(), the library's version at run time.
# Both headers install as $(includedir)/bsipipe/*.h, next to the folders of
# nobase_pkginclude_HEADERS.
pkginclude_HEADERS = bsipipe.h bsipipe_kernels.h bsipipe_starpu.h
nodist_pkginclude_HEADERS = bsipipe_version.h
libbsipipe_la_SOURCES += api/bsipipe_version.c
#  test_version     the version macros agree with AC_INIT's and bsipipe_version()
#  test_pkgconfig   gen-pc: relocatable exactly when the dirs are under the prefix
check_PROGRAMS += tests/test_version
TESTS += tests/test_version tests/test_pkgconfig.sh
tests_test_version_LDADD = libbsipipe.la
EXTRA_DIST += tests/test_pkgconfig.sh
