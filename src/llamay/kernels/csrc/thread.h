/* The platform layer under the thread pool: thread_posix.c (pthreads: Linux, macOS) or thread_win32.c
 * (Win32), each compiled only on its platform. Both give every function below the same contract. */
#ifndef LLAMAY_THREAD_H
#define LLAMAY_THREAD_H
#include "common.h"
#include <stdatomic.h>

#ifdef _WIN32
#ifndef _WIN32_WINNT
#define _WIN32_WINNT 0x0602 /* Windows 8: WaitOnAddress */
#endif
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
typedef SRWLOCK ly_mutex;
typedef CONDITION_VARIABLE ly_cond;
#else
#include <pthread.h>
typedef pthread_mutex_t ly_mutex;
typedef pthread_cond_t ly_cond;
#endif

#if LY_X86 /* a spin-wait hint */
#define LY_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define LY_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define LY_CPU_RELAX() ((void)0)
#endif

void ly_mutex_init(ly_mutex *m);
void ly_mutex_destroy(ly_mutex *m);
void ly_mutex_lock(ly_mutex *m);
void ly_mutex_unlock(ly_mutex *m);
void ly_cond_init(ly_cond *c);
void ly_cond_destroy(ly_cond *c);
void ly_cond_wait(ly_cond *c, ly_mutex *m); /* may wake spuriously: callers re-check */
void ly_cond_signal(ly_cond *c);

/* Starts fn(arg) on a new detached thread (it ends when fn returns; nobody joins it) with a stack of at
 * least 8 MiB and, on POSIX, every signal but a fault's (SIGSEGV, SIGFPE...) blocked: they go to the
 * caller's threads. Returns 0, or -1 when no thread could be started. */
int ly_thread_start(void (*fn)(void *), void *arg);

/* One per-thread pointer, NULL in a new thread. ly_tls_init (idempotent, thread-safe) names the destructor
 * run with a thread's non-NULL value when that thread exits; returns 0, or -1 when no slot is available.
 * In a fork's child the forking thread's value is NULL again (its pointee is leaked, not destroyed). */
int ly_tls_init(void (*dtor)(void *));
void *ly_tls_get(void);
void ly_tls_set(void *v);

/* Sleeps while *word == value; may return early (callers re-check). ly_wake_all wakes every sleeper on
 * word. Where the OS has no such wait (macOS) the sleep is a yield: use only where a waiter is expected
 * to be released soon, never to park an idle thread (use ly_cond_wait). */
void ly_wait_while(atomic_int *word, int value);
void ly_wake_all(atomic_int *word);

void ly_yield(void);     /* lets another runnable thread have this CPU */
double ly_now(void);     /* seconds of a monotonic clock */
int ly_cpu_count(void);  /* CPUs this process may run on (at least 1) */
#endif
