/* calls [n]: call-heavy code: recursive fib(n), mutual recursion and calls through pointers. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) static int odd(unsigned n);
__attribute__((noinline)) static int even(unsigned n) { return n == 0 ? 1 : odd(n - 1); }
__attribute__((noinline)) static int odd(unsigned n) { return n == 0 ? 0 : even(n - 1); }
__attribute__((noinline)) static long sq(long x) { return x * x; }
__attribute__((noinline)) static long inc(long x) { return x + 1; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 32;
    long (*fs[2])(long) = {sq, inc};
    long s = 0;
    for (long i = 0; i < 1000000; i++) s += fs[i & 1](i & 1023);
    printf("fib(%d)=%ld even=%d ptr=%ld\n", n, fib(n), even(100001), s);
    return 0;
}
