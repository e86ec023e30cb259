/* Signal handlers under callgrind (compiled by tests/all/callgrind.rs): handlers that
 * return, one that raises a second signal from inside (nested), and one left by siglongjmp.
 * Callgrind runs each handler on a logical stack of its own. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile long acc;
static sigjmp_buf env;

__attribute__((noinline)) long work(int n) { long s = 0; for (int i = 0; i < n; i++) s += i ^ (s >> 3); return s; }
static void inner(int sig) { (void)sig; acc += work(200); }
static void outer(int sig) { (void)sig; acc += work(300); raise(SIGUSR2); acc += work(100); }
static void leave(int sig) { (void)sig; acc += work(400); siglongjmp(env, 1); }
__attribute__((noinline)) long after(void) { return work(1000); }
__attribute__((noinline)) long escape(void) {
    if (sigsetjmp(env, 1) == 0) {
        raise(SIGALRM);
        return -1;
    }
    return work(500);
}

static void on(int sig, void (*h)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sigaction(sig, &sa, 0);
}

int main(void) {
    on(SIGUSR1, outer);
    on(SIGUSR2, inner);
    on(SIGALRM, leave);
    long a = 0;
    for (int i = 0; i < 3; i++) {
        raise(SIGUSR1);
        a += after();
        a += escape();
    }
    printf("a=%ld acc=%ld\n", a, acc);
    return 0;
}
