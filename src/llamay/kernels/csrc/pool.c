/* pool.h: one pool of workers per calling thread (as OpenMP keeps one team per thread that starts
 * regions). A region bumps each needed worker's `go`; a worker polls for it for a while, then sleeps on
 * its own condition variable. The caller runs ith 0, then waits for `pending` to reach 0 the same way. */
#include "pool.h"
#include "thread.h"
#include <stdlib.h>

/* How a thread waits before it sleeps: decode starts a region per token, and a worker that slept costs
 * the token a wake-up. It polls PAUSE_POLLS times with a pause (~2 us), then yields between polls until
 * SPIN_SECONDS have passed: on a busy machine a woken thread often shares its waker's CPU, and a paused
 * poller would hold it off for the whole spin (OpenMP's spinning stalls for milliseconds there). */
#define PAUSE_POLLS 64
#define SPIN_SECONDS 0.002
#define BARRIER_SPINS 4096

typedef struct ly_pool ly_pool;

typedef struct {
    _Alignas(64) atomic_uint go; /* written by the caller only: +1 starts a region (or the quit) */
    atomic_int sleeping;
    ly_mutex mu;
    ly_cond cv;
    ly_pool *pool;
    int ith;
} worker;

struct ly_pool {
    ly_task_fn fn; /* the region: written before the workers' go, read after it */
    void *arg;
    int nth;
    atomic_int quit;
    atomic_int pending;         /* workers of the region still running fn */
    atomic_int caller_sleeping;
    atomic_int refs;            /* the calling thread's and each started worker's: the last frees the pool */
    ly_mutex mu;                /* the caller's sleep */
    ly_cond cv;
    int n_workers, cap;
    worker **workers;           /* worker i runs ith i + 1; touched by the caller only */
};

typedef int (*ready_fn)(void *p);

/* Polls ready(p) until it holds (returns 1) or the time is spent (returns 0). */
static int spin(ready_fn ready, void *p) {
    double end = 0;
    for (int i = 0;; i++) {
        if (ready(p)) return 1;
        if (i < PAUSE_POLLS) {
            LY_CPU_RELAX();
            continue;
        }
        double now = ly_now();
        if (end == 0) end = now + SPIN_SECONDS;
        else if (now > end) return 0;
        ly_yield();
    }
}

static void pool_release(ly_pool *pool) {
    if (atomic_fetch_sub(&pool->refs, 1) != 1) return;
    for (int i = 0; i < pool->n_workers; i++) {
        ly_mutex_destroy(&pool->workers[i]->mu);
        ly_cond_destroy(&pool->workers[i]->cv);
        ly_aligned_free(pool->workers[i]);
    }
    ly_mutex_destroy(&pool->mu);
    ly_cond_destroy(&pool->cv);
    free(pool->workers);
    free(pool);
}

typedef struct {
    worker *w;
    unsigned seen;
} go_wait;

static int go_changed(void *p) {
    go_wait *g = p;
    return atomic_load(&g->w->go) != g->seen;
}

static int pending_done(void *p) { return atomic_load(&((ly_pool *)p)->pending) == 0; }

/* The seq_cst pairs below (sleeping flag set, then the condition re-read under the mutex; condition
 * changed, then the flag read) make sure a sleeper is always woken. */
static void worker_main(void *p) {
    worker *w = p;
    ly_pool *pool = w->pool;
    go_wait g = {w, 0};
    for (;;) {
        if (!spin(go_changed, &g)) {
            atomic_store(&w->sleeping, 1);
            ly_mutex_lock(&w->mu);
            while (!go_changed(&g)) ly_cond_wait(&w->cv, &w->mu);
            ly_mutex_unlock(&w->mu);
            atomic_store_explicit(&w->sleeping, 0, memory_order_relaxed);
        }
        g.seen = atomic_load_explicit(&w->go, memory_order_acquire);
        if (atomic_load(&pool->quit)) break;
        pool->fn(pool->arg, w->ith, pool->nth);
        if (atomic_fetch_sub(&pool->pending, 1) == 1 && atomic_load(&pool->caller_sleeping)) {
            ly_mutex_lock(&pool->mu);
            ly_cond_signal(&pool->cv);
            ly_mutex_unlock(&pool->mu);
        }
    }
    pool_release(pool);
}

