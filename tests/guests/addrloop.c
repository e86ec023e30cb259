/* Work that depends on where things are in memory (heap, stack, a library function, an
 * anonymous mapping), as pointer-keyed hash tables and ld.so's module search do: its cost
 * changes with address-space randomisation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
int main(void) {
    int local = 0;
    void *heap = malloc(64);
    void *map = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uintptr_t a[4] = {(uintptr_t)heap >> 4, (uintptr_t)&local >> 4, (uintptr_t)&printf >> 4,
                      (uintptr_t)map >> 12};
    long n = 0;
    for (int i = 0; i < 4; i++) n += a[i] % 4099;
    volatile long s = 0;
    for (long i = 0; i < n; i++) s += i;
    printf("done\n");
    free(heap);
    return 0;
}
