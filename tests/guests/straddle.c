/* straddle: loads and stores of 2 to 16 bytes that cross a cache line (and some that do
 * not), at pseudo-random places in a 1 MiB buffer, so that a cache simulation sees many
 * two-line accesses. Prints a checksum. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    size_t n = 1 << 20;
    unsigned char *buf = malloc(n + 256);
    if (!buf) return 1;
    for (size_t i = 0; i < n + 256; i++) buf[i] = (unsigned char)(i * 7);
    uint64_t sum = 0, x = 12345;
    for (long it = 0; it < 200000; it++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t off = ((x >> 20) % n & ~(size_t)127) + 120 + (x >> 58) % 16;
        switch (x & 3) {
        case 0: { uint16_t v; memcpy(&v, buf + off, 2); sum += v; break; }
        case 1: { uint32_t v; memcpy(&v, buf + off, 4); sum += v; break; }
        case 2: { uint64_t v; memcpy(&v, buf + off, 8); v += sum; memcpy(buf + off, &v, 8); break; }
        default: { uint64_t v[2]; memcpy(v, buf + off - 8, 16); sum += v[0] ^ v[1]; break; }
        }
    }
    printf("straddle %llu\n", (unsigned long long)sum);
    return 0;
}
