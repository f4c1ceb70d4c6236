/* thread.h on Win32 (Windows 8 or later: WaitOnAddress, linked with Synchronization.lib). */
#include "thread.h"
#ifdef _WIN32
#include <malloc.h>
#include <stdlib.h>

void ly_mutex_init(ly_mutex *m) { InitializeSRWLock(m); }
void ly_mutex_destroy(ly_mutex *m) { (void)m; }
void ly_mutex_lock(ly_mutex *m) { AcquireSRWLockExclusive(m); }
void ly_mutex_unlock(ly_mutex *m) { ReleaseSRWLockExclusive(m); }
void ly_cond_init(ly_cond *c) { InitializeConditionVariable(c); }
void ly_cond_destroy(ly_cond *c) { (void)c; }
void ly_cond_wait(ly_cond *c, ly_mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
void ly_cond_signal(ly_cond *c) { WakeConditionVariable(c); }

typedef struct { void (*fn)(void *); void *arg; } start_args;

static DWORD WINAPI trampoline(LPVOID p) {
    start_args s = *(start_args *)p;
    free(p);
    s.fn(s.arg);
    return 0;
}

int ly_thread_start(void (*fn)(void *), void *arg) {
    start_args *s = malloc(sizeof *s);
    if (!s) return -1;
    s->fn = fn;
    s->arg = arg;
    HANDLE t = CreateThread(NULL, (SIZE_T)8 << 20, trampoline, s, STACK_SIZE_PARAM_IS_A_RESERVATION, NULL);
    if (!t) {
        free(s);
        return -1;
    }
    CloseHandle(t);
    return 0;
}

/* Fiber-local storage: its callback runs with a thread's non-NULL value when the thread exits. */
static DWORD fls_index = FLS_OUT_OF_INDEXES;
static INIT_ONCE fls_once = INIT_ONCE_STATIC_INIT;
static void (*fls_dtor)(void *);

static VOID WINAPI fls_callback(PVOID v) {
    if (v) fls_dtor(v);
}

static BOOL CALLBACK fls_create(PINIT_ONCE once, PVOID param, PVOID *ctx) {
    (void)once; (void)param; (void)ctx;
    fls_index = FlsAlloc(fls_callback);
    return TRUE;
}

int ly_tls_init(void (*dtor)(void *)) {
    fls_dtor = dtor;
    InitOnceExecuteOnce(&fls_once, fls_create, NULL, NULL);
    return fls_index == FLS_OUT_OF_INDEXES ? -1 : 0;
}

void *ly_tls_get(void) { return FlsGetValue(fls_index); }
void ly_tls_set(void *v) { FlsSetValue(fls_index, v); }

void ly_wait_while(atomic_int *word, int value) { WaitOnAddress((volatile VOID *)word, &value, sizeof value, INFINITE); }
void ly_wake_all(atomic_int *word) { WakeByAddressAll((PVOID)word); }

void *ly_aligned_alloc(size_t align, size_t size) { return _aligned_malloc(size, align); }
void ly_aligned_free(void *p) { _aligned_free(p); }

void ly_yield(void) { SwitchToThread(); }

double ly_now(void) {
    LARGE_INTEGER t, f;
    QueryPerformanceCounter(&t);
    QueryPerformanceFrequency(&f);
    return (double)t.QuadPart / (double)f.QuadPart;
}

int ly_cpu_count(void) {
    DWORD_PTR proc = 0, sys = 0;
    int n = 0;
    if (GetProcessAffinityMask(GetCurrentProcess(), &proc, &sys))
        for (; proc; proc &= proc - 1) n++;
    if (n < 1) n = (int)GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n > 0 ? n : 1;
}
#endif
