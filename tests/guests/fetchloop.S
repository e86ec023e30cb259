/* fetchloop: a self-loop whose code spans three 64-byte lines (1000 iterations), which the
 * translator unrolls. With an I1 of one set and two ways the three lines evict each other
 * on every iteration (3000 misses); with enough sets each line misses once. No libc. The
 * data word gives the program a writable segment, without which Valgrind 3.19 reads no line
 * table for it. */
        .globl _start
        .text
_start:
        mov     $1000, %ecx
        jmp     loop
        .p2align 6
        .skip   60, 0xcc
loop:
        add     %rcx, %rax              /* the first line's last bytes */
        .nops   60                      /* long nops into the second line... */
        .nops   60                      /* ...and the third */
        dec     %rcx
        jnz     loop
        mov     $60, %eax               /* exit(0) */
        xor     %edi, %edi
        syscall

        .data
unused: .quad   0
