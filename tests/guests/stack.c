/* stack: deep recursion that touches about 6 MiB of the main thread's stack (the default limit
 * is 8 MiB), so the stack must grow on demand below the initial mapping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FRAME 4096

__attribute__((noinline)) static unsigned long deep(int depth, unsigned long acc) {
    volatile unsigned char buf[FRAME];
    memset((void *)buf, depth & 0xff, sizeof buf);
    if (depth == 0) return acc + buf[FRAME - 1];
    unsigned long r = deep(depth - 1, acc + buf[depth % FRAME]);
    return r + buf[0];
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 1500;   /* 1500 * ~4.1 KiB ~= 6 MiB */
    printf("deep(%d)=%lu\n", depth, deep(depth, 0));
    return 0;
}
