/* Memory-read bandwidth: each thread sums its share of a 1 GiB buffer with 256-bit loads (4 independent
 * accumulators). Prints the best of 5 passes in GB/s for the given thread count.
 * usage: bandwidth THREADS */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    size_t n = (size_t)1 << 30, words = n / 32;
    __m256i *buf = aligned_alloc(64, n);
    #pragma omp parallel for num_threads(threads)
    for (size_t i = 0; i < words; i++) buf[i] = _mm256_set1_epi64x((long long)i);
    double best = 0;
    long long sink = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t = omp_get_wtime();
        #pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
            size_t lo = words * omp_get_thread_num() / threads, hi = words * (omp_get_thread_num() + 1) / threads;
            __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
            for (size_t i = lo; i + 4 <= hi; i += 4) {
                a = _mm256_add_epi64(a, buf[i]);
                b = _mm256_add_epi64(b, buf[i + 1]);
                c = _mm256_add_epi64(c, buf[i + 2]);
                d = _mm256_add_epi64(d, buf[i + 3]);
            }
            long long out[4];
            _mm256_storeu_si256((__m256i *)out, _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
            sink += out[0] + out[1] + out[2] + out[3];
        }
        double gbs = n / (omp_get_wtime() - t) / 1e9;
        best = gbs > best ? gbs : best;
    }
    printf("%.2f %lld\n", best, sink & 1);
    free(buf);
    return 0;
}
