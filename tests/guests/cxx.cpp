// cxx: C++ exceptions thrown through several frames (unwinding reads .eh_frame of the running
// code), a catch-by-base, a rethrow, and std::string/vector/map work. Prints a checksum.
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

struct Oops : std::runtime_error {
    int depth;
    explicit Oops(int d) : std::runtime_error("oops"), depth(d) {}
};

__attribute__((noinline)) static long deep(int n, long acc) {
    std::vector<long> keep(4, acc);   // destructors run during unwinding
    if (n == 0) throw Oops(static_cast<int>(acc % 1000));
    return deep(n - 1, acc * 3 + n) + keep[0];
}

int main() {
    long sum = 0;
    for (int i = 0; i < 2000; i++) {
        try {
            try {
                sum += deep(i % 40, i);
            } catch (const Oops &e) {
                sum += e.depth;
                if (i % 3 == 0) throw;
            }
        } catch (const std::exception &e) {
            sum += static_cast<long>(std::string(e.what()).size());
        }
    }
    std::map<std::string, int> m;
    for (int i = 0; i < 1000; i++) m[std::to_string(i * 7919 % 1009)] += i;
    long msum = 0;
    for (const auto &kv : m) msum = msum * 31 + kv.second + static_cast<long>(kv.first.size());
    std::printf("exceptions: sum=%ld\nmap: n=%zu hash=%ld\n", sum, m.size(), msum);
    return 0;
}
