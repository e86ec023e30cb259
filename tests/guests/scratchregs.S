/* scratchregs: memory accesses next to instructions that write rax or rcx, with every general
 * register live, so that each data check borrows rax and rcx (no dead register to take) and
 * must save the values the instruction before it wrote: a full write, a partial one, an
 * implicit one (`mul`), a conditional one (`cmov`), an exchange with memory. Prints the sum of
 * all registers and the data words in hex (the same natively and under any tool). No libc. */
#include "print_hex.inc"
        .globl _start
        .text
_start:
        lea     data(%rip), %rdi
        mov     $0x1111, %eax
        mov     $0x2222, %ecx
        mov     $0x3333, %edx
        mov     $0x4444, %ebx
        mov     $0x5555, %esi
        mov     $0x6666, %ebp
        mov     $0x7777, %r8d
        mov     $0x8888, %r9d
        mov     $0x9999, %r10d
        mov     $0xaaaa, %r11d
        mov     $0xbbbb, %r12d
        mov     $0xcccc, %r13d
        mov     $0xdddd, %r14d
        mov     $0xeeee, %r15d

        add     (%rdi), %eax            /* writes rax */
        add     %edx, 8(%rdi)
        sub     16(%rdi), %ecx          /* writes rcx */
        add     %ebx, 24(%rdi)
        mov     32(%rdi), %al           /* writes al only */
        add     %esi, 40(%rdi)
        add     %esi, 48(%rdi)
        mul     %rbx                    /* writes rax and rdx, no memory */
        add     %esi, 56(%rdi)
        cmp     %rsi, %rsi
        cmovz   64(%rdi), %rcx          /* a conditional write (taken) */
        add     %ebp, 72(%rdi)
        xchg    %rax, 80(%rdi)          /* swaps with memory */
        add     %esi, 88(%rdi)
        lea     3(%rax,%rcx,2), %rcx    /* no memory, writes rcx */
        add     %r8d, 96(%rdi)
        add     %rcx, %rax

        /* The sum of every register and data word, in r8 (all registers read here). */
        add     %rax, %r8
        add     %rcx, %r8
        add     %rdx, %r8
        add     %rbx, %r8
        add     %rsi, %r8
        add     %rbp, %r8
        add     %r9, %r8
        add     %r10, %r8
        add     %r11, %r8
        add     %r12, %r8
        add     %r13, %r8
        add     %r14, %r8
        add     %r15, %r8
        xor     %ecx, %ecx
1:      add     (%rdi,%rcx,8), %r8
        rol     $7, %r8
        inc     %ecx
        cmp     $13, %ecx
        jne     1b

        print_hex %r8, out
        mov     $60, %eax               /* exit(0) */
        xor     %edi, %edi
        syscall

        .section .rodata
hex:    .ascii  "0123456789abcdef"

        .data
        .balign 64
data:   .quad   0x0102030405060708, 0x1112131415161718, 0x2122232425262728, 0x3132333435363738
        .quad   0x4142434445464748, 0x5152535455565758, 0x6162636465666768, 0x7172737475767778
        .quad   0x8182838485868788, 0x9192939495969798, 0xa1a2a3a4a5a6a7a8, 0xb1b2b3b4b5b6b7b8
        .quad   0xc1c2c3c4c5c6c7c8
out:    .fill   17, 1, 0
        .section .note.GNU-stack, "", @progbits
