/* auxv: what the loader hands to a new process. Prints argv, the whole environment in order,
 * selected auxiliary-vector facts as 0/1 checks (so native and translated output compare equal),
 * the /proc/self/exe link and /proc/self/cmdline. Built as PIE, -no-pie, -static and -static-pie. */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

extern char **environ;
extern char _start[];

struct main_phdr { const ElfW(Phdr) *phdr; size_t phnum; int seen; };

static int first_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct main_phdr *m = data;
    if (!m->seen) { m->phdr = info->dlpi_phdr; m->phnum = info->dlpi_phnum; m->seen = 1; }
    return 1;   /* the main program is reported first; stop there */
}

int main(int argc, char **argv, char **envp) {
    for (int i = 0; i < argc; i++) printf("argv[%d]=%s\n", i, argv[i]);
    int n_env = 0;
    for (char **e = environ; *e; e++, n_env++) printf("env: %s\n", *e);
    printf("n_env=%d\n", n_env);

    printf("AT_PAGESZ=%lu\n", getauxval(AT_PAGESZ));
    printf("AT_ENTRY is _start: %d\n", getauxval(AT_ENTRY) == (unsigned long)_start);

    struct main_phdr m = {0};
    dl_iterate_phdr(first_object, &m);
    const ElfW(Phdr) *phdr = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    printf("AT_PHDR matches dl_iterate_phdr: %d\n", m.seen && m.phdr == phdr);
    printf("AT_PHNUM matches dl_iterate_phdr: %d\n", m.seen && m.phnum == getauxval(AT_PHNUM));
    printf("AT_PHENT is sizeof(Phdr): %d\n", getauxval(AT_PHENT) == sizeof(ElfW(Phdr)));
    int dynamic = 0;
    for (size_t i = 0; phdr && i < getauxval(AT_PHNUM); i++) dynamic |= phdr[i].p_type == PT_INTERP;
    printf("dynamic=%d AT_BASE nonzero=%d\n", dynamic, getauxval(AT_BASE) != 0);

    const char *execfn = (const char *)getauxval(AT_EXECFN);
    printf("AT_EXECFN=%s\n", execfn ? execfn : "(null)");
    const unsigned char *rnd = (const unsigned char *)getauxval(AT_RANDOM);
    volatile unsigned char x = 0;
    for (int i = 0; rnd && i < 16; i++) x ^= rnd[i];
    printf("AT_RANDOM readable: %d\n", rnd != NULL);
    /* glibc's getauxval(AT_HWCAP) on x86-64 is its own platform mask, so read the raw vector,
     * which follows the environment block on the initial stack. */
    unsigned long hwcap = 0;
    char **e = envp;
    while (*e) e++;
    for (ElfW(auxv_t) *av = (ElfW(auxv_t) *)(e + 1); av->a_type != AT_NULL; av++)
        if (av->a_type == AT_HWCAP) hwcap = av->a_un.a_val;
    const unsigned long fpu_sse_sse2 = (1ul << 0) | (1ul << 25) | (1ul << 26);
    printf("AT_HWCAP has fpu,sse,sse2: %d\n", (hwcap & fpu_sse_sse2) == fpu_sse_sse2);
    printf("AT_UID/AT_EUID/AT_GID/AT_EGID match: %d\n",
           getauxval(AT_UID) == getuid() && getauxval(AT_EUID) == geteuid() &&
           getauxval(AT_GID) == getgid() && getauxval(AT_EGID) == getegid());
    printf("AT_SECURE=%lu\n", getauxval(AT_SECURE));

    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n < 0 ? 0 : n] = 0;
    printf("exe=%s\n", exe);

    char cmd[8192];
    int fd = open("/proc/self/cmdline", O_RDONLY);
    ssize_t len = fd < 0 ? 0 : read(fd, cmd, sizeof cmd - 1);
    if (fd >= 0) close(fd);
    printf("cmdline=");
    for (ssize_t i = 0; i < len; i++) putchar(cmd[i] ? cmd[i] : '|');
    putchar('\n');
    return 0;
}
