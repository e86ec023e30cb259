/* llwalk [MiB]: walks a buffer line by line, pass after pass (an LL access per line, never
 * in the LL's MRU way once the buffer outgrows the LL), then forks: the child walks a buffer
 * of its own and the first one again, the parent waits. Under `--cache-sim=yes` this is the
 * work of cachegrind's LL queue: many laps of its ring, a part of a segment pending at the
 * fork, and a child that has no consumer thread. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static long walk(volatile char *b, size_t bytes, int passes) {
    long s = 0;
    for (int p = 0; p < passes; p++)
        for (size_t i = 0; i < bytes; i += 64) s += b[i];
    return s;
}

static char *filled(size_t bytes) {
    char *b = malloc(bytes);
    if (!b) exit(1);
    for (size_t i = 0; i < bytes; i += 64) b[i] = (char)(i >> 6);
    return b;
}

int main(int argc, char **argv) {
    size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 8) << 20;
    char *a = filled(bytes);
    long s = walk(a, bytes, 3);
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        char *b = filled(bytes / 2);
        printf("child %ld\n", walk(b, bytes / 2, 2) + walk(a, bytes, 1));
        return 0;
    }
    int st;
    if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 2;
    printf("parent %ld\n", s);
    return 0;
}
