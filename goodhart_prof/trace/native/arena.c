/* Memory for a parse, kept between parses.

   A parse needs a copy of its bytes (with the brackets) and yyjson's values (~1.5-2.5 bytes of
   values per byte of JSON): tens of MB of fresh pages each time, whose page faults cost as much
   as the parse. So each parse takes an arena from a small set kept between parses: the bytes at
   its start, yyjson's pool allocator over the rest. A file read window after window faults its
   pages in once per thread. An arena too small for yyjson's values is grown and the parse
   retried. `release()` gives the arenas back (the loader calls it when a load ends). Two threads
   parse at once: a mutex guards the set. */
#include <stdlib.h>
#include <string.h>
#include "arena.h"

#define ARENAS 4

typedef struct { char *mem; size_t size; int busy; } arena_t;
static arena_t arenas[ARENAS];

#ifdef _WIN32
static char *map_bytes(size_t size) { return malloc(size); }
static void unmap_bytes(char *p, size_t size) { (void)size; free(p); }
#define LOCK()
#define UNLOCK()
#else
#include <pthread.h>
#include <sys/mman.h>
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&arena_lock)
#define UNLOCK() pthread_mutex_unlock(&arena_lock)
static char *map_bytes(size_t size) {
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
static void unmap_bytes(char *p, size_t size) { munmap(p, size); }

/* A process forked while another thread held the lock or an arena (the loader's release thread,
   a parse) would wait forever: its copy starts with the lock free and every arena free (no
   thread of the child uses them). */
static void child_after_fork(void) {
    pthread_mutex_init(&arena_lock, NULL);
    for (int i = 0; i < ARENAS; i++) arenas[i].busy = 0;
}
#endif

/* An arena of at least `size` bytes (the smallest free one that fits, else a free one remapped
   to that size, else a new one that is not kept): its index, or -1 (not kept), with *mem set. */
int arena_take(size_t size, char **mem) {
    int at = -1;
    LOCK();
    for (int i = 0; i < ARENAS; i++)
        if (!arenas[i].busy && arenas[i].mem && arenas[i].size >= size && (at < 0 || arenas[i].size < arenas[at].size)) at = i;
    if (at < 0)
        for (int i = 0; i < ARENAS && at < 0; i++)
            if (!arenas[i].busy) at = i;
    if (at >= 0) arenas[at].busy = 1;
    UNLOCK();
    if (at < 0) { /* every arena in use (more threads than arenas): one of its own */
        *mem = map_bytes(size);
        return -1;
    }
    if (!arenas[at].mem || arenas[at].size < size) {
        if (arenas[at].mem) unmap_bytes(arenas[at].mem, arenas[at].size);
        arenas[at].mem = map_bytes(size);
        arenas[at].size = arenas[at].mem ? size : 0;
    }
    *mem = arenas[at].mem;
    return at;
}

void arena_give(int at, char *mem, size_t size) {
    if (at < 0) {
        if (mem) unmap_bytes(mem, size);
        return;
    }
    LOCK();
    arenas[at].busy = 0;
    UNLOCK();
}

void release_arenas(size_t keep) {
    size_t kept = 0;
    LOCK();
    for (int i = 0; i < ARENAS; i++) {
        if (arenas[i].busy || !arenas[i].mem) continue;
        if (kept + arenas[i].size <= keep) {
            kept += arenas[i].size;
            continue;
        }
        unmap_bytes(arenas[i].mem, arenas[i].size);
        arenas[i].mem = NULL;
        arenas[i].size = 0;
    }
    UNLOCK();
}

void arenas_at_fork(void) {
#ifndef _WIN32
    pthread_atfork(NULL, NULL, child_after_fork);
#endif
}
