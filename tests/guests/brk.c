/* brk: heap growth. sbrk(64 MiB) and touch every page, then malloc(200 MiB) (served by mmap)
 * and touch every page, then many small mallocs that grow the brk heap again. Prints checksums. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t n_brk = 64u << 20;
    char *old = sbrk(0);
    char *p = sbrk((intptr_t)n_brk);
    if (p == (void *)-1) { perror("sbrk"); return 1; }
    uint64_t sum = 0;
    for (size_t i = 0; i < n_brk; i += page) p[i] = (char)(i / page);
    for (size_t i = 0; i < n_brk; i += page) sum += (unsigned char)p[i];
    int grew = (char *)sbrk(0) - old >= (intptr_t)n_brk;
    /* Shrink back before the first printf: stdio's buffer comes from malloc, whose heap starts at
     * the break, so printing earlier would put malloc's heap in the range given back here. */
    int shrank = sbrk(-(intptr_t)n_brk) != (void *)-1 && sbrk(0) == old;
    printf("sbrk: same_start=%d grew=%d shrank=%d sum=%llu\n", p == old, grew, shrank, (unsigned long long)sum);

    const size_t n_big = 200u << 20;
    char *q = malloc(n_big);
    if (!q) { perror("malloc"); return 1; }
    sum = 0;
    for (size_t i = 0; i < n_big; i += page) q[i] = (char)(i >> 12);
    for (size_t i = 0; i < n_big; i += page) sum += (unsigned char)q[i];
    printf("malloc(200 MiB): sum=%llu\n", (unsigned long long)sum);
    free(q);

    void *small[20000];
    sum = 0;
    for (int i = 0; i < 20000; i++) {
        small[i] = malloc(16 + (size_t)(i % 200));
        ((unsigned char *)small[i])[0] = (unsigned char)i;
    }
    for (int i = 0; i < 20000; i++) { sum += ((unsigned char *)small[i])[0]; free(small[i]); }
    printf("small mallocs: sum=%llu\n", (unsigned long long)sum);
    return 0;
}
