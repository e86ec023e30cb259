/* Where the stack, the heap, a large (mmap'ed) allocation, the program's constants and a
 * library function lie relative to each other: natively and under Valgrind the program and its
 * brk heap come first, then the libraries and mappings, then the stack. Code that compares
 * pointers to unrelated objects (libstdc++'s overlap tests) takes its paths from this. */
#include <stdio.h>
#include <stdlib.h>

static const char constant[] = "constant";

int main(void) {
    char local[8];
    char *heap = malloc(16), *big = malloc(1 << 20);
    unsigned long s = (unsigned long)local, h = (unsigned long)heap, b = (unsigned long)big;
    unsigned long c = (unsigned long)constant, f = (unsigned long)&printf;
    printf("stack>big=%d big>heap=%d heap>constant=%d stack>printf=%d printf>heap=%d\n", s > b,
           b > h, h > c, s > f, f > h);
    free(big);
    free(heap);
    return 0;
}
