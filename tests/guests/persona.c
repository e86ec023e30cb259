/* What the guest sees of its persona (personality(2) and /proc/self/personality), and a
 * child run natively after exec: under a profiling tool rgrind turns address-space
 * randomisation off for itself and must not show or pass on that persona bit. */
#include <stdio.h>
#include <sys/personality.h>
#include <sys/wait.h>
#include <unistd.h>
static void show(const char *who) {
    char buf[32] = "";
    FILE *f = fopen("/proc/self/personality", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
        fclose(f);
    }
    printf("%s persona %#x file %s", who, personality(0xffffffff), buf);
    fflush(stdout);
}
int main(int argc, char **argv) {
    show(argc > 1 ? "child" : "parent");
    if (argc > 1) return 0;
    pid_t p = fork();
    if (p == 0) {
        execl("/proc/self/exe", argv[0], "child", (char *)0);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
    personality(ADDR_NO_RANDOMIZE);
    show("after setting ADDR_NO_RANDOMIZE:");
    return WEXITSTATUS(st);
}
