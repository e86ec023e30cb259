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

int main(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) printf("ymm: %llu\n", (unsigned long long)ymm_upper());
    if (__builtin_cpu_supports("avx2")) printf("xmm: %llu\n", (unsigned long long)xmm_clean_upper());
    if (__builtin_cpu_supports("avx512f")) printf("zmm16: %llu\n", (unsigned long long)zmm16());
    puts("done");
    return 0;
}
