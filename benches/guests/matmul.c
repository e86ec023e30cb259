/* matmul [n] [block]: naive i-j-k and cache-blocked multiply of n x n doubles (memory- and
 * FP-bound). Prints the two sums, which must agree. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static void naive(int n, const double *a, const double *b, double *c) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j];
            c[i * n + j] = s;
        }
}

__attribute__((noinline)) static void blocked(int n, int bs, const double *a, const double *b, double *c) {
    for (int i = 0; i < n * n; i++) c[i] = 0;
    for (int ii = 0; ii < n; ii += bs)
        for (int kk = 0; kk < n; kk += bs)
            for (int jj = 0; jj < n; jj += bs)
                for (int i = ii; i < ii + bs && i < n; i++)
                    for (int k = kk; k < kk + bs && k < n; k++)
                        for (int j = jj; j < jj + bs && j < n; j++) c[i * n + j] += a[i * n + k] * b[k * n + j];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 300, bs = argc > 2 ? atoi(argv[2]) : 32;
    double *a = malloc(sizeof(double) * n * n), *b = malloc(sizeof(double) * n * n);
    double *c1 = malloc(sizeof(double) * n * n), *c2 = malloc(sizeof(double) * n * n);
    if (!a || !b || !c1 || !c2 || n < 1 || bs < 1) return 1;
    for (int i = 0; i < n * n; i++) { a[i] = (i % 17) * 0.25; b[i] = (i % 13) * 0.5; }
    naive(n, a, b, c1);
    blocked(n, bs, a, b, c2);
    double s1 = 0, s2 = 0;
    for (int i = 0; i < n * n; i++) { s1 += c1[i]; s2 += c2[i]; }
    printf("naive=%.1f blocked=%.1f\n", s1, s2);
    return 0;
}
