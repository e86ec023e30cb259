/* Code in a shared file mapping whose file is cut short under it: running code past the new
 * end faults (SIGBUS natively). rgrind has read that page before, to translate `one`, and
 * reads it again to translate `two`: its own read faults and must become the guest's fault
 * (SIGSEGV under rgrind, as for any unreadable code), not a crash of rgrind. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static sigjmp_buf env;
static void on_fault(int sig) { siglongjmp(env, sig); }

/* mov eax, v; ret */
static void gen(unsigned char *at, int v) {
    at[0] = 0xb8;
    memcpy(at + 1, &v, 4);
    at[5] = 0xc3;
}

int main(void) {
    int fd = memfd_create("code", 0);
    if (fd < 0 || ftruncate(fd, 2 * 4096) != 0) return 2;
    unsigned char *rw = mmap(0, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    unsigned char *rx = mmap(0, 2 * 4096, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
    if (rw == MAP_FAILED || rx == MAP_FAILED) return 3;
    gen(rw + 4096, 1);
    gen(rw + 4096 + 64, 2);
    int (*volatile one)(void) = (int (*)(void))(rx + 4096);
    int (*volatile two)(void) = (int (*)(void))(rx + 4096 + 64);
    printf("one=%d\n", one());
    fflush(stdout);
    if (ftruncate(fd, 4096) != 0) return 4;
    signal(SIGBUS, on_fault);
    signal(SIGSEGV, on_fault);
    if (sigsetjmp(env, 1) == 0) {
        printf("two=%d\n", two());
        return 5;
    }
    printf("faulted past the end\n");
    return 0;
}
