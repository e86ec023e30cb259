/* chase [bytes] [steps]: follows a random cyclic linked list of 64-byte nodes spread over
 * `bytes` bytes; every load depends on the previous one (latency-bound). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct node { struct node *next; long pad[7]; };

__attribute__((noinline)) static struct node *walk(struct node *p, long steps) {
    while (steps--) p = p->next;
    return p;
}

int main(int argc, char **argv) {
    size_t bytes = argc > 1 ? strtoul(argv[1], 0, 0) : (size_t)1 << 26;
    long steps = argc > 2 ? atol(argv[2]) : 2000000;
    size_t n = bytes / sizeof(struct node);
    struct node *nodes = malloc(n * sizeof *nodes);
    size_t *order = malloc(n * sizeof *order);
    if (!nodes || !order || n < 2) return 1;
    for (size_t i = 0; i < n; i++) order[i] = i;
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (size_t i = n - 1; i > 0; i--) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        size_t j = s % (i + 1), t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (size_t i = 0; i < n; i++) nodes[order[i]].next = &nodes[order[(i + 1) % n]];
    printf("end=%zu\n", (size_t)(walk(&nodes[order[0]], steps) - nodes));
    return 0;
}
