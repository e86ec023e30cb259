/* Instrumentation switched off and on by client requests while instrumentation started on
 * (compiled by tests/all/callgrind.rs): after each switch Callgrind starts a new context in
 * the running function, and collection goes back to --collect-atstart. */
#include <stdio.h>
#include <valgrind/callgrind.h>

__attribute__((noinline)) long leaf(int n) { long s = 0; for (int i = 0; i < n; i++) s += i * 3; return s; }
__attribute__((noinline)) long other(int n) { long s = 0; for (int i = 0; i < n; i++) s += i * 5; return s; }

/* Collection off, then a switch: `other` is collected again. */
__attribute__((noinline)) long toggled(long a) {
    CALLGRIND_TOGGLE_COLLECT;
    a += leaf(300);
    CALLGRIND_STOP_INSTRUMENTATION;
    CALLGRIND_START_INSTRUMENTATION;
    a += other(500);
    return a;
}

int main(void) {
    long a = leaf(100);
    CALLGRIND_STOP_INSTRUMENTATION;
    a += leaf(1000);
    CALLGRIND_START_INSTRUMENTATION;
    a += leaf(2000);
    a += toggled(a);
    a += other(700);
    printf("a=%ld\n", a);
    return 0;
}
