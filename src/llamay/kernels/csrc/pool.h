/* Parallel regions for the kernels, on the platform's threads (thread.h) instead of OpenMP. */
#ifndef LLAMAY_POOL_H
#define LLAMAY_POOL_H
#include <stdatomic.h>

typedef void (*ly_task_fn)(void *arg, int ith, int nth);

/* Runs fn(arg, ith, nth) once for each ith in [0, nth) and returns when every call has returned; ith 0
 * runs on the caller's thread. nth <= nthreads, fewer only when no more threads can be started (at most
 * LY_POOL_MAX); nthreads <= 1 runs fn(arg, 0, 1) on the caller alone. Each calling thread has its own
 * workers (started on its first region, parked when idle, gone after it exits), so concurrent callers
 * never share or wait for a thread; fn may itself call ly_parallel (its thread's own workers). */
void ly_parallel(ly_task_fn fn, void *arg, int nthreads);
#define LY_POOL_MAX 1024

/* Returns once all nth threads of a region have called it; reusable, and called the same number of times
 * by every thread. Zero it (= {0}) before the region. */
typedef struct {
    atomic_int arrived, phase;
} ly_barrier;
void ly_barrier_wait(ly_barrier *b, int nth);
#endif
