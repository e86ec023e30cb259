/* A loop that only a signal ends: under cache simulation it is chained to its own second
 * entry (past its first fetch check, `Block::line_entry`), which a thread stepping towards a
 * block start must accept as one. */
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>

static volatile sig_atomic_t alarms;
static void on_alarm(int s) { (void)s; alarms++; }

int main(void) {
    signal(SIGALRM, on_alarm);
    struct itimerval it = {{0, 10000}, {0, 10000}};
    setitimer(ITIMER_REAL, &it, 0);
    unsigned long x = 1;
    while (alarms < 5) x = x * 6364136223846793005ul + 1;
    printf("alarms %d%s\n", (int)alarms, x ? "" : " (x 0)");
    return 0;
}
