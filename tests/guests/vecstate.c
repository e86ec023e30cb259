/* Values kept in vector registers (ymm upper halves; zmm16 and k1 when AVX-512 is there) across
 * many blocks, branches and calls, as optimised library code does: instrumentation helpers must
 * not clobber any of the extended state. Prints checksums to compare with a native run. */
#include <stdio.h>
#include <stdint.h>

__attribute__((noinline)) static uint64_t step(uint64_t x) { return x * 6364136223846793005ull + 1442695040888963407ull; }

__attribute__((target("avx2"), noinline)) static uint64_t ymm_upper(void) {
    uint64_t out[4], x = 1;
    __asm__ volatile("vpcmpeqd %%ymm1, %%ymm1, %%ymm1" ::: "xmm1");
    for (int i = 0; i < 2000; i++) {
        x = step(x);
        if (x & 1) x ^= 0x55; else x += 3;
    }
    __asm__ volatile("vmovdqu %%ymm1, %0" : "=m"(out) :: "memory");
    return out[0] + out[1] + out[2] + out[3] + (x & 0xff);
}

/* A value in xmm2's low half with every upper half zero (after vzeroupper): the trampolines
 * restore such a state without marking the upper halves in use, and must still restore xmm2. */
__attribute__((target("avx2"), noinline)) static uint64_t xmm_clean_upper(void) {
    uint64_t out[4], x = 3;
    __asm__ volatile("vzeroupper\n\tvpcmpeqd %%xmm2, %%xmm2, %%xmm2" ::: "xmm2");
    for (int i = 0; i < 2000; i++) {
        x = step(x);
        if (x & 4) x ^= 0x77; else x += 9;
    }
    __asm__ volatile("vmovdqu %%ymm2, %0" : "=m"(out) :: "memory");
    return out[0] + 3 * out[1] + 5 * out[2] + 7 * out[3] + (x & 0xff);
}

__attribute__((target("avx512f"), noinline)) static uint64_t zmm16(void) {
    uint64_t out[8], x = 7;
    __asm__ volatile("vpternlogd $0xff, %%zmm16, %%zmm16, %%zmm16\n\tkxnorw %%k1, %%k1, %%k1" ::: "xmm16", "k1");
    for (int i = 0; i < 2000; i++) {
        x = step(x);
        if (x & 2) x ^= 0x33; else x += 5;
    }
    uint32_t k;
    __asm__ volatile("vmovdqu64 %%zmm16, %0\n\tkmovw %%k1, %k1" : "=m"(out), "=r"(k) :: "memory");
    uint64_t s = k;
    for (int i = 0; i < 8; i++) s += out[i];
    return s + (x & 0xff);
}

/* Integer-only callees, called through a table: one call site with four callees takes the
 * tool's own paths (Callgrind's fast path in Rust) as often as its inline ones, which run
 * without the guest's vector registers saved. */
static uint64_t s0(uint64_t x) { return x * 3 + 1; }
static uint64_t s1(uint64_t x) { return (x >> 3) ^ (x << 5); }
static uint64_t s2(uint64_t x) { return step(x); }
static uint64_t s3(uint64_t x) { return x + 0x9e3779b97f4a7c15ull; }
static uint64_t (*const volatile table[4])(uint64_t) = {s0, s1, s2, s3};

/* Every xmm register holds a value of its own across those calls and returns. */
__attribute__((noinline)) static uint64_t xmm_all(void) {
    static uint64_t in[32], out[32];
    for (int i = 0; i < 32; i++) in[i] = 0x0123456789abcdefull * (uint64_t)(i + 1) + (uint64_t)i;
    __asm__ volatile(
        "movdqu 0(%0), %%xmm0\n\t"
        "movdqu 16(%0), %%xmm1\n\t"
        "movdqu 32(%0), %%xmm2\n\t"
        "movdqu 48(%0), %%xmm3\n\t"
        "movdqu 64(%0), %%xmm4\n\t"
        "movdqu 80(%0), %%xmm5\n\t"
        "movdqu 96(%0), %%xmm6\n\t"
        "movdqu 112(%0), %%xmm7\n\t"
        "movdqu 128(%0), %%xmm8\n\t"
        "movdqu 144(%0), %%xmm9\n\t"
        "movdqu 160(%0), %%xmm10\n\t"
        "movdqu 176(%0), %%xmm11\n\t"
        "movdqu 192(%0), %%xmm12\n\t"
        "movdqu 208(%0), %%xmm13\n\t"
        "movdqu 224(%0), %%xmm14\n\t"
        "movdqu 240(%0), %%xmm15"
        :: "r"(in)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
          "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    uint64_t x = 11;
    for (int i = 0; i < 3000; i++) {
        x = table[(x >> 7) & 3](x);
        if (x & 8) x ^= 0x99; else x += 13;
    }
    __asm__ volatile(
        "movdqu %%xmm0, 0(%0)\n\t"
        "movdqu %%xmm1, 16(%0)\n\t"
        "movdqu %%xmm2, 32(%0)\n\t"
        "movdqu %%xmm3, 48(%0)\n\t"
        "movdqu %%xmm4, 64(%0)\n\t"
        "movdqu %%xmm5, 80(%0)\n\t"
        "movdqu %%xmm6, 96(%0)\n\t"
        "movdqu %%xmm7, 112(%0)\n\t"
        "movdqu %%xmm8, 128(%0)\n\t"
        "movdqu %%xmm9, 144(%0)\n\t"
        "movdqu %%xmm10, 160(%0)\n\t"
        "movdqu %%xmm11, 176(%0)\n\t"
        "movdqu %%xmm12, 192(%0)\n\t"
        "movdqu %%xmm13, 208(%0)\n\t"
        "movdqu %%xmm14, 224(%0)\n\t"
        "movdqu %%xmm15, 240(%0)"
        :: "r"(out) : "memory");
    uint64_t s = x & 0xff;
    for (int i = 0; i < 32; i++) s += (out[i] ^ in[i]) * (uint64_t)(i + 1);
    return s;
}

int main(void) {
    __builtin_cpu_init();
    printf("xmm0-15: %llu\n", (unsigned long long)xmm_all());
    if (__builtin_cpu_supports("avx2")) printf("ymm: %llu\n", (unsigned long long)ymm_upper());
    if (__builtin_cpu_supports("avx2")) printf("xmm: %llu\n", (unsigned long long)xmm_clean_upper());
    if (__builtin_cpu_supports("avx512f")) printf("zmm16: %llu\n", (unsigned long long)zmm16());
    puts("done");
    return 0;
}
