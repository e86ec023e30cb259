/* Valgrind's core client requests that answer the program (compiled by
 * tests/all/client_requests.rs): NON_SIMD_CALL runs a function of the program's, STACK_REGISTER
 * hands out ids, VALGRIND_PRINTF prints to the log and returns the length, MAP_IP_TO_SRCLOC
 * names the source file and line of a code address (nothing for an address without one). */
#include <stdio.h>
#include <string.h>
#include <valgrind/valgrind.h>

static long plus(long tid, long a, long b, long c) { return tid > 0 ? a * 100 + b * 10 + c : -1; }
static long answer(long tid) { return tid > 0 ? 42 : -1; }

int main(void) {
    static char stack[4096];
    unsigned id1 = VALGRIND_STACK_REGISTER(stack, stack + 2048);
    unsigned id2 = VALGRIND_STACK_REGISTER(stack + 2048, stack + 4096);
    VALGRIND_STACK_DEREGISTER(id1);
    int n = VALGRIND_PRINTF("printf %s %d %.2f|", "from", 42, 2.5);
    int m = VALGRIND_PRINTF("%5s\nsecond line\n", "end");
    int k = VALGRIND_PRINTF_BACKTRACE("trace %d\n", 7);
    long c0 = (long)VALGRIND_NON_SIMD_CALL0(answer);
    long c3 = (long)VALGRIND_NON_SIMD_CALL3(plus, 1, 2, 3);
    char at[64], none[64];
    memset(at, 'x', sizeof at);
    memset(none, 'x', sizeof none);
    VALGRIND_MAP_IP_TO_SRCLOC((void *)answer, at);
    VALGRIND_MAP_IP_TO_SRCLOC((void *)4096, none);
    printf("call0=%ld call3=%ld stacks=%u,%u printf=%d,%d,%d running=%u\n", c0, c3, id1, id2, n, m,
           k, RUNNING_ON_VALGRIND);
    printf("srcloc=%.63s none=%d\n", at, none[0]);
    return 0;
}
