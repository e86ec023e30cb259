/* A library for farphdr.c; the test moves its program headers to the end of the file. */
long far_work(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += i ^ (s >> 1);
    return s;
}
