/* insns: instruction coverage for a binary translator. Each part computes a result with the
 * instructions under test and, where a CPU feature may be missing, with a plain-C reference too;
 * it prints the reference checksum and ok=1 when both agree (ok=1 also when the CPU lacks the
 * feature, so the output is the same on every CPU and under any CPUID a translator reports).
 * Feature-specific code sits in __attribute__((target(...))) functions that run only after a
 * __builtin_cpu_supports check. Set INSNS_VERBOSE=1 to list the features used on stderr.
 * Parts: sse2 ssse3 sse4.1 avx avx2 x87 bmi1 bmi2 popcnt lzcnt aes sha alu rep-strings cpuid
 * rdtsc xgetbv setjmp/longjmp function pointers, switch jump tables, computed goto, fib. */
#include <cpuid.h>
#include <immintrin.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>

#define N 1024
static int verbose;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}
static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull + (h >> 29); }
static uint64_t mix_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = mix(h, b[i]);
    return h;
}

static uint8_t in8a[N], in8b[N];
static uint32_t in32a[N], in32b[N];
static double ind_a[N], ind_b[N];

static void fill(void) {
    for (int i = 0; i < N; i++) {
        in8a[i] = (uint8_t)rnd(); in8b[i] = (uint8_t)rnd();
        in32a[i] = (uint32_t)rnd(); in32b[i] = (uint32_t)rnd();
        ind_a[i] = (double)(int32_t)rnd() / 65536.0; ind_b[i] = (double)(int32_t)rnd() / 1048576.0;
    }
}

static void report(const char *name, int supported, uint64_t ref, uint64_t fast) {
    printf("%-8s sum=%016llx ok=%d\n", name, (unsigned long long)ref, !supported || ref == fast);
    if (verbose) fprintf(stderr, "insns: %s %s\n", name, supported ? "used" : "not supported");
}

/* ---- SSE2 (baseline on x86-64) ---- */
static uint64_t sse2_ref(void) {
    uint64_t h = 1;
    for (int i = 0; i < N; i += 4) {
        for (int j = 0; j < 4; j++) h = mix(h, in32a[i + j] + in32b[i + j]);
        for (int j = 0; j < 4; j += 2) h = mix(h, (uint64_t)in32a[i + j] * in32b[i + j]);
    }
    for (int i = 0; i < N; i += 16) {
        uint64_t s0 = 0, s1 = 0;
        for (int j = 0; j < 8; j++) s0 += (uint64_t)abs(in8a[i + j] - in8b[i + j]);
        for (int j = 8; j < 16; j++) s1 += (uint64_t)abs(in8a[i + j] - in8b[i + j]);
        unsigned mask = 0;
        for (int j = 0; j < 16; j++) mask |= (unsigned)(in8a[i + j] >> 7) << j;
        h = mix(mix(mix(h, s0), s1), mask);
    }
    for (int i = 0; i < N; i += 2) {
        double d0 = ind_a[i] * ind_b[i] + ind_a[i + 1], d1 = ind_a[i + 1] * ind_b[i + 1] + ind_a[i];
        h = mix(h, (uint64_t)(int64_t)(int32_t)d0);
        h = mix(h, (uint64_t)(int64_t)(int32_t)d1);
    }
    return h;
}
static uint64_t sse2_fast(void) {
    uint64_t h = 1;
    for (int i = 0; i < N; i += 4) {
        __m128i a = _mm_loadu_si128((const __m128i *)&in32a[i]), b = _mm_loadu_si128((const __m128i *)&in32b[i]);
        uint32_t s[4]; uint64_t p[2];
        _mm_storeu_si128((__m128i *)s, _mm_add_epi32(a, b));
        _mm_storeu_si128((__m128i *)p, _mm_mul_epu32(a, b));
        for (int j = 0; j < 4; j++) h = mix(h, s[j]);
        for (int j = 0; j < 2; j++) h = mix(h, p[j]);
    }
    for (int i = 0; i < N; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)&in8a[i]), b = _mm_loadu_si128((const __m128i *)&in8b[i]);
        uint64_t s[2];
        _mm_storeu_si128((__m128i *)s, _mm_sad_epu8(a, b));
        h = mix(mix(mix(h, s[0]), s[1]), (unsigned)_mm_movemask_epi8(a));
    }
    for (int i = 0; i < N; i += 2) {
        __m128d a = _mm_loadu_pd(&ind_a[i]), b = _mm_loadu_pd(&ind_b[i]);
        __m128d r = _mm_add_pd(_mm_mul_pd(a, b), _mm_shuffle_pd(a, a, 1));
        int32_t c[4];
        _mm_storeu_si128((__m128i *)c, _mm_cvttpd_epi32(r));
        h = mix(h, (uint64_t)(int64_t)c[0]);
        h = mix(h, (uint64_t)(int64_t)c[1]);
    }
    return h;
}

