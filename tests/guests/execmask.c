/* The guest's signal mask as it sees it, and as an exec'd program inherits it: every signal blocked (rgrind keeps SIGTRAP and signal 64 unblocked on the host, but neither may show). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    sigset_t s;
    if (argc > 1) {
        sigprocmask(SIG_SETMASK, 0, &s);
        int missing = 0;
        for (int i = 1; i < 65; i++) if (i != SIGKILL && i != SIGSTOP && i != 32 && i != 33 && !sigismember(&s, i)) { printf("missing %d\n", i); missing++; }
        printf("exec'd: missing=%d\n", missing);
        return 0;
    }
    sigfillset(&s);
    sigprocmask(SIG_SETMASK, &s, 0);
    sigset_t now; sigprocmask(SIG_SETMASK, 0, &now);
    printf("self view: trap=%d 64=%d\n", sigismember(&now, SIGTRAP), sigismember(&now, 64));
    fflush(stdout);
    execl(argv[0], argv[0], "child", (char *)0);
    return 1;
}
