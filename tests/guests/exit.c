/* exit: every way a process can end. exit [mode]
 *   exit42  -> exit(42) after flushing a buffered stdout line
 *   return7 -> return 7 from main
 *   _exit3  -> _exit(3): the unflushed stdio buffer must NOT appear
 *   abort   -> abort(): killed by SIGABRT
 *   stderr  -> writes to stdout and stderr interleaved, exit 0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "return7";
    if (strcmp(mode, "exit42") == 0) {
        printf("before exit(42)\n");
        exit(42);
    }
    if (strcmp(mode, "return7") == 0) {
        printf("returning 7\n");
        return 7;
    }
    if (strcmp(mode, "_exit3") == 0) {
        printf("this buffered line is lost");   /* stdout is a pipe: fully buffered, never flushed */
        _exit(3);
    }
    if (strcmp(mode, "abort") == 0) {
        printf("about to abort\n");
        fflush(stdout);
        abort();
    }
    if (strcmp(mode, "stderr") == 0) {
        for (int i = 0; i < 3; i++) {
            printf("out %d\n", i);
            fflush(stdout);
            fprintf(stderr, "err %d\n", i);
        }
        return 0;
    }
    fprintf(stderr, "exit: unknown mode %s\n", mode);
    return 2;
}
