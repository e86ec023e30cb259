/* proc: process creation. proc <mode>
 *   fork      child prints and exits 3; parent waits and prints the child's wait status
 *   forkexec  child execve()s /bin/echo (a second program, a second pid); parent waits
 *   vfork     vfork() then execve /bin/echo in the child; parent waits
 *   execve    replaces itself with /bin/echo (same pid)
 *   spawn     posix_spawn of /bin/echo; parent waits
 *   pipeline  system("sh -c ...") running a three-stage pipeline
 * Output is written with write(2) or flushed before every fork, so nothing is printed twice. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void report(const char *what, pid_t pid) {
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) { perror("waitpid"); exit(1); }
    if (WIFEXITED(st)) printf("%s: child exited %d\n", what, WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) printf("%s: child killed by signal %d\n", what, WTERMSIG(st));
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "fork";
    char *echo_argv[] = {"/bin/echo", "echo", "from", (char *)mode, NULL};
    printf("proc %s: start\n", mode);
    fflush(stdout);
    if (strcmp(mode, "fork") == 0) {
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) {
            printf("child: running, parent is alive: %d\n", getppid() > 1);
            fflush(stdout);
            _exit(3);
        }
        report("fork", pid);
    } else if (strcmp(mode, "forkexec") == 0 || strcmp(mode, "vfork") == 0) {
        pid_t pid = mode[0] == 'v' ? vfork() : fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) {
            execve(echo_argv[0], echo_argv + 1, environ);
            _exit(127);
        }
        report(mode, pid);
    } else if (strcmp(mode, "execve") == 0) {
        execve(echo_argv[0], echo_argv + 1, environ);
        perror("execve");
        return 1;
    } else if (strcmp(mode, "spawn") == 0) {
        pid_t pid;
        int err = posix_spawn(&pid, echo_argv[0], NULL, NULL, echo_argv + 1, environ);
        if (err) { fprintf(stderr, "posix_spawn: %s\n", strerror(err)); return 1; }
        report("spawn", pid);
    } else if (strcmp(mode, "pipeline") == 0) {
        int st = system("echo 'b a c' | tr ' ' '\\n' | sort | tr -d '\\n'; echo");
        printf("pipeline: status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    } else {
        fprintf(stderr, "proc: unknown mode %s\n", mode);
        return 2;
    }
    printf("proc %s: done\n", mode);
    return 0;
}