static void kick(worker *w) {
    atomic_fetch_add(&w->go, 1);
    if (atomic_load(&w->sleeping)) {
        ly_mutex_lock(&w->mu);
        ly_cond_signal(&w->cv);
        ly_mutex_unlock(&w->mu);
    }
}

/* The calling thread's exit (thread.h's per-thread destructor): its workers quit, the last one out frees. */
static void pool_destroy(void *p) {
    ly_pool *pool = p;
    atomic_store(&pool->quit, 1);
    for (int i = 0; i < pool->n_workers; i++) kick(pool->workers[i]);
    pool_release(pool);
}

static ly_pool *caller_pool(void) {
    if (ly_tls_init(pool_destroy)) return NULL;
    ly_pool *pool = ly_tls_get();
    if (pool) return pool;
    pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    atomic_init(&pool->refs, 1);
    ly_mutex_init(&pool->mu);
    ly_cond_init(&pool->cv);
    ly_tls_set(pool);
    return pool;
}

/* Starts workers until there are n (or no more start); returns how many there are, at most n. */
static int grow(ly_pool *pool, int n) {
    if (n > LY_POOL_MAX - 1) n = LY_POOL_MAX - 1;
    if (n > pool->cap) {
        worker **ws = realloc(pool->workers, (size_t)n * sizeof *ws);
        if (!ws) return pool->n_workers < n ? pool->n_workers : n;
        pool->workers = ws;
        pool->cap = n;
    }
    while (pool->n_workers < n) {
        worker *w = ly_aligned_alloc(64, sizeof *w);
        if (!w) break;
        atomic_init(&w->go, 0);
        atomic_init(&w->sleeping, 0);
        ly_mutex_init(&w->mu);
        ly_cond_init(&w->cv);
        w->pool = pool;
        w->ith = pool->n_workers + 1;
        atomic_fetch_add(&pool->refs, 1);
        if (ly_thread_start(worker_main, w)) {
            atomic_fetch_sub(&pool->refs, 1);
            ly_mutex_destroy(&w->mu);
            ly_cond_destroy(&w->cv);
            ly_aligned_free(w);
            break;
        }
        pool->workers[pool->n_workers++] = w;
    }
    return pool->n_workers < n ? pool->n_workers : n;
}

void ly_parallel(ly_task_fn fn, void *arg, int nthreads) {
    ly_pool *pool = nthreads > 1 ? caller_pool() : NULL;
    int nth = pool ? 1 + grow(pool, nthreads - 1) : 1;
    if (nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    pool->nth = nth;
    atomic_store_explicit(&pool->pending, nth - 1, memory_order_relaxed);
    for (int i = 0; i < nth - 1; i++) kick(pool->workers[i]);
    fn(arg, 0, nth);
    if (!spin(pending_done, pool)) {
        atomic_store(&pool->caller_sleeping, 1);
        ly_mutex_lock(&pool->mu);
        while (!pending_done(pool)) ly_cond_wait(&pool->cv, &pool->mu);
        ly_mutex_unlock(&pool->mu);
        atomic_store_explicit(&pool->caller_sleeping, 0, memory_order_relaxed);
    }
}

void ly_barrier_wait(ly_barrier *b, int nth) {
    if (nth <= 1) return;
    int phase = atomic_load(&b->phase);
    if (atomic_fetch_add(&b->arrived, 1) == nth - 1) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->phase, 1);
        ly_wake_all(&b->phase);
        return;
    }
    for (int i = 0; atomic_load(&b->phase) == phase; i++) {
        if (i < BARRIER_SPINS) LY_CPU_RELAX();
        else ly_wait_while(&b->phase, phase);
    }
}
