/* farstreams: walks lines spread over the user address space at one repeating distance
 * (8 TiB), up and down, so that the simulator's stream prefetch (eight distances ahead)
 * aims past the top of user space (non-canonical addresses) and below address 0 (the
 * kernel's half). The walked lines share one L1 set (twelve lines: more than an
 * L1's ways, fewer than an LL's), which is not the set of the pointer array, so that the
 * misses do not depend on where the program is loaded. Prints the sum, which must match the
 * native run; prints "skipped" where the kernel refuses mappings that high. */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>

#define PAGES 12
#define FIRST (1ul << 40)
#define STEP (1ul << 43)

static volatile long *page[PAGES];

int main(void) {
    /* The walked lines' L1 set (64 sets of 64 B) is 32 sets away from the array's. */
    size_t at = ((((uintptr_t)page >> 6) + 32) & 63) * 64 / sizeof(long);
    for (int k = 0; k < PAGES; k++) {
        void *want = (void *)(FIRST + k * STEP);
        void *got = mmap(want, 4096, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (got != want) {
            puts("skipped");
            return 0;
        }
        page[k] = got;
        page[k][at] = k + 1;
    }
    long sum = 0;
    for (int round = 0; round < 1000; round++) {
        for (int k = 0; k < PAGES; k++) sum += page[k][at];
        for (int k = PAGES - 1; k >= 0; k--) sum += page[k][at + round % 8];
    }
    printf("%ld\n", sum);
    return 0;
}
