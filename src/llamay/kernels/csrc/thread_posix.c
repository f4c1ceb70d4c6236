/* thread.h on POSIX threads (Linux, macOS). */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity */
#endif
#include "thread.h"
#ifndef _WIN32
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

void ly_mutex_init(ly_mutex *m) { pthread_mutex_init(m, NULL); }
void ly_mutex_destroy(ly_mutex *m) { pthread_mutex_destroy(m); }
void ly_mutex_lock(ly_mutex *m) { pthread_mutex_lock(m); }
void ly_mutex_unlock(ly_mutex *m) { pthread_mutex_unlock(m); }
void ly_cond_init(ly_cond *c) { pthread_cond_init(c, NULL); }
void ly_cond_destroy(ly_cond *c) { pthread_cond_destroy(c); }
void ly_cond_wait(ly_cond *c, ly_mutex *m) { pthread_cond_wait(c, m); }
void ly_cond_signal(ly_cond *c) { pthread_cond_signal(c); }

typedef struct { void (*fn)(void *); void *arg; } start_args;

static void *trampoline(void *p) {
    start_args s = *(start_args *)p;
    free(p);
    s.fn(s.arg);
    return NULL;
}

int ly_thread_start(void (*fn)(void *), void *arg) {
    start_args *s = malloc(sizeof *s);
    if (!s) return -1;
    s->fn = fn;
    s->arg = arg;
    pthread_attr_t attr;
    size_t stack = 0;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_attr_getstacksize(&attr, &stack) == 0 && stack < ((size_t)8 << 20))
        pthread_attr_setstacksize(&attr, (size_t)8 << 20);
    sigset_t all, old;
    sigfillset(&all);
    int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}; /* a fault's signal still reaches its thread */
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) sigdelset(&all, faults[i]);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits this mask */
    int rc = pthread_create(&t, &attr, trampoline, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc) free(s);
    return rc ? -1 : 0;
}

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static void (*tls_dtor)(void *);
static int tls_ok;

static void forget_in_child(void) { pthread_setspecific(tls_key, NULL); }

static void tls_create(void) {
    tls_ok = pthread_key_create(&tls_key, tls_dtor) == 0 && pthread_atfork(NULL, NULL, forget_in_child) == 0;
}

int ly_tls_init(void (*dtor)(void *)) {
    tls_dtor = dtor;
    pthread_once(&tls_once, tls_create);
    return tls_ok ? 0 : -1;
}

void *ly_tls_get(void) { return pthread_getspecific(tls_key); }
void ly_tls_set(void *v) { pthread_setspecific(tls_key, v); }

#ifdef __linux__
void ly_wait_while(atomic_int *word, int value) {
    syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
}
void ly_wake_all(atomic_int *word) { syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0); }
#else
void ly_wait_while(atomic_int *word, int value) { (void)word; (void)value; sched_yield(); }
void ly_wake_all(atomic_int *word) { (void)word; }
#endif

/* size rounded up to a multiple of align, as aligned_alloc requires (macOS's refuses any other) */
void *ly_aligned_alloc(size_t align, size_t size) { return aligned_alloc(align, (size + align - 1) & ~(align - 1)); }
void ly_aligned_free(void *p) { free(p); }

void ly_yield(void) { sched_yield(); }

double ly_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ly_cpu_count(void) {
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
#endif
