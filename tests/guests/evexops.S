/* evexops: one instruction per line for AVX-512's gathers and scatters, whose elements the
 * opmask enables: each enabled element is an access of its own (Valgrind cannot run them,
 * so the counts are what the program does). Needs AVX-512F. No libc. Exits with 0.
 * The comments name lines for the test (tests/tests/all/cachegrind.rs). */
        .globl _start
        .text
_start:
        lea     buf(%rip), %rdi
        vmovdqu32 idx(%rip), %zmm1
        mov     $0xffff, %eax
        kmovw   %eax, %k1
        vpgatherdd (%rdi,%zmm1,4), %zmm0{%k1}   /* gather 16 */
        vmovdqu32 %zmm0, out(%rip)
        lea     buf+65536(%rip), %rdi
        mov     $0x0f0f, %eax
        kmovw   %eax, %k2
        vpgatherdd (%rdi,%zmm1,4), %zmm0{%k2}   /* gather 8 of 16 */
        vmovdqu32 %zmm0, out(%rip)
        lea     buf+131072(%rip), %rdi
        mov     $0x00ff, %eax
        kmovw   %eax, %k3
        vpscatterdd %zmm0, (%rdi,%zmm1,4){%k3}  /* scatter 8 of 16 */
        vmovdqu64 qidx(%rip), %ymm20
        mov     $0x5, %eax
        kmovw   %eax, %k4
        lea     buf+196608(%rip), %rax
        vpgatherqq (%rax,%ymm20,8), %ymm21{%k4} /* gather 2 of 4 */
        vmovdqu64 %ymm21, out(%rip)
        jmp     1f
1:      mov     $60, %eax
        xor     %edi, %edi
        syscall

        .data
        .balign 64
idx:    .long   0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240
qidx:   .quad   0, 64, 128, 192
        .bss
        .balign 4096
out:    .skip   4096
buf:    .skip   262144
        .section .note.GNU-stack,"",@progbits
