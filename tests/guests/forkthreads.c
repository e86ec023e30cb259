/* fork() from one thread while other threads run (and make system calls): the child, a copy
 * with only the forking thread, makes one system call and exits. Children not done after 2 s
 * are counted as hung and killed (rgrind's locks held by threads the child does not have). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static _Atomic int stop;
static void *worker(void *a) {
    (void)a;
    while (!atomic_load(&stop)) syscall(SYS_getppid);
    return 0;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 20;
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, worker, 0);
    int hung = 0;
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0) { syscall(SYS_getpid); _exit(7); }
        int st, done = 0;
        for (int k = 0; k < 200 && !done; k++) {
            if (waitpid(p, &st, WNOHANG) == p) done = 1;
            else { struct timespec ts = {0, 10000000}; nanosleep(&ts, 0); }
        }
        if (!done) { hung++; kill(p, SIGKILL); waitpid(p, &st, 0); }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
    printf("hung children: %d/%d\n", hung, n);
    return 0;
}
