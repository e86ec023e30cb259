/* 64 threads created and joined three times; some end with pthread_exit, one ends while others run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
enum { N = 64 };
static long results[N];
static void *work(void *arg) {
    long id = (long)arg, s = 0;
    for (long i = 0; i < 20000 + id * 100; i++) s += i ^ id;
    if (id % 7 == 0) pthread_exit((void *)s);
    results[id] = s;
    return (void *)s;
}
static void *early(void *arg) { (void)arg; return (void *)42; }
int main(void) {
    for (int round = 0; round < 3; round++) {
        pthread_t th[N];
        for (long i = 0; i < N; i++) if (pthread_create(&th[i], 0, work, (void *)i)) { puts("create failed"); return 1; }
        long total = 0;
        for (int i = 0; i < N; i++) { void *r; pthread_join(th[i], &r); total += (long)r; }
        printf("round %d total=%ld\n", round, total);
    }
    pthread_t e; pthread_create(&e, 0, early, 0); void *r; pthread_join(e, &r);
    printf("early=%ld\n", (long)r);
    return 0;
}
