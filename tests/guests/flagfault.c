/* Arithmetic flags at a faulting load between data checks. Under a simulating tool the flags
 * set by `cmp` stay live across the two stores and the faulting load; rgrind holds them aside
 * between the checks, so the SIGSEGV handler must still see the guest's flags in its context,
 * and the code after the skipped load must still branch on them. Prints what it saw, for
 * comparison with a native run. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>

static volatile long seen;

static void skip_load(int s, siginfo_t *si, void *ucv) {
    (void)s; (void)si;
    ucontext_t *uc = ucv;
    seen = uc->uc_mcontext.gregs[REG_EFL] & 0x8d5; /* OF SF ZF AF PF CF */
    uc->uc_mcontext.gregs[REG_RIP] += 3;           /* mov (%rcx),%rdx */
}

static void once(long x, long y) {
    long buf[4] = {0};
    unsigned char below = 0, less = 0, zero = 0;
    seen = -1;
    __asm__ volatile(
        "xor %%ecx, %%ecx\n\t"
        "cmp %[y], %[x]\n\t"
        "mov %[x], (%[b])\n\t"
        "mov %[y], 8(%[b])\n\t"
        "mov (%%rcx), %%rdx\n\t"
        "mov %[x], 16(%[b])\n\t"
        "setb %[below]\n\t"
        "setl %[less]\n\t"
        "setz %[zero]\n\t"
        : [below] "=m"(below), [less] "=m"(less), [zero] "=m"(zero)
        : [x] "r"(x), [y] "r"(y), [b] "r"(buf)
        : "rcx", "rdx", "memory", "cc");
    printf("%ld vs %ld: handler saw %#lx, after: below=%d less=%d zero=%d stored=%ld,%ld,%ld\n",
           x, y, (long)seen, below, less, zero, buf[0], buf[1], buf[2]);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = skip_load;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, 0);
    once(3, 5);
    once(5, 3);
    once(7, 7);
    once(-0x7fffffffffffffffL - 1, 1);
    return 0;
}
