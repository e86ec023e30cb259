/* samelines: a line table whose consecutive ranges share a line number across files, as
 * when a header's code is inlined on a line of the same number. Valgrind's reader extends
 * the first range over the next one with the same number (`addLoc`), keeping its file:
 * one.c:50 covers three instructions, two.h:51 two, one.c:52 the last three. No libc. */
        .file 1 "one.c"
        .file 2 "two.h"
        .text
        .globl _start
_start:
        .loc 1 50 3
        nop
        .loc 2 50 3
        nop
        nop
        .loc 2 51 3
        nop
        .loc 1 51 3
        nop
        .loc 1 52 3
        mov     $60, %eax
        xor     %edi, %edi
        syscall

        .data
        .quad   1
        .section .note.GNU-stack,"",@progbits
