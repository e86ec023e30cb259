/* Two compute-bound threads, each 40 calls deep while the run lock's time slices pass
 * between them: every switch happens in the middle of a call chain, with no system call. */
#include <pthread.h>
#include <stdio.h>
__attribute__((noinline)) static long leaf(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += (i * 7) ^ (s >> 3);
    return s;
}
__attribute__((noinline)) static long deep(int d, long n) {
    if (d == 0) return leaf(n);
    long r = deep(d - 1, n) + d;
    __asm__ volatile("" ::: "memory"); /* no tail call */
    return r;
}
static void *work(void *arg) {
    long s = 0;
    for (int k = 0; k < 20; k++) s += deep(40, 2000000 + (long)arg);
    return (void *)s;
}
int main(void) {
    pthread_t a, b;
    pthread_create(&a, 0, work, (void *)1);
    pthread_create(&b, 0, work, (void *)2);
    void *ra, *rb;
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    printf("%ld %ld\n", (long)ra, (long)rb);
    return 0;
}