/* ---- SSSE3 ---- */
static void ssse3_ref_block(const uint8_t *a, const uint8_t *b, uint8_t out[80]) {
    for (int i = 0; i < 16; i++) out[i] = (b[i] & 0x80) ? 0 : a[b[i] & 15];           /* pshufb */
    for (int i = 0; i < 8; i++) {                                                      /* pabsw */
        int16_t v; memcpy(&v, a + 2 * i, 2);
        uint16_t r = (uint16_t)(v < 0 ? -(int32_t)v : v);
        memcpy(out + 16 + 2 * i, &r, 2);
    }
    for (int i = 0; i < 8; i++) {                                                      /* pmaddubsw */
        int32_t s = a[2 * i] * (int8_t)b[2 * i] + a[2 * i + 1] * (int8_t)b[2 * i + 1];
        int16_t r = (int16_t)(s > 32767 ? 32767 : s < -32768 ? -32768 : s);
        memcpy(out + 32 + 2 * i, &r, 2);
    }
    uint32_t x[4], y[4], r[4];                                                         /* phaddd */
    memcpy(x, a, 16); memcpy(y, b, 16);
    r[0] = x[0] + x[1]; r[1] = x[2] + x[3]; r[2] = y[0] + y[1]; r[3] = y[2] + y[3];
    memcpy(out + 48, r, 16);
    for (int i = 0; i < 16; i++) out[64 + i] = i + 5 < 16 ? b[i + 5] : a[i + 5 - 16];  /* palignr 5 */
}
static uint64_t ssse3_ref(void) {
    uint64_t h = 2; uint8_t out[80];
    for (int i = 0; i < N; i += 16) { ssse3_ref_block(in8a + i, in8b + i, out); h = mix_bytes(h, out, 80); }
    return h;
}
__attribute__((target("ssse3"))) static uint64_t ssse3_fast(void) {
    uint64_t h = 2; uint8_t out[80];
    for (int i = 0; i < N; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)&in8a[i]), b = _mm_loadu_si128((const __m128i *)&in8b[i]);
        _mm_storeu_si128((__m128i *)(out + 0), _mm_shuffle_epi8(a, b));
        _mm_storeu_si128((__m128i *)(out + 16), _mm_abs_epi16(a));
        _mm_storeu_si128((__m128i *)(out + 32), _mm_maddubs_epi16(a, b));
        _mm_storeu_si128((__m128i *)(out + 48), _mm_hadd_epi32(a, b));
        _mm_storeu_si128((__m128i *)(out + 64), _mm_alignr_epi8(a, b, 5));
        h = mix_bytes(h, out, 80);
    }
    return h;
}

/* ---- SSE4.1 ---- */
static uint64_t sse41_ref(void) {
    uint64_t h = 3;
    for (int i = 0; i < N; i += 4) {
        for (int j = 0; j < 4; j++) {
            uint32_t a = in32a[i + j], b = in32b[i + j];
            h = mix(h, a * b);                                             /* pmulld */
            h = mix(h, (uint32_t)((int32_t)a < (int32_t)b ? a : b));       /* pminsd */
            h = mix(h, a > b ? a : b);                                     /* pmaxud */
            h = mix(h, in8a[i + j]);                                       /* pmovzxbd */
        }
        int zero = 1;
        for (int j = 0; j < 4; j++) zero &= (in32a[i + j] & in32b[i + j] & 0x01010101u) == 0;
        h = mix(h, (uint64_t)zero);                                        /* ptest */
        if (i + 16 > N) continue;
        uint8_t bl[16];
        for (int j = 0; j < 16; j++) bl[j] = (in8b[i + j] & 0x80) ? in8b[i + j] : in8a[i + j];
        h = mix_bytes(h, bl, 16);                                          /* pblendvb */
    }
    for (int i = 0; i < N; i++) h = mix(h, (uint64_t)(int64_t)__builtin_floor(ind_a[i]));
    return h;
}
__attribute__((target("sse4.1"))) static uint64_t sse41_fast(void) {
    uint64_t h = 3;
    for (int i = 0; i < N; i += 4) {
        __m128i a = _mm_loadu_si128((const __m128i *)&in32a[i]), b = _mm_loadu_si128((const __m128i *)&in32b[i]);
        __m128i mul = _mm_mullo_epi32(a, b), mn = _mm_min_epi32(a, b), mx = _mm_max_epu32(a, b);
        __m128i zx = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(*(const int *)&in8a[i]));
        for (int j = 0; j < 4; j++) {
            uint32_t v[4];
            _mm_storeu_si128((__m128i *)v, mul); h = mix(h, v[j]);
            _mm_storeu_si128((__m128i *)v, mn); h = mix(h, v[j]);
            _mm_storeu_si128((__m128i *)v, mx); h = mix(h, v[j]);
            _mm_storeu_si128((__m128i *)v, zx); h = mix(h, v[j]);
        }
        h = mix(h, (uint64_t)_mm_testz_si128(_mm_and_si128(a, b), _mm_set1_epi32(0x01010101)));
        if (i + 16 > N) continue;
        __m128i ba = _mm_loadu_si128((const __m128i *)&in8a[i]), bb = _mm_loadu_si128((const __m128i *)&in8b[i]);
        uint8_t bl[16];
        _mm_storeu_si128((__m128i *)bl, _mm_blendv_epi8(ba, bb, bb));
        h = mix_bytes(h, bl, 16);
    }
    for (int i = 0; i < N; i += 2) {
        double f[2];
        _mm_storeu_pd(f, _mm_floor_pd(_mm_loadu_pd(&ind_a[i])));
        h = mix(h, (uint64_t)(int64_t)f[0]);
        h = mix(h, (uint64_t)(int64_t)f[1]);
    }
    return h;
}

