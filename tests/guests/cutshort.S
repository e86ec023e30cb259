/* cutshort: a block cut short by a fault before the block's counter was bumped (rgrind
 * bumps it before the first instruction that leaves the flags dead, here the `cmp`). The
 * instructions up to the faulting load ran once; the ones after it never. Dies of SIGSEGV.
 * No libc. */
        .globl _start
        .text
_start:
        xor     %ecx, %ecx
        xor     %esi, %esi
        stc
        jmp     1f
1:      adc     $0, %rcx                /* ran: the flags live from here on */
        mov     (%rsi), %al             /* faults */
        adc     $0, %rcx                /* never ran */
        cmp     $1, %rcx
        hlt
