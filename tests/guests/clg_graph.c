/* Call graph shapes for the callgrind tests (compiled by tests/all/callgrind.rs with -O0,
 * and with -O2, also stripped): recursion (fib), a longjmp out of recursion (dive),
 * collection toggled by a client request around `measured` when CLG_TOGGLE is defined, and
 * in `alternate` an indirect call site alternating between two callees, chains of returns,
 * PLT calls into libc and (with -O2) tail calls, also through a PLT stub (the fast and
 * inline call/return paths), in `popjmp` a function that pops its own return address, and
 * in `dispatch` an indirect call site with six callees. */
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#ifdef CLG_TOGGLE
#include <valgrind/callgrind.h>
#endif

static jmp_buf env;

__attribute__((noinline)) long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) int dive(int depth) {
    if (depth == 8) longjmp(env, depth);
    return dive(depth + 1) + 1;
}

__attribute__((noinline)) long setup(void) { long s = 0; for (int i = 0; i < 3000; i++) s += i % 7; return s; }
__attribute__((noinline)) long measured(void) { long s = 0; for (int i = 0; i < 1000; i++) s += i % 3; return s; }

__attribute__((noinline)) long sq(long x) { return x * x; }
__attribute__((noinline)) long inc(long x) { return x + 1; }
__attribute__((noinline)) long chain3(long x) { return inc(x) + 1; }
__attribute__((noinline)) long chain2(long x) { return chain3(x) + 1; }
__attribute__((noinline)) long chain1(long x) { return chain2(x) + 1; }
static const char *words[4] = {"a", "call", "graph", "callgrind"};
/* With -O2 these are tail calls: a jump into inc, and a jump into strlen's PLT stub;
 * tail2 jumps into tail_inc (two tail calls' frames popped by inc's return with the call's). */
__attribute__((noinline)) long tail_inc(long x) { return inc(x); }
__attribute__((noinline)) size_t tail_len(const char *s) { return strlen(s); }
__attribute__((noinline)) long tail2(long x) { return tail_inc(x ^ 1); }
__attribute__((noinline)) long alternate(void) {
    long (*fs[2])(long) = {sq, inc};
    long s = 0;
    for (int i = 0; i < 1000; i++)
        s += fs[i & 1](i) + chain1(i) + (long)strlen(words[i & 3]) + tail_inc(i) +
             (long)tail_len(words[(i + 1) & 3]) + tail2(i);
    return s;
}

/* popjmp(n, drop) sums n..1 in a loop; with `drop` it first pops its own return address
 * and runs on in itself: rsp lies above its frame, so at the next block Callgrind unwinds
 * the frame and charges the loop to the caller. The loop's block is entered in popjmp's
 * context too (calls without `drop`): a jump within one function that rgrind's inline jump
 * case must not take in that context after the pop. */
long popjmp(long n, long drop);
__asm__(".text\n.globl popjmp\n.type popjmp, @function\npopjmp:\n"
        "    xor %eax, %eax\n"
        "    test %rsi, %rsi\n"
        "    jz 1f\n"
        "    pop %rcx\n"
        "    jmp 1f\n"
        "1:  add %rdi, %rax\n"
        "    dec %rdi\n"
        "    jnz 1b\n"
        "    test %rsi, %rsi\n"
        "    jz 2f\n"
        "    jmp *%rcx\n"
        "2:  ret\n"
        ".size popjmp, .-popjmp\n");

/* dispatch runs a little interpreter loop: one indirect call site calls six functions in
 * turn, more than the two a calling cost centre plans for (each callee's own call plan
 * then carries the call inline, as in perl's op loop). Every seventh step runs a nested
 * interpreter (dispatch'2): the same call site as another cost centre, whose calls must
 * not take the plans the outer one made. */
static volatile int three = 3;
__attribute__((noinline)) long dispatch(int n, int nested);
__attribute__((noinline)) long op_add(long x) { return x + 3; }
__attribute__((noinline)) long op_mul(long x) { return x * 3; }
__attribute__((noinline)) long op_xor(long x) { return x ^ 0x55; }
__attribute__((noinline)) long op_shr(long x) { return x >> 1; }
__attribute__((noinline)) long op_chain(long x) { return chain3(x) ^ three; }
__attribute__((noinline)) long op_neg(long x) { return -x; }
__attribute__((noinline)) long op_nest(long x) { return dispatch(7, 0) ^ x; }
long dispatch(int n, int nested) {
    static long (*const ops[6])(long) = {op_add, op_mul, op_xor, op_shr, op_chain, op_neg};
    long x = 1;
    for (int i = 0; i < n; i++) {
        x = ops[(i * 5) % 6](x) & 0xffff;
        if (nested && i % 7 == 3) x = op_nest(x) & 0xffff;
    }
    return x;
}

int main(void) {
    long f = fib(10);
    for (int i = 0; i < 8; i++) f += popjmp(20, i & 1);
    int got = 0;
    for (int i = 0; i < 3; i++) {
        int r = setjmp(env);
        if (r == 0) dive(0);
        else got += r;
    }
    long a = setup();
#ifdef CLG_TOGGLE
    CALLGRIND_TOGGLE_COLLECT;
#endif
    long b = measured();
#ifdef CLG_TOGGLE
    CALLGRIND_TOGGLE_COLLECT;
#endif
    long c = alternate();
    long d = dispatch(3000, 1);
    printf("%ld %d %ld %ld %ld %ld\n", f, got, a, b, c, d);
    return 0;
}
