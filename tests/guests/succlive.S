/* succlive: values that must survive a block's end, where the block's data check borrows
 * registers its successors overwrite before reading (dead) and must not borrow those a
 * successor reads (live). Each case sets one bit of the exit status when the value
 * survived: 0x7f natively. No libc.
 * A check borrows the lowest-numbered dead registers first, so each case leaves only the
 * register it tests looking dead to a wrong analysis. */
        .globl _start
        .text
_start:
        xor     %ebx, %ebx              /* the bits */

        /* 1: a byte write in the successor keeps the rest of rcx. */
        mov     $0x1234, %ecx
        mov     (%rsp), %rdx
        jmp     1f
1:      mov     $0x55, %cl
        cmp     $0x1255, %rcx
        jne     2f
        or      $1, %ebx
2:
        /* 2: a cmov in the successor may keep rcx. */
        mov     $7, %ecx
        mov     (%rsp), %rdx
        jmp     1f
1:      test    %rsp, %rsp
        cmovz   %rbx, %rcx
        cmp     $7, %rcx
        jne     2f
        or      $2, %ebx
2:
        /* 3: inc in the successor leaves CF, which the block's cmp set. */
        mov     $3, %edi
        cmp     $5, %rdi                /* CF = 1 */
        mov     (%rsp), %rdx
        mov     (%rsp), %rdx            /* an MRU hit: its own compare clears CF */
        jmp     1f
1:      inc     %rax
        jnc     2f
        or      $4, %ebx
2:
        /* 4: one successor overwrites rcx, the other reads it. */
        mov     $9, %ecx
        mov     (%rsp), %rdx
        test    %rsp, %rsp
        jz      3f
        cmp     $9, %rcx
        jne     2f
        or      $8, %ebx
        jmp     2f
3:      mov     $1, %ecx
2:
        /* 5: a self-loop whose way out reads rcx. */
        mov     $0x42, %ecx
        mov     $5, %r8d
1:      mov     (%rsp), %rdx
        dec     %r8
        jnz     1b
        cmp     $0x42, %rcx
        jne     2f
        or      $16, %ebx
2:
        /* 6: the callee reads rcx. */
        mov     $0x77, %ecx
        mov     (%rsp), %rdx
        call    callee
        cmp     $0x77, %rax
        jne     2f
        or      $32, %ebx
2:
        /* 7: the successor's system call reads rax. */
        mov     $39, %eax               /* getpid */
        mov     (%rsp), %rdx
        jmp     1f
1:      syscall
        test    %rax, %rax
        jle     2f
        or      $64, %ebx
2:
        mov     $60, %eax               /* exit(bits) */
        mov     %ebx, %edi
        syscall

callee:
        mov     %rcx, %rax
        ret
        .section .note.GNU-stack,"",@progbits
