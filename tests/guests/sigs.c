/* Signal delivery under translation: each part prints what it saw, so native and rgrind output
 * can be compared. Parts: blocking read interrupted (EINTR without SA_RESTART, restarted with
 * it), futex wait interrupted, nested signals, a handler that edits the saved instruction
 * pointer, SIGSEGV on a guard page recovered, SIGFPE from division by zero, sigaltstack,
 * sigprocmask blocking and pending, SA_RESETHAND, timers. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

static volatile sig_atomic_t hits, depth, max_depth;
static sigjmp_buf jb;

static void count(int s) { (void)s; hits++; }

static void set(int sig, void (*h)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, 0);
}

static void part_read_eintr(int restart) {
    int p[2];
    if (pipe(p)) abort();
    set(SIGALRM, count, restart ? SA_RESTART : 0);
    hits = 0;
    pid_t child = fork();
    if (child == 0) { usleep(200000); if (write(p[1], "x", 1) != 1) _exit(1); _exit(0); }
    struct itimerval it = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &it, 0);
    char c = 0;
    ssize_t r = read(p[0], &c, 1);
    int e = errno;
    printf("read restart=%d: r=%zd errno=%s hits=%d\n", restart, r, r < 0 ? (e == EINTR ? "EINTR" : "other") : "-", (int)hits);
    while (waitpid(child, 0, 0) < 0 && errno == EINTR) {}
    close(p[0]); close(p[1]);
}

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready;
static pthread_t waiter;

static void *wait_cond(void *a) {
    (void)a;
    pthread_mutex_lock(&m);
    while (!ready) pthread_cond_wait(&cv, &m);
    pthread_mutex_unlock(&m);
    return 0;
}

static void part_futex(void) {
    set(SIGUSR1, count, SA_RESTART);
    hits = 0;
    pthread_create(&waiter, 0, wait_cond, 0);
    usleep(50000);
    pthread_kill(waiter, SIGUSR1);
    usleep(50000);
    pthread_mutex_lock(&m); ready = 1; pthread_cond_signal(&cv); pthread_mutex_unlock(&m);
    pthread_join(waiter, 0);
    printf("futex: hits=%d joined\n", (int)hits);
}

static void nested(int s) {
    depth++;
    if (depth > max_depth) max_depth = depth;
    if (s == SIGUSR2) raise(SIGUSR1);
    depth--;
}

static void part_nested(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = nested;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, 0);
    sigaction(SIGUSR2, &sa, 0);
    max_depth = 0;
    raise(SIGUSR2);
    printf("nested: max_depth=%d\n", (int)max_depth);
}

static void skip_insn(int s, siginfo_t *si, void *ucv) {
    (void)s; (void)si;
    ucontext_t *uc = ucv;
    /* The faulting instruction is `mov (%rax),%eax` (2 bytes), see below. */
    uc->uc_mcontext.gregs[REG_RIP] += 2;
    uc->uc_mcontext.gregs[REG_RAX] = 1234;
}

static void part_edit_rip(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = skip_insn;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, 0);
    long out;
    __asm__ volatile("xor %%eax,%%eax\n\tmov (%%rax),%%eax\n\t" : "=a"(out) : : "memory");
    printf("edit rip: rax=%ld\n", out);
}

static void jump_back(int s, siginfo_t *si, void *uc) {
    (void)uc;
    printf("fault: sig=%d code=%d addr_ok=%d\n", s, si->si_code, si->si_addr != 0 || s == SIGFPE);
    siglongjmp(jb, 1);
}

static void part_guard_and_fpe(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = jump_back;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, 0);
    sigaction(SIGFPE, &sa, 0);
    char *page = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mprotect(page, 4096, PROT_NONE);
    if (!sigsetjmp(jb, 1)) { page[10] = 1; puts("guard: no fault"); }
    else puts("guard: recovered");
    volatile int zero = 0, x = 7;
    if (!sigsetjmp(jb, 1)) { x = x / zero; puts("fpe: no fault"); }
    else puts("fpe: recovered");
    munmap(page, 8192);
}

static void on_alt(int s) { char here; (void)s; extern char alt[]; hits = (&here >= alt && &here < alt + 65536); }
char alt[65536];

static void part_altstack_mask_resethand(void) {
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    sigaltstack(&ss, 0);
    set(SIGUSR2, on_alt, SA_ONSTACK);
    hits = 0;
    raise(SIGUSR2);
    printf("altstack: on_alt=%d\n", (int)hits);

    set(SIGUSR1, count, 0);
    sigset_t b, pend;
    sigemptyset(&b); sigaddset(&b, SIGUSR1);
    sigprocmask(SIG_BLOCK, &b, 0);
    hits = 0;
    raise(SIGUSR1);
    sigpending(&pend);
    printf("mask: hits_while_blocked=%d pending=%d\n", (int)hits, sigismember(&pend, SIGUSR1));
    sigprocmask(SIG_UNBLOCK, &b, 0);
    printf("mask: hits_after_unblock=%d\n", (int)hits);

    set(SIGUSR1, count, SA_RESETHAND);
    raise(SIGUSR1);
    struct sigaction now;
    sigaction(SIGUSR1, 0, &now);
    printf("resethand: hits=%d now_default=%d\n", (int)hits, now.sa_handler == SIG_DFL);
}

static void part_timer_loop(void) {
    set(SIGVTALRM, count, SA_RESTART);
    hits = 0;
    struct itimerval it = {{0, 2000}, {0, 2000}};
    setitimer(ITIMER_VIRTUAL, &it, 0);
    volatile unsigned long x = 0;
    while (hits < 5) x += 3;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_VIRTUAL, &off, 0);
    printf("timer: at_least_5=%d\n", hits >= 5);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "abort")) { puts("aborting"); fflush(stdout); abort(); }
    if (argc > 1 && !strcmp(argv[1], "segv")) { puts("crashing"); fflush(stdout); *(volatile int *)8 = 1; }
    if (argc > 1 && !strcmp(argv[1], "kill")) { puts("term"); fflush(stdout); kill(getpid(), SIGTERM); pause(); }
    part_read_eintr(0);
    part_read_eintr(1);
    part_futex();
    part_nested();
    part_edit_rip();
    part_guard_and_fpe();
    part_altstack_mask_resethand();
    part_timer_loop();
    return 0;
}
