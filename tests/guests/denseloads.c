/* denseloads: blocks made of loads, each a data check under --cache-sim=yes with its
 * out-of-line lookup, to check that such translations fit the space reserved for them.
 * Prints the sum, which must match the native run. */
#include <stdio.h>

volatile long buf[512];

#define L(i) s += buf[(i) * 8 % 512];
#define L8(i) L(i) L(i + 1) L(i + 2) L(i + 3) L(i + 4) L(i + 5) L(i + 6) L(i + 7)

int main(void) {
    for (int i = 0; i < 512; i++) buf[i] = i * 2654435761u;
    long s = 0;
    L8(0) L8(8) L8(16) L8(24) L8(32) L8(40) L8(48) L8(56)
    printf("%ld\n", s);
    return 0;
}
