/* main ends with pthread_exit while other threads still sleep: the process lives on until the last thread ends. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *sleeper(void *a) { usleep(100000 + 60000 * (long)a); printf("thread %ld done\n", (long)a); return 0; }
int main(void) {
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, sleeper, (void *)i);
    puts("main exits");
    fflush(stdout);
    pthread_exit(0);
}