/* ---- AVX (floating point, 256-bit) ---- */
static uint64_t avx_ref(void) {
    uint64_t h = 4;
    for (int i = 0; i < N; i += 4) {
        double r[4];
        for (int j = 0; j < 4; j++) r[j] = ind_a[i + j] * ind_b[i + j] + ind_b[i + (j ^ 2)];
        unsigned mask = 0;
        for (int j = 0; j < 4; j++) mask |= (unsigned)(r[j] < 0) << j;
        h = mix(mix_bytes(h, r, sizeof r), mask);
    }
    return h;
}
__attribute__((target("avx"))) static uint64_t avx_fast(void) {
    uint64_t h = 4;
    for (int i = 0; i < N; i += 4) {
        __m256d a = _mm256_loadu_pd(&ind_a[i]), b = _mm256_loadu_pd(&ind_b[i]);
        __m256d swapped = _mm256_permute2f128_pd(b, b, 1);
        __m256d r = _mm256_add_pd(_mm256_mul_pd(a, b), swapped);
        double out[4];
        _mm256_storeu_pd(out, r);
        h = mix(mix_bytes(h, out, sizeof out), (unsigned)_mm256_movemask_pd(r));
    }
    return h;
}

/* ---- AVX2 (integer, 256-bit, gathers) ---- */
static uint64_t avx2_ref(void) {
    uint64_t h = 5;
    for (int i = 0; i + 8 <= N; i += 8) {
        uint32_t r[8];
        for (int j = 0; j < 8; j++) {
            uint32_t cnt = in32b[i + j] & 63;
            uint32_t sh = cnt > 31 ? 0 : in32a[i + j] << cnt;                    /* vpsllvd */
            uint32_t perm = in32a[i + (in32b[i + j] & 7)];                         /* vpermd */
            uint32_t gat = in32a[(in32b[i + j] >> 8) % N];                         /* vpgatherdd */
            uint32_t mx = in32a[i + j] > in32b[i + j] ? in32a[i + j] : in32b[i + j];
            r[j] = (in32a[i + j] * in32b[i + j]) ^ sh ^ perm ^ gat ^ mx;
        }
        h = mix_bytes(h, r, sizeof r);
    }
    return h;
}
__attribute__((target("avx2"))) static uint64_t avx2_fast(void) {
    uint64_t h = 5;
    const __m256i idx_mask = _mm256_set1_epi32(7);
    for (int i = 0; i + 8 <= N; i += 8) {
        __m256i a = _mm256_loadu_si256((const __m256i *)&in32a[i]), b = _mm256_loadu_si256((const __m256i *)&in32b[i]);
        __m256i sh = _mm256_sllv_epi32(a, _mm256_and_si256(b, _mm256_set1_epi32(63)));
        __m256i perm = _mm256_permutevar8x32_epi32(a, _mm256_and_si256(b, idx_mask));
        uint32_t idx[8];
        for (int j = 0; j < 8; j++) idx[j] = (in32b[i + j] >> 8) % N;
        __m256i gat = _mm256_i32gather_epi32((const int *)in32a, _mm256_loadu_si256((const __m256i *)idx), 4);
        __m256i r = _mm256_xor_si256(_mm256_xor_si256(_mm256_mullo_epi32(a, b), sh),
                                     _mm256_xor_si256(_mm256_xor_si256(perm, gat), _mm256_max_epu32(a, b)));
        uint32_t out[8];
        _mm256_storeu_si256((__m256i *)out, r);
        h = mix_bytes(h, out, sizeof out);
    }
    return h;
}

