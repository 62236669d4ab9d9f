# base/local.mk: what every layer uses (errors); it includes nothing of bsipipe's.
libbsipipe_la_SOURCES += base/bsipipe_error.c
nobase_pkginclude_HEADERS += base/bsipipe_error.h
