/* How stores commit on the host (docs/callgrind.md, forty-first session): the short
 * form's counter `inc` and state `add`, and eight stores to one, two or three cache
 * lines, grouped or interleaved.  Build and run: gcc -O2 -o /tmp/sc store-commit.c && /tmp/sc */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static uint64_t st[64] __attribute__((aligned(64)));
static uint64_t cnt[1024] __attribute__((aligned(64)));
static uint64_t fr[64] __attribute__((aligned(64)));

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One "block": rcx = counters (eight lines in turn), rdx = the state. */
#define INC_ADD(k) "incq " #k "(%%rcx)\n\taddq $7, 16(%%rdx)\n\t"
#define INC_ONLY(k) "incq " #k "(%%rcx)\n\t"
#define ADD_ONLY(k) "addq $7, 16(%%rdx)\n\t"
#define TWO_INC(k) "incq " #k "(%%rcx)\n\tincq " #k "+8(%%rcx)\n\t"
#define TWO_ADD(k) "addq $7, 16(%%rdx)\n\taddq $7, 24(%%rdx)\n\t"
#define BLOCKS(M, name)                                                                     \
    t0 = now();                                                                             \
    for (long i = 0; i < n; i += 8)                                                         \
        __asm__ volatile(M(0) M(512) M(1024) M(1536) M(2048) M(2560) M(3072) M(3584)        \
                         : : "d"(st), "c"(cnt) : "memory");                                 \
    printf("%-34s %.3f ns a block\n", name, (now() - t0) / n * 1e9);

#define S(r, o) "movq $1, " #o "(%%" #r ")\n\t"
#define GROUPED S(rdx,0) S(rdx,8) S(rdx,16) S(rdx,24) S(rcx,0) S(rcx,8) S(rcx,16) S(rcx,24)
#define INTERLEAVED S(rdx,0) S(rcx,0) S(rdx,8) S(rcx,8) S(rdx,16) S(rcx,16) S(rdx,24) S(rcx,24)
#define ONE_LINE S(rdx,0) S(rdx,8) S(rdx,16) S(rdx,24) S(rdx,32) S(rdx,40) S(rdx,48) S(rdx,56)
#define STORES(M, name)                                                                     \
    t0 = now();                                                                             \
    for (long i = 0; i < n / 4; i++)                                                        \
        __asm__ volatile(M M M M : : "d"(st), "c"(fr) : "memory");                          \
    printf("%-34s %.3f ns per 8 stores\n", name, (now() - t0) / n * 1e9);

int main(void) {
    long n = 400000000;
    double t0;
    BLOCKS(INC_ADD, "counter inc + state add")
    BLOCKS(INC_ONLY, "counter inc")
    BLOCKS(ADD_ONLY, "state add")
    BLOCKS(TWO_INC, "two incs in one counter line")
    BLOCKS(TWO_ADD, "two adds in the state line")
    STORES(GROUPED, "two lines, grouped")
    STORES(INTERLEAVED, "two lines, interleaved")
    STORES(ONE_LINE, "one line")
    return 0;
}
