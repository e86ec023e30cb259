/* gotswap: calls and jumps through a memory slot (`call *slot(%rip)`, `jmp *slot(%rip)`, as
 * PLT stubs and -fno-plt calls do) whose function changes every third round. rgrind links
 * such a jump straight to the function the slot held when it was translated; the other
 * function must still be reached. Prints the sum of all results in hex and exits with 0. */
#include "print_hex.inc"
        .globl _start
        .text
_start:
        xor     %r12d, %r12d            /* sum */
        mov     $300, %r13d             /* rounds */
1:      mov     %r13, %rdi
        call    *slot(%rip)
        add     %rax, %r12
        mov     %r13, %rdi
        call    tail
        add     %rax, %r12
        mov     %r13, %rax              /* every third round: the other function */
        xor     %edx, %edx
        mov     $3, %ecx
        div     %rcx
        test    %rdx, %rdx
        jnz     2f
        lea     f1(%rip), %rax
        lea     f2(%rip), %rcx
        cmp     %rax, slot(%rip)
        cmove   %rcx, %rax
        mov     %rax, slot(%rip)
2:      dec     %r13
        jnz     1b
        print_hex %r12, out
        mov     $60, %eax               /* exit(0) */
        xor     %edi, %edi
        syscall
        hlt

f1:     lea     1(%rdi), %rax
        ret
f2:     lea     (%rdi,%rdi,2), %rax
        ret
tail:   jmp     *slot(%rip)

        .section .rodata
hex:    .ascii  "0123456789abcdef"

        .data
        .balign 8
slot:   .quad   f1
out:    .fill   17, 1, 0
        .section .note.GNU-stack,"",@progbits
