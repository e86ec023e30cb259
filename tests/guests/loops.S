/* loops [fault]: blocks that branch back to their own start, which the translator unrolls
 * (one share of the block counter per copy). No libc.
 * - A self-loop run 1, 2, ..., 9 times (every iteration count modulo the copies): 45
 *   iterations in all.
 * - A self-loop spinning until a 20 ms SIGALRM handler sets a flag: the signal is taken in
 *   the middle of the unrolled code; the exit status is the iteration count's low byte.
 * - `fault`: a self-loop whose 6th iteration loads from address 0 (dies of SIGSEGV). */
        .globl _start
        .text
_start:
        mov     $1, %ecx
outer:
        mov     %ecx, %edx
1:      add     %rdx, %rax              /* 45 times */
        dec     %rdx
        jnz     1b
        inc     %ecx
        cmp     $10, %ecx
        jne     outer

        cmpq    $1, (%rsp)              /* argc > 1: the fault case */
        jne     fault

        mov     $13, %eax               /* rt_sigaction(SIGALRM, &act, 0, 8) */
        mov     $14, %edi
        lea     act(%rip), %rsi
        xor     %edx, %edx
        mov     $8, %r10d
        syscall
        mov     $38, %eax               /* setitimer(ITIMER_REAL, &itv, 0) */
        xor     %edi, %edi
        lea     itv(%rip), %rsi
        xor     %edx, %edx
        syscall
        xor     %ebx, %ebx
2:      inc     %rbx                    /* until the handler ran */
        cmpb    $0, flag(%rip)
        je      2b
        mov     $60, %eax               /* exit(iterations & 0xff) */
        movzbl  %bl, %edi
        syscall

fault:
        xor     %ebx, %ebx
        xor     %r8d, %r8d
        lea     flag(%rip), %rsi
3:      inc     %rbx                    /* 6 times */
        cmp     $6, %rbx
        cmove   %r8, %rsi
        mov     (%rsi), %al             /* faults in the 6th iteration */
        cmp     $100, %rbx
        jne     3b
        hlt

handler:
        movb    $1, flag(%rip)
        ret
restorer:
        mov     $15, %eax               /* rt_sigreturn */
        syscall

        .data
act:    .quad   handler, 0x04000000, restorer, 0   /* SA_RESTORER */
itv:    .quad   0, 0, 0, 20000                     /* once, after 20 ms */
flag:   .byte   0
        .section .note.GNU-stack,"",@progbits
