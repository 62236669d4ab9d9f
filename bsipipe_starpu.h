/* bsipipe_starpu.h: libbsipipe's StarPU pieces, for StarPU programs of your
 * own (opt-in next to <bsipipe.h>, which it includes): the BSIPipe
 * scheduling policy that runs a plan's per-device order
 * (policies/bsipipe_policy.h) and the in-process rendezvous channel between
 * devices, with its watchdog (tasks/bsipipe_transport.h). Both name
 * StarPU's structs without including <starpu.h>: include it yourself to use
 * them with StarPU. */
#ifndef BSIPIPE_STARPU_API_H
#define BSIPIPE_STARPU_API_H

#include "bsipipe.h"
#include "policies/bsipipe_policy.h"
#include "tasks/bsipipe_transport.h"

#endif