/* ---- x87: long double arithmetic and transcendental instructions ---- */
static long double x87_fsin(long double x) { long double r; __asm__("fsin" : "=t"(r) : "0"(x)); return r; }
static long double x87_fyl2x(long double x, long double y) {
    long double r; __asm__("fyl2x" : "=t"(r) : "0"(x), "u"(y) : "st(1)"); return r;
}
static void part_x87(void) {
    long double s = 0;
    for (int k = 1; k <= 20000; k++) s += 1.0L / ((long double)k * k);
    long double r = __builtin_sqrtl(s * 6.0L);
    long long conv = (long long)(r * 1e9L);
    printf("x87      zeta2=%.10Lg pi~%.10Lg conv=%lld sin1=%.10Lg log2(10)=%.10Lg\n", s, r, conv,
           x87_fsin(1.0L), x87_fyl2x(10.0L, 1.0L));
}

/* ---- BMI1 / BMI2 ---- */
static uint64_t bmi1_ref(void) {
    uint64_t h = 6;
    for (int i = 0; i + 1 < N; i++) {
        uint64_t a = ((uint64_t)in32a[i] << 32 | in32b[i]) >> (in8a[i] & 31), b = (uint64_t)in32b[i + 1] << 16;
        unsigned start = in8a[i] & 63, len = in8b[i] & 63;
        uint64_t ext = (a >> start) & (len >= 64 ? ~0ull : (1ull << len) - 1);
        h = mix(h, ~a & b);
        h = mix(h, ext);
        h = mix(h, a & -a);
        h = mix(h, a ^ (a - 1));
        h = mix(h, a & (a - 1));
        h = mix(h, a ? (uint64_t)__builtin_ctzll(a) : 64);
    }
    return h;
}
__attribute__((target("bmi"))) static uint64_t bmi1_fast(void) {
    uint64_t h = 6;
    for (int i = 0; i + 1 < N; i++) {
        uint64_t a = ((uint64_t)in32a[i] << 32 | in32b[i]) >> (in8a[i] & 31), b = (uint64_t)in32b[i + 1] << 16;
        unsigned start = in8a[i] & 63, len = in8b[i] & 63;
        h = mix(h, _andn_u64(a, b));
        h = mix(h, _bextr_u64(a, start, len));
        h = mix(h, _blsi_u64(a));
        h = mix(h, _blsmsk_u64(a));
        h = mix(h, _blsr_u64(a));
        h = mix(h, _tzcnt_u64(a));
    }
    return h;
}
static uint64_t pdep_ref(uint64_t src, uint64_t mask) {
    uint64_t r = 0;
    for (uint64_t bit = 1; mask; bit <<= 1, mask &= mask - 1)
        if (src & bit) r |= mask & -mask;
    return r;
}
static uint64_t pext_ref(uint64_t src, uint64_t mask) {
    uint64_t r = 0, bit = 1;
    for (; mask; mask &= mask - 1, bit <<= 1)
        if (src & mask & -mask) r |= bit;
    return r;
}
static uint64_t bmi2_ref(void) {
    uint64_t h = 7;
    for (int i = 0; i + 1 < N; i++) {
        uint64_t a = (uint64_t)in32a[i] << 32 | in32b[i], m = (uint64_t)in32a[i + 1] * in32b[i + 1];
        unsigned n = in8a[i];
        h = mix(h, (n & 0xff) >= 64 ? a : a & ((1ull << (n & 0xff)) - 1));
        h = mix(h, pdep_ref(a, m));
        h = mix(h, pext_ref(a, m));
        unsigned __int128 p = (unsigned __int128)a * m;
        h = mix(mix(h, (uint64_t)p), (uint64_t)(p >> 64));
        h = mix(h, a >> 13 | a << 51);
        h = mix(h, a << (n & 63));
        h = mix(h, (uint64_t)((int64_t)a >> (n & 63)));
        h = mix(h, a >> (n & 63));
    }
    return h;
}
__attribute__((target("bmi2"))) static uint64_t bmi2_fast(void) {
    uint64_t h = 7;
    for (int i = 0; i + 1 < N; i++) {
        uint64_t a = (uint64_t)in32a[i] << 32 | in32b[i], m = (uint64_t)in32a[i + 1] * in32b[i + 1];
        uint64_t n = in8a[i], hi, r;
        h = mix(h, _bzhi_u64(a, (unsigned)n));
        h = mix(h, _pdep_u64(a, m));
        h = mix(h, _pext_u64(a, m));
        unsigned long long lo = _mulx_u64(a, m, (unsigned long long *)&hi);
        h = mix(mix(h, lo), hi);
        __asm__("rorx $13, %1, %0" : "=r"(r) : "r"(a)); h = mix(h, r);
        __asm__("shlx %2, %1, %0" : "=r"(r) : "r"(a), "r"(n)); h = mix(h, r);
        __asm__("sarx %2, %1, %0" : "=r"(r) : "r"(a), "r"(n)); h = mix(h, r);
        __asm__("shrx %2, %1, %0" : "=r"(r) : "r"(a), "r"(n)); h = mix(h, r);
    }
    return h;
}

