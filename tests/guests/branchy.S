/* branchy: one instruction per line for the branch-counting rules of Cachegrind (VEX's
 * exits): a locked read-modify-write and xchg with memory have a CAS retry exit (one Bc each),
 * cmpxchg none; rep movsb with rcx = 3 runs its block 4 times (4 Bc, the rcx == 0 test each
 * time); repe cmpsb stopping at the second byte has 2 entries and 2 repeat tests (4 Bc).
 * Counts come from memory so that VEX cannot fold the first rcx test away. Exits with 0. */
        .globl _start
        .text
_start:
        lea     word(%rip), %rbx
        lock addq $1, (%rbx)
        xchg    %rax, (%rbx)
        lock cmpxchg %rcx, (%rbx)
        lea     src(%rip), %rsi
        lea     dst(%rip), %rdi
        mov     three(%rip), %rcx
        rep movsb
        lea     src(%rip), %rsi
        lea     other(%rip), %rdi
        mov     five(%rip), %rcx
        repe cmpsb
        mov     $60, %eax
        xor     %edi, %edi
        syscall
        hlt

        .data
word:   .quad   0
three:  .quad   3
five:   .quad   5
src:    .ascii  "abcdef"
other:  .ascii  "axcdef"
dst:    .ascii  "......"
        .section .note.GNU-stack,"",@progbits
