/* dflag: the direction flag survives rgrind's helper calls. With DF set, a block boundary
 * and a first call (callgrind's full block-start routine, whose trampoline clears DF and
 * restores it), `f` records DF and `rep movsb` copies backwards. Prints "abcd1", exits 0. */
        .globl _start
        .text
_start:
        lea     src+3(%rip), %rsi
        lea     dst+3(%rip), %rdi
        mov     $4, %ecx
        std
        jmp     1f              /* a block boundary with DF set */
1:      call    f               /* and a call: callgrind's slow path */
        rep movsb
        cld
        mov     $1, %eax
        mov     $1, %edi
        lea     dst(%rip), %rsi
        mov     $5, %edx
        syscall
        mov     $60, %eax
        xor     %edi, %edi
        syscall
f:      pushf
        pop     %rax
        shr     $10, %rax
        and     $1, %eax
        add     $'0', %al
        mov     %al, dst+4(%rip)
        ret
        .data
src:    .ascii  "abcd"
dst:    .ascii  "....?"
        .section .note.GNU-stack,"",@progbits
