/* tiny: no libc, no dynamic loader, no PIE. _start writes "tiny argc=N\n" with raw syscalls
 * and exits with status 5. Checks that the initial stack holds argc at (%rsp). */
        .globl _start
        .text
_start:
        mov     (%rsp), %rax            /* argc */
        cmp     $9, %rax
        jbe     1f
        mov     $9, %rax                /* print at most one digit */
1:      add     $'0', %al
        lea     digit(%rip), %rdi
        mov     %al, (%rdi)
        mov     $1, %eax                /* write(1, msg, len) */
        mov     $1, %edi
        lea     msg(%rip), %rsi
        mov     $len, %edx
        syscall
        mov     $60, %eax               /* exit(5) */
        mov     $5, %edi
        syscall
        hlt

        .data
msg:    .ascii  "tiny argc="
digit:  .ascii  "?\n"
        .set    len, . - msg
        .section .note.GNU-stack,"",@progbits
