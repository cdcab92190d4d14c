/* Memory for a parse, kept between parses (arena.c). */
#ifndef GOODHART_ARENA_H
#define GOODHART_ARENA_H
#include <stddef.h>

#define VALUE_BYTES 3 /* first guess of yyjson's bytes per byte of JSON */
#define ARENA_STEP (16u << 20) /* arena sizes are multiples of this */

/* An arena of at least `size` bytes: its index (or -1: one of its own, not kept), *mem set
   (NULL: out of memory). Give it back with arena_give. */
int arena_take(size_t size, char **mem);
void arena_give(int at, char *mem, size_t size);
/* Unmap the arenas no parse holds, but up to `keep` bytes of them (the next load's). */
void release_arenas(size_t keep);
/* Register the fork handler (a child starts with the lock and every arena free). */
void arenas_at_fork(void);

#endif