/* ---- POPCNT / LZCNT ---- */
static uint64_t popcnt_ref(void) {
    uint64_t h = 8;
    for (int i = 0; i < N; i++) {
        uint64_t a = (uint64_t)in32a[i] << (in8a[i] & 31) | in32b[i], c = 0;
        for (; a; a &= a - 1) c++;
        h = mix(h, c);
    }
    return h;
}
__attribute__((target("popcnt"))) static uint64_t popcnt_fast(void) {
    uint64_t h = 8;
    for (int i = 0; i < N; i++) h = mix(h, (uint64_t)_mm_popcnt_u64((uint64_t)in32a[i] << (in8a[i] & 31) | in32b[i]));
    return h;
}
static uint64_t lzcnt_ref(void) {
    uint64_t h = 9;
    for (int i = 0; i < N; i++) {
        uint64_t a = (uint64_t)in32a[i] >> (in8a[i] & 31), c = 64;
        while (a) { a >>= 1; c--; }
        h = mix(h, c);
    }
    return h;
}
__attribute__((target("lzcnt"))) static uint64_t lzcnt_fast(void) {
    uint64_t h = 9;
    for (int i = 0; i < N; i++) h = mix(h, _lzcnt_u64((uint64_t)in32a[i] >> (in8a[i] & 31)));
    return h;
}

/* ---- AES-NI, against a byte-level model of the six instructions ---- */
static uint8_t sbox[256], inv_sbox[256];
static uint8_t gmul(uint8_t a, uint8_t b) {
    uint8_t p = 0;
    for (; b; b >>= 1) { if (b & 1) p ^= a; a = (uint8_t)((a << 1) ^ ((a & 0x80) ? 0x1b : 0)); }
    return p;
}
static void make_sbox(void) {
    for (int x = 0; x < 256; x++) {
        uint8_t inv = 0;
        for (int y = 1; y < 256 && x; y++) if (gmul((uint8_t)x, (uint8_t)y) == 1) { inv = (uint8_t)y; break; }
        uint8_t s = inv;
        for (int r = 1; r <= 4; r++) s ^= (uint8_t)(inv << r | inv >> (8 - r));
        sbox[x] = s ^ 0x63;
        inv_sbox[sbox[x]] = (uint8_t)x;
    }
}
static void shift_rows(uint8_t *s, int inverse) {
    uint8_t t[16];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) t[r + 4 * c] = s[r + 4 * ((c + (inverse ? 4 - r : r)) % 4)];
    memcpy(s, t, 16);
}
static void mix_columns(uint8_t *s, int inverse) {
    static const uint8_t fwd[4] = {2, 3, 1, 1}, inv[4] = {14, 11, 13, 9};
    const uint8_t *m = inverse ? inv : fwd;
    for (int c = 0; c < 4; c++) {
        uint8_t a[4], *col = s + 4 * c;
        memcpy(a, col, 4);
        for (int r = 0; r < 4; r++)
            col[r] = gmul(a[0], m[(4 - r) % 4]) ^ gmul(a[1], m[(5 - r) % 4]) ^ gmul(a[2], m[(6 - r) % 4]) ^
                     gmul(a[3], m[(7 - r) % 4]);
    }
}
static void aes_model(const uint8_t *state, const uint8_t *key, uint8_t out[96]) {
    uint8_t s[16];
    memcpy(s, state, 16); shift_rows(s, 0);                                            /* aesenc */
    for (int i = 0; i < 16; i++) s[i] = sbox[s[i]];
    memcpy(out + 16, s, 16);                                                             /* (enclast) */
    mix_columns(s, 0);
    for (int i = 0; i < 16; i++) { out[i] = s[i] ^ key[i]; out[16 + i] ^= key[i]; }
    memcpy(s, state, 16); shift_rows(s, 1);                                            /* aesdec */
    for (int i = 0; i < 16; i++) s[i] = inv_sbox[s[i]];
    memcpy(out + 48, s, 16);                                                             /* (declast) */
    mix_columns(s, 1);
    for (int i = 0; i < 16; i++) { out[32 + i] = s[i] ^ key[i]; out[48 + i] ^= key[i]; }
    memcpy(s, state, 16); mix_columns(s, 1); memcpy(out + 64, s, 16);                  /* aesimc */
    uint32_t w[4], r[4];                                                               /* aeskeygenassist 0x1b */
    memcpy(w, state, 16);
    for (int k = 0; k < 2; k++) {
        uint32_t x = w[2 * k + 1], sub = 0;
        for (int b = 0; b < 4; b++) sub |= (uint32_t)sbox[(x >> (8 * b)) & 0xff] << (8 * b);
        r[2 * k] = sub;
        r[2 * k + 1] = (sub >> 8 | sub << 24) ^ 0x1b;
    }
    memcpy(out + 80, r, 16);
}
static uint64_t aes_ref(void) {
    uint64_t h = 10; uint8_t out[96];
    for (int i = 0; i + 32 <= N; i += 16) { aes_model(in8a + i, in8b + i, out); h = mix_bytes(h, out, 96); }
    return h;
}
__attribute__((target("aes,sse4.1"))) static uint64_t aes_fast(void) {
    uint64_t h = 10; uint8_t out[96];
    for (int i = 0; i + 32 <= N; i += 16) {
        __m128i s = _mm_loadu_si128((const __m128i *)&in8a[i]), k = _mm_loadu_si128((const __m128i *)&in8b[i]);
        _mm_storeu_si128((__m128i *)(out + 0), _mm_aesenc_si128(s, k));
        _mm_storeu_si128((__m128i *)(out + 16), _mm_aesenclast_si128(s, k));
        _mm_storeu_si128((__m128i *)(out + 32), _mm_aesdec_si128(s, k));
        _mm_storeu_si128((__m128i *)(out + 48), _mm_aesdeclast_si128(s, k));
        _mm_storeu_si128((__m128i *)(out + 64), _mm_aesimc_si128(s));
        _mm_storeu_si128((__m128i *)(out + 80), _mm_aeskeygenassist_si128(s, 0x1b));
        h = mix_bytes(h, out, 96);
    }
    return h;
}

