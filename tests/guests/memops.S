/* memops: one instruction per line for data accesses whose addresses the operand alone does
 * not give, for the SIMD loads VEX splits into elements, and for the bit instructions on
 * registers, which VEX does through a stack slot 288 bytes below rsp, and xsave/xrstor,
 * whose x87 part depends on the mask in eax (glibc's 0xee leaves it out). Needs AVX2 and FMA.
 * No libc.
 * Each access of interest touches a line nothing touched before (a D1 miss), and where the
 * address is the point, the next line reads the same line again (a hit only if the access
 * before it went to the right place). Every result is stored or left in a register of its
 * own, so that Valgrind drops no load as dead. Exits with 0.
 * With an argument, only `xlat` (which Valgrind cannot decode): exits with table[200] = 7.
 * The comments name lines for the test (tests/tests/all/cachegrind.rs). */
        .globl _start
        .text
_start:
        cmpq    $1, (%rsp)
        jne     xlat_part
        lea     buf(%rip), %rbx
        lea     out(%rip), %rsi
        mov     $1600, %rax
        bt      %rax, (%rbx)                    /* bt+200 */
        setc    %cl
        movb    200(%rbx), %r8b                 /* after bt+200 */
        mov     $-800, %rax
        bt      %eax, 4096(%rbx)                /* bt-100 */
        setc    %cl
        movb    3996(%rbx), %r9b                /* after bt-100 */
        mov     $3200, %rax
        bts     %rax, (%rbx)                    /* bts+400 */
        movb    400(%rbx), %r10b                /* after bts+400 */
        mov     $6400, %rax
        lock btc %rax, (%rbx)                   /* lock btc+800 */
        btq     $35, 8192(%rbx)                 /* bt imm */
        setc    %cl
        vmovdqu idx(%rip), %ymm1
        vpcmpeqd %ymm2, %ymm2, %ymm2
        lea     buf+16384(%rip), %rdi
        vpgatherdd %ymm2, (%rdi,%ymm1,4), %ymm0 /* gather 8 */
        vmovdqu %ymm0, (%rsi)
        vmovdqu halfmask(%rip), %ymm2
        lea     buf+32768(%rip), %rdi
        vpgatherdd %ymm2, (%rdi,%ymm1,4), %ymm0 /* gather 4 of 8 */
        vmovdqu %ymm0, (%rsi)
        vmovdqu qidx(%rip), %xmm1
        vpcmpeqd %xmm2, %xmm2, %xmm2
        lea     buf+49152(%rip), %rdi
        vpgatherqq %xmm2, (%rdi,%xmm1,8), %xmm0 /* gather 2 */
        vmovdqu %xmm0, (%rsi)
        vmovdqu halfmask(%rip), %ymm2
        lea     buf+57344(%rip), %rdi
        vmaskmovps (%rdi), %ymm2, %ymm0         /* maskmov load 4 of 8 */
        vmaskmovps %ymm0, %ymm2, 256(%rdi)      /* maskmov store 4 of 8 */
        vpmaskmovd 512(%rdi), %xmm2, %xmm3      /* maskmov load 2 of 4 */
        vmovdqu %xmm3, (%rsi)
        vfmadd231ps 1024(%rdi), %ymm1, %ymm0    /* fma 8 */
        vmovdqu %ymm0, (%rsi)
        roundps $1, 1536(%rdi), %xmm4           /* roundps 4 */
        vmovdqu %xmm4, (%rsi)
        cvtps2pd 2048(%rdi), %xmm4              /* cvtps2pd 2 */
        vmovdqu %xmm4, (%rsi)
        vmovddup 2560(%rdi), %ymm5              /* vmovddup 2 */
        vmovdqu %ymm5, (%rsi)
        lea     buf+65536(%rip), %rdi
        maskmovdqu %xmm2, %xmm1                 /* maskmovdqu */
        lea     xarea(%rip), %rbx
        mov     $0xee, %eax
        xor     %edx, %edx
        xsave   (%rbx)                          /* xsave 0xee */
        xrstor  (%rbx)                          /* xrstor 0xee */
        mov     $7, %eax
        xsave   (%rbx)                          /* xsave 7 */
        xrstor  (%rbx)                          /* xrstor 7 */
        mov     $45, %rax
        mov     $0x123456789, %rcx
        bt      %rax, %rcx                      /* bt reg */
        setc    %r11b
        bts     %rax, %rcx                      /* bts reg */
        mov     $35, %edx
        btr     %edx, %ecx                      /* btr reg32 */
        btc     %dx, %cx                        /* btc reg16 */
        mov     %rcx, (%rsi)
        jmp     1f
1:      mov     $60, %eax
        xor     %edi, %edi
        syscall

xlat_part:
        lea     table(%rip), %rbx
        mov     $200, %eax
        xlat                                    /* xlat+200 */
        movb    200(%rbx), %dl                  /* after xlat+200 */
        movzbl  %al, %edi
        mov     $60, %eax
        syscall

        .data
        .balign 32
idx:    .long   0, 32, 64, 96, 128, 160, 192, 224
halfmask: .long -1, 0, -1, 0, -1, 0, 0, -1
qidx:   .quad   0, 100
        .balign 64
table:  .fill   200, 1, 0
        .byte   7
        .bss
        .balign 4096
out:    .skip   4096
xarea:  .skip   4096
buf:    .skip   131072
        .section .note.GNU-stack,"",@progbits
