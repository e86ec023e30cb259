/* A JIT-like guest: generates many small functions into RWX memory, runs them, regenerates them
 * in place (other constants and lengths) and runs them again; then the same through W^X flips
 * with mprotect, and code moved with mremap. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

typedef long (*fn_t)(long);
enum { N = 200, SLOT = 64 };

/* f(x) = x * a + b, optionally through a loop of `extra` increments (changes the length). */
static void gen(unsigned char *p, int a, int b, int extra) {
    int n = 0;
    p[n++] = 0x48; p[n++] = 0x69; p[n++] = 0xc7; memcpy(p + n, &a, 4); n += 4; /* imul rax, rdi, a */
    p[n++] = 0x48; p[n++] = 0x05; memcpy(p + n, &b, 4); n += 4;               /* add rax, b */
    for (int i = 0; i < extra; i++) { p[n++] = 0x48; p[n++] = 0xff; p[n++] = 0xc0; } /* inc rax */
    p[n++] = 0xc3;                                                             /* ret */
}

int main(void) {
    unsigned char *rwx = mmap(0, N * SLOT, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long total = 0;
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < N; i++) gen(rwx + i * SLOT, i + round, round * 7, (i + round) % 5);
        for (int rep = 0; rep < 3; rep++)
            for (int i = 0; i < N; i++) total += ((fn_t)(rwx + i * SLOT))(rep + 1);
    }
    printf("rwx total=%ld\n", total);

    unsigned char *w = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long flips = 0;
    for (int k = 0; k < 50; k++) {
        mprotect(w, 4096, PROT_READ | PROT_WRITE);
        gen(w, k, 1, k % 3);
        mprotect(w, 4096, PROT_READ | PROT_EXEC);
        flips += ((fn_t)w)(2);
    }
    printf("wx flips=%ld\n", flips);

    mprotect(w, 4096, PROT_READ | PROT_WRITE);
    gen(w, 3, 4, 0);
    mprotect(w, 4096, PROT_READ | PROT_EXEC);
    long before = ((fn_t)w)(10);
    unsigned char *moved = mremap(w, 4096, 8192, MREMAP_MAYMOVE);
    long after = ((fn_t)moved)(10);
    printf("mremap before=%ld after=%ld\n", before, after);

    /* A caller on one page calls (directly) a function on the next, which is regenerated
     * several times: the caller's translation stays, and its call must leave the discarded
     * callee's translation each time. */
    unsigned char *two = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *callee = two + 4096;
    int rel = (int)(callee - (two + 5));
    two[0] = 0xe8; memcpy(two + 1, &rel, 4);          /* call callee */
    two[5] = 0x48; two[6] = 0x83; two[7] = 0xc0; two[8] = 0x01; /* add rax, 1 */
    two[9] = 0xc3;                                     /* ret */
    mprotect(two, 4096, PROT_READ | PROT_EXEC);
    long chained = 0;
    for (int k = 0; k < 20; k++) {
        mprotect(callee, 4096, PROT_READ | PROT_WRITE);
        gen(callee, k, 3, k % 2);
        mprotect(callee, 4096, PROT_READ | PROT_EXEC);
        for (int rep = 0; rep < 3; rep++) chained += ((fn_t)two)(rep);
    }
    printf("chained=%ld\n", chained);
    return 0;
}
