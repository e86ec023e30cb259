/* JIT with a dual mapping (RW view + RX view of one memfd), as W^X JITs do: the writer
 * rewrites the code through the RW view and tells the tool with
 * VALGRIND_DISCARD_TRANSLATIONS; another thread keeps calling the code through a pointer. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static unsigned long creq(unsigned long req, unsigned long a1, unsigned long a2) {
    volatile unsigned long args[6] = {req, a1, a2, 0, 0, 0};
    unsigned long res = 0;
    __asm__ volatile("rolq $3, %%rdi; rolq $13, %%rdi; rolq $61, %%rdi; rolq $51, %%rdi;"
                     "xchgq %%rbx, %%rbx" : "=d"(res) : "a"(&args[0]), "0"(res) : "cc", "memory");
    return res;
}
static unsigned char *rw, *rx;
static _Atomic int version, seen;
static void gen(int v) { /* mov eax, v; ret */
    rw[0] = 0xb8; memcpy(rw + 1, &v, 4); rw[5] = 0xc3;
}
static void *caller(void *a) {
    (void)a;
    int (*volatile f)(void) = (int (*)(void))rx;
    long stale = 0;
    for (int round = 1; round <= 20; round++) {
        while (atomic_load(&version) < round) f();
        long bad = 0;
        for (int i = 0; i < 100000; i++) if (f() != round) bad++;
        if (bad) stale++;
        atomic_store(&seen, round);
    }
    return (void *)stale;
}
int main(void) {
    int fd = memfd_create("jit", 0);
    ftruncate(fd, 4096);
    rw = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    rx = mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
    gen(0);
    pthread_t t;
    pthread_create(&t, 0, caller, 0);
    for (int v = 1; v <= 20; v++) {
        usleep(2000);
        gen(v);
        creq(0x1002, (unsigned long)rx, 4096);
        atomic_store(&version, v);
        while (atomic_load(&seen) < v) ;
    }
    void *r;
    pthread_join(t, &r);
    printf("rounds where the other thread ran stale code: %ld/20\n", (long)r);
    return 0;
}
