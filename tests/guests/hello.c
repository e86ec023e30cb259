/* hello: the smallest libc guest; built as PIE, -no-pie, -static, -static-pie and -O0 to exercise
 * each loader path. Prints one line and the argument count, returns 0. */
#include <stdio.h>

int main(int argc, char **argv) {
    (void)argv;
    printf("hello, world (argc=%d)\n", argc);
    return 0;
}
