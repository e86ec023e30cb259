/* Loads the library named by argv[1] (the test has moved its program headers to the end of
 * the file, where BOLT-optimised libraries such as rustc's libLLVM keep them) and runs its
 * far_work. */
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        printf("%s\n", dlerror());
        return 1;
    }
    long (*f)(long) = (long (*)(long))dlsym(h, "far_work");
    printf("%ld\n", f ? f(100000) : -1);
    return 0;
}
