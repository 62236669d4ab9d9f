# policies/local.mk: StarPU scheduling policies (the in-order `bsipipe` policy and the
# selection helpers for StarPU's built-in ones). See docs/policies.md.
libbsipipe_la_SOURCES += policies/bsipipe_policy.c
nobase_pkginclude_HEADERS += policies/bsipipe_policy.h
EXTRA_DIST += docs/policies.md
