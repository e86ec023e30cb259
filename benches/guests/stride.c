/* stride [bytes] [stride] [reps]: reads one int every `stride` bytes of a `bytes`-byte buffer,
 * `reps` times over (cache-miss-bound once the buffer exceeds the caches). */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static long walk(const char *buf, size_t bytes, size_t stride, int reps) {
    long sum = 0;
    for (int r = 0; r < reps; r++)
        for (size_t i = 0; i + sizeof(int) <= bytes; i += stride) sum += *(const int *)(buf + i);
    return sum;
}

int main(int argc, char **argv) {
    size_t bytes = argc > 1 ? strtoul(argv[1], 0, 0) : (size_t)1 << 26;
    size_t stride = argc > 2 ? strtoul(argv[2], 0, 0) : 64;
    int reps = argc > 3 ? atoi(argv[3]) : 8;
    char *buf = malloc(bytes);
    if (!buf || stride == 0) return 1;
    for (size_t i = 0; i < bytes; i++) buf[i] = (char)(i * 7);
    printf("sum=%ld\n", walk(buf, bytes, stride, reps));
    return 0;
}
