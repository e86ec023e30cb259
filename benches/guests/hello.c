/* hello: the smallest dynamically linked C program, for start-up timing (--set startup). */
#include <stdio.h>

int main(void) {
    puts("hello");
    return 0;
}