/* ---- SHA-NI (SHA-256 message schedule and rounds), against the SDM's pseudocode ---- */
static uint32_t ror(uint32_t x, int n) { return x >> n | x << (32 - n); }
static void sha_model(const uint32_t *a, const uint32_t *b, const uint32_t *k, uint32_t out[12]) {
    for (int i = 0; i < 4; i++) {                                                       /* sha256msg1 */
        uint32_t next = i < 3 ? a[i + 1] : b[0];
        out[i] = a[i] + (ror(next, 7) ^ ror(next, 18) ^ (next >> 3));
    }
    uint32_t w[4];                                                                      /* sha256msg2 */
    for (int i = 0; i < 4; i++) {
        uint32_t x = i < 2 ? b[2 + i] : w[i - 2];
        w[i] = a[i] + (ror(x, 17) ^ ror(x, 19) ^ (x >> 10));
    }
    memcpy(out + 4, w, 16);
    uint32_t A = b[3], B = b[2], C = a[3], D = a[2], E = b[1], F = b[0], G = a[1], H = a[0]; /* sha256rnds2 */
    for (int i = 0; i < 2; i++) {
        uint32_t t1 = H + (ror(E, 6) ^ ror(E, 11) ^ ror(E, 25)) + ((E & F) ^ (~E & G)) + k[i];
        uint32_t t2 = (ror(A, 2) ^ ror(A, 13) ^ ror(A, 22)) + ((A & B) ^ (A & C) ^ (B & C));
        H = G; G = F; F = E; E = D + t1; D = C; C = B; B = A; A = t1 + t2;
    }
    out[8] = F; out[9] = E; out[10] = B; out[11] = A;
}
static uint64_t sha_ref(void) {
    uint64_t h = 11; uint32_t out[12];
    for (int i = 0; i + 12 <= N; i += 4) { sha_model(in32a + i, in32b + i, in32a + i + 8, out); h = mix_bytes(h, out, 48); }
    return h;
}
__attribute__((target("sha,sse4.1"))) static uint64_t sha_fast(void) {
    uint64_t h = 11; uint32_t out[12];
    for (int i = 0; i + 12 <= N; i += 4) {
        __m128i a = _mm_loadu_si128((const __m128i *)&in32a[i]), b = _mm_loadu_si128((const __m128i *)&in32b[i]);
        __m128i k = _mm_loadu_si128((const __m128i *)&in32a[i + 8]);
        _mm_storeu_si128((__m128i *)(out + 0), _mm_sha256msg1_epu32(a, b));
        _mm_storeu_si128((__m128i *)(out + 4), _mm_sha256msg2_epu32(a, b));
        _mm_storeu_si128((__m128i *)(out + 8), _mm_sha256rnds2_epu32(a, b, k));
        h = mix_bytes(h, out, 48);
    }
    return h;
}

