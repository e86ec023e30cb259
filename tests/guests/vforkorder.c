/* vfork and clone(CLONE_VM|CLONE_VFORK): the parent runs only after the child exits or execs. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static char stack[65536];
static int child(void *a) { (void)a; usleep(100000); write(1, "child first\n", 12); _exit(0); }
int main(void) {
    pid_t p = vfork();
    if (p == 0) { usleep(100000); write(1, "vfork child first\n", 18); _exit(0); }
    write(1, "vfork parent after\n", 19);
    waitpid(p, 0, 0);
    pid_t c = clone(child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, 0);
    write(1, "clone parent after\n", 19);
    waitpid(c, 0, 0);
    if (vfork() == 0) execl("/bin/echo", "echo", "exec'd child", (char *)0);
    wait(0);
    puts("done");
    return 0;
}
