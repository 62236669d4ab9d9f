/* tasks/trace_internal.h: what the writers of a traced run's files share
 * (trace_starpu.c: StarPU's FxT trace and its tools; trace_dag.c: dag.dot;
 * trace_names.c: the names and colours in StarPU's files). */
#ifndef BSIPIPE_TASKS_TRACE_INTERNAL_H
#define BSIPIPE_TASKS_TRACE_INTERNAL_H

/* The op kind of a task from its name in StarPU's trace (its codelet's
 * model symbol, engine_perfmodel.c), or -1 for StarPU's own tasks and for
 * NORM, which is not an op of the plan. */
int trace_name_kind(const char *name);
/* Colour of a task state from its name: its kind's, in the down pipe's
 * palette (a name is shared by both pipes); 0 for StarPU's own tasks. */
unsigned trace_name_color(const char *name);
/* Splits a line (newline stripped) at tabs into at most max fields; the
 * number of fields. */
int trace_split_tabs(char *line, char **f, int max);
/* Rewrites DIR/dag.dot with the engine's ops only (BSIPIPE_TRACE_DAG=full:
 * left as StarPU wrote it). 0, or a negative error with a detail. */
int trace_dag_filter(const char *dir);

#endif
