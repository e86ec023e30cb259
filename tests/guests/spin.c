/* Busy-waiting threads: only time slicing lets the other thread run under a run lock. */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
static atomic_int flag;
static void *setter(void *a) { (void)a; for (volatile int i = 0; i < 1000000; i++); atomic_store(&flag, 1); return 0; }
int main(void) {
    pthread_t t; pthread_create(&t, 0, setter, 0);
    while (!atomic_load(&flag)) { }
    pthread_join(t, 0);
    puts("spin done");
    return 0;
}
