/* What the program is shown of the machine: CPUID leaves glibc reads, XGETBV, an XSAVE with
 * every feature requested into an area sized from CPUID leaf 0xD (a canary after it must
 * survive), whether the auxv offers a vDSO, and the first LD_PRELOAD entry's file name. */
#include <cpuid.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

static void leaf(unsigned l, unsigned s) {
    unsigned a, b, c, d;
    __cpuid_count(l, s, a, b, c, d);
    if (l == 1) b &= 0x00ffffff; /* the initial APIC id: which CPU ran it */
    printf("cpuid %x.%x: %08x %08x %08x %08x\n", l, s, a, b, c, d);
}

int main(void) {
    unsigned a, b, c, d;
    leaf(0, 0);
    leaf(1, 0);
    leaf(7, 0);
    leaf(0xd, 0);
    leaf(0xd, 1);
    char brand[49] = {0};
    for (unsigned i = 0; i < 3; i++) {
        __cpuid(0x80000002 + i, a, b, c, d);
        memcpy(brand + 16 * i, (unsigned[]){a, b, c, d}, 16);
    }
    printf("brand: %s\n", brand);
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    printf("xcr0: %x\n", lo);
    __cpuid_count(0xd, 0, a, b, c, d);
    size_t size = b;
    unsigned char *area = aligned_alloc(64, (size + 64 + 256 + 63) / 64 * 64);
    memset(area, 0, size);
    memset(area + size, 0xa5, 256);
    __asm__ volatile("xsave64 (%0)" ::"r"(area), "a"(-1), "d"(-1) : "memory");
    int intact = 1;
    for (int i = 0; i < 256; i++) intact &= area[size + i] == 0xa5;
    printf("xsave stays in its %zu bytes: %d\n", size, intact);
    __asm__ volatile("xrstor64 (%0)" ::"r"(area), "a"(-1), "d"(-1) : "memory");
    printf("vdso offered: %d\n", getauxval(AT_SYSINFO_EHDR) != 0);
    const char *pre = getenv("LD_PRELOAD");
    if (pre) {
        const char *end = strchr(pre, ':');
        size_t n = end ? (size_t)(end - pre) : strlen(pre);
        const char *base = pre;
        for (size_t i = 0; i < n; i++)
            if (pre[i] == '/') base = pre + i + 1;
        printf("preload: %.*s\n", (int)(pre + n - base), base);
    } else {
        printf("preload: none\n");
    }
    return 0;
}