/* ---- general integer ALU: wide multiply/divide, carries, rotates, byte swaps ---- */
__attribute__((noinline)) static void part_alu(void) {
    uint64_t h = 12;
    for (int i = 0; i + 1 < N; i++) {
        uint64_t a = (uint64_t)in32a[i] << 32 | in32b[i], b = (uint64_t)in32b[i + 1] | 1;
        unsigned __int128 p = (unsigned __int128)a * b, s = (unsigned __int128)a + ((unsigned __int128)b << 63);
        __int128 sp = (__int128)(int64_t)a * (int64_t)b;
        h = mix(h, (uint64_t)(p >> 64) ^ (uint64_t)p ^ (uint64_t)(s >> 64) ^ (uint64_t)(sp >> 70));
        h = mix(h, a / b ^ a % b ^ (uint64_t)((int64_t)a / (int64_t)(b | 2)) ^ (uint32_t)a / (uint32_t)b);
        h = mix(h, __builtin_bswap64(a) ^ __builtin_bswap32((uint32_t)b) ^ (a << (i & 63) | a >> ((64 - i) & 63)));
        h = mix(h, (uint64_t)__builtin_parityll(a) + (uint64_t)(a > b) * 3 + (uint64_t)((int64_t)a < 0));
        int8_t c8 = (int8_t)a; int16_t c16 = (int16_t)b;
        h = mix(h, (uint64_t)(int64_t)c8 * (uint64_t)(int64_t)c16);
    }
    printf("alu      sum=%016llx\n", (unsigned long long)h);
}

