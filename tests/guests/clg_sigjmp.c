/* A SIGSEGV handler left by siglongjmp back into the function that faulted (compiled by
 * tests/all/callgrind.rs): no frame of the interrupted code is unwound on the way, so only the
 * stack pointer tells that the handler is over. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
static sigjmp_buf env;
static volatile long acc;
__attribute__((noinline)) long work(int n) { long s = 0; for (int i = 0; i < n; i++) s += i ^ (s >> 3); return s; }
static void segv(int sig) { (void)sig; acc += work(300); siglongjmp(env, 1); }
__attribute__((noinline)) long later(void) { return work(2000); }
int main(void) {
    struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = segv; sa.sa_flags = SA_NODEFER;
    sigaction(SIGSEGV, &sa, 0);
    long a = 0;
    for (int i = 0; i < 3; i++) {
        if (sigsetjmp(env, 1) == 0) {
            *(volatile int *)(long)(i * 0) = 1;
        }
        a += later();
    }
    printf("a=%ld acc=%ld\n", a, acc);
    return 0;
}
