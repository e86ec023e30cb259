/* The alignment-check flag (AC, bit 18 of RFLAGS), as the JVM's CPU probe toggles it: set
 * with popfq, seen again by pushfq after a system call, cleared again. rgrind keeps the
 * guest's AC aside and runs its own code (the dispatcher, here for the system call) with the
 * real flag clear; before it did, its first unaligned access died of SIGBUS (BUS_ADRALN), and
 * `java -version` with it. Only aligned accesses run while AC is set, which natively would
 * fault otherwise. */
#include <stdio.h>

#define AC (1ul << 18)

int main(void) {
    static const char msg[8] __attribute__((aligned(8))) = "in AC\n";
    unsigned long before, during, after;
    __asm__ volatile(
        /* Off the red zone: the pushes below must not clobber the compiler's locals. */
        "subq $128, %%rsp\n"
        "pushfq\n"
        "popq %0\n"
        "movq %0, %%rax\n"
        "orq $0x40000, %%rax\n"
        "pushq %%rax\n"
        "popfq\n"
        /* write(1, msg, 6) */
        "movl $1, %%eax\n"
        "movl $1, %%edi\n"
        "leaq %3, %%rsi\n"
        "movl $6, %%edx\n"
        "syscall\n"
        "pushfq\n"
        "popq %1\n"
        "pushq %0\n"
        "popfq\n"
        "pushfq\n"
        "popq %2\n"
        "addq $128, %%rsp\n"
        : "=&r"(before), "=&r"(during), "=&r"(after)
        : "m"(msg)
        : "rax", "rdi", "rsi", "rdx", "rcx", "r11", "memory", "cc");
    printf("AC before %d, after popfq and a system call %d, after clearing %d\n",
           !!(before & AC), !!(during & AC), !!(after & AC));
    return (during & AC) && !(after & AC) ? 0 : 1;
}