/* ---- rep string instructions, forwards and backwards ---- */
static void part_rep(void) {
    static unsigned char src[4096], dst[4096];
    static uint64_t q[512];
    for (int i = 0; i < 4096; i++) src[i] = (unsigned char)(i * 13 + 7);
    void *d = dst; const void *s = src; size_t n = 3000;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    uint64_t h = mix_bytes(13, dst, 3000);
    d = dst + 3999; s = src + 3999; n = 1000;                               /* backwards, DF=1 */
    __asm__ volatile("std\n\trep movsb\n\tcld" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    h = mix_bytes(h, dst, 4096);
    d = q; n = 500;
    __asm__ volatile("rep stosq" : "+D"(d), "+c"(n) : "a"(0x0123456789abcdefull) : "memory");
    h = mix_bytes(h, q, sizeof q);
    memcpy(dst, src, 4096); dst[1234] ^= 1;
    const void *p1 = src, *p2 = dst; n = 4096;
    __asm__ volatile("repe cmpsb" : "+S"(p1), "+D"(p2), "+c"(n) : : "memory", "cc");
    size_t mismatch = 4096 - n - 1;
    const void *p = src; n = 4096;
    __asm__ volatile("repne scasb" : "+D"(p), "+c"(n) : "a"(src[777]) : "memory", "cc");
    size_t found = 4096 - n - 1;
    printf("rep      sum=%016llx cmpsb_mismatch_at=%zu scasb_found_at=%zu\n", (unsigned long long)h, mismatch,
           found);
}

/* ---- cpuid, rdtsc, xgetbv ---- */
static void part_cpu(void) {
    unsigned a, b, c, d;
    __cpuid(0, a, b, c, d);
    char vendor[13];
    memcpy(vendor, &b, 4); memcpy(vendor + 4, &d, 4); memcpy(vendor + 8, &c, 4); vendor[12] = 0;
    printf("cpuid    max_leaf>0=%d vendor=%s\n", a > 0, vendor);
    uint64_t prev = __rdtsc(); int monotonic = 1;
    for (int i = 0; i < 1000; i++) { uint64_t t = __rdtsc(); monotonic &= t >= prev; prev = t; }
    unsigned aux; uint64_t t1 = __rdtscp(&aux);
    printf("rdtsc    monotonic=%d rdtscp>=rdtsc=%d\n", monotonic, t1 >= prev);
    __cpuid(1, a, b, c, d);
    if (c & (1u << 27)) {                                                /* OSXSAVE */
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        printf("xgetbv   xcr0_sse=%d\n", (lo >> 1) & 1);
    } else {
        printf("xgetbv   xcr0_sse=1\n");                                /* no OSXSAVE: nothing to test */
    }
}

/* ---- control flow: setjmp/longjmp, function pointers, jump tables, computed goto, recursion ---- */
static jmp_buf env;
__attribute__((noinline)) static int dive(int depth) {
    if (depth == 0) longjmp(env, 17);
    return depth > 1000 ? 0 : dive(depth - 1) + 1;
}
__attribute__((noinline)) static long op_add(long a, long b) { return a + b; }
__attribute__((noinline)) static long op_sub(long a, long b) { return a - b; }
__attribute__((noinline)) static long op_mul(long a, long b) { return (long)((unsigned long)a * (unsigned long)b); }
__attribute__((noinline)) static long op_xor(long a, long b) { return a ^ b; }
__attribute__((noinline)) static long jump_table(int sel, long x) {
    switch (sel) {
    case 0: return x + 1;   case 1: return x * 3;     case 2: return x ^ 0x55;  case 3: return x - 7;
    case 4: return x << 2;  case 5: return x >> 1;    case 6: return ~x;        case 7: return (long)((unsigned long)x * (unsigned long)x);
    case 8: return x + 100; case 9: return x & 0xfff; case 10: return x | 1;    case 11: return -x;
    case 12: return x / 3;  case 13: return x % 1000; case 14: return x + sel;  default: return x;
    }
}
__attribute__((noinline)) static long computed_goto(const unsigned char *prog, int n) {
    static void *labels[] = {&&inc, &&dbl, &&neg, &&end};
    long acc = 1; int pc = 0;
#define NEXT goto *labels[pc < n ? prog[pc++] & 3 : 3]
    NEXT;
inc: acc += 1; NEXT;
dbl: acc *= 2; NEXT;
neg: acc = -acc + 5; NEXT;
end:
#undef NEXT
    return acc;
}
__attribute__((noinline)) static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

static void part_flow(void) {
    volatile int jumps = 0;
    for (volatile int i = 0; i < 100; i++) {
        int r = setjmp(env);
        if (r == 0) dive(i % 25);
        else jumps += r;
    }
    printf("setjmp   longjmps=%d\n", jumps);
    long (*ops[4])(long, long) = {op_add, op_sub, op_mul, op_xor};
    long acc = 1, sw = 0;
    for (int i = 0; i < 10000; i++) acc = ops[in8a[i % N] & 3](acc, in32a[i % N] & 0xffff) & 0xffffffffff;
    for (int i = 0; i < 10000; i++) sw = jump_table(in8b[i % N] & 15, sw + i) & 0xffffffff;
    printf("indirect fnptr=%ld switch=%ld goto=%ld\n", acc, sw, computed_goto(in8a, N));
    printf("fib      fib(27)=%ld\n", fib(27));
}

int main(void) {
    const char *v = getenv("INSNS_VERBOSE");
    verbose = v && *v == '1';
    __builtin_cpu_init();
    fill();
    make_sbox();
#define PART(name, feature, ref, fast)                                                         \
    do {                                                                                       \
        int sup = (feature);                                                                   \
        uint64_t r_ = ref();                                                                   \
        report(name, sup, r_, sup ? fast() : r_);                                              \
    } while (0)
    PART("sse2", 1, sse2_ref, sse2_fast);
    PART("ssse3", __builtin_cpu_supports("ssse3"), ssse3_ref, ssse3_fast);
    PART("sse4.1", __builtin_cpu_supports("sse4.1"), sse41_ref, sse41_fast);
    PART("avx", __builtin_cpu_supports("avx"), avx_ref, avx_fast);
    PART("avx2", __builtin_cpu_supports("avx2"), avx2_ref, avx2_fast);
    PART("bmi1", __builtin_cpu_supports("bmi"), bmi1_ref, bmi1_fast);
    PART("bmi2", __builtin_cpu_supports("bmi2"), bmi2_ref, bmi2_fast);
    PART("popcnt", __builtin_cpu_supports("popcnt"), popcnt_ref, popcnt_fast);
    PART("lzcnt", __builtin_cpu_supports("lzcnt"), lzcnt_ref, lzcnt_fast);
    PART("aes", __builtin_cpu_supports("aes") && __builtin_cpu_supports("sse4.1"), aes_ref, aes_fast);
    PART("sha", __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1"), sha_ref, sha_fast);
#undef PART
    part_x87();
    part_alu();
    part_rep();
    part_cpu();
    part_flow();
    return 0;
}
