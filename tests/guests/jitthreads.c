/* Code regenerated (W^X flips with mprotect, each one discarding translations) by one thread
 * while others make indirect calls: rgrind empties every thread's indirect-branch table then,
 * under their feet. Output is the same whatever the interleaving. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

enum { SPINNERS = 4, CALLS = 3000000, MIN_FLIPS = 200 };
static atomic_int finished;

static long f0(long x) { return x + 1; }
static long f1(long x) { return x * 3; }
static long f2(long x) { return x ^ 5; }
static long f3(long x) { return x - 7; }
static long (*const table[4])(long) = {f0, f1, f2, f3};

static void *spin(void *arg) {
    long s = (long)arg;
    for (long i = 0; i < CALLS; i++) s = table[(i ^ (i >> 3)) & 3](s);
    atomic_fetch_add(&finished, 1);
    return (void *)s;
}

/* f(x) = x * a + b: imul rax, rdi, a; add rax, b; ret */
static void gen(unsigned char *p, int a, int b) {
    p[0] = 0x48; p[1] = 0x69; p[2] = 0xc7; memcpy(p + 3, &a, 4);
    p[7] = 0x48; p[8] = 0x05; memcpy(p + 9, &b, 4);
    p[13] = 0xc3;
}

int main(void) {
    pthread_t th[SPINNERS];
    for (long i = 0; i < SPINNERS; i++) pthread_create(&th[i], 0, spin, (void *)i);
    unsigned char *w = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long flips = 0, wrong = 0;
    while (flips < MIN_FLIPS || atomic_load(&finished) < SPINNERS) {
        mprotect(w, 4096, PROT_READ | PROT_WRITE);
        int a = (int)(flips % 97), b = (int)(flips % 13);
        gen(w, a, b);
        mprotect(w, 4096, PROT_READ | PROT_EXEC);
        if (((long (*)(long))w)(5) != 5L * a + b) wrong++;
        flips++;
    }
    long total = 0;
    for (int i = 0; i < SPINNERS; i++) { void *r; pthread_join(th[i], &r); total += (long)r; }
    printf("total=%ld wrong=%ld flips>=%d:%d\n", total, wrong, MIN_FLIPS, flips >= MIN_FLIPS);
    return 0;
}
