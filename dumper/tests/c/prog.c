/* Test guest for the dumper's Valgrind-compatibility tests: an inlined helper from a
 * header-like function, direct recursion (fib'2 contexts), a call through the PLT (atoi,
 * printf) and enough loop work to give every function non-trivial costs. */
#include <stdio.h>
#include <stdlib.h>

static inline int sq(int x) { return x * x; }

int sum(int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += sq(i);
    return s;
}

int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10;
    printf("%d %d\n", sum(n * 10), fib(n));
    return 0;
}
