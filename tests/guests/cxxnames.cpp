// C++ names as Valgrind's (GNU's) demangler prints them: a non-type template argument, a
// function type, empty and non-empty parameter packs.
#include <cstdio>
#include <functional>
template <unsigned N> __attribute__((noinline)) int scale(int x) { return x * (int)N; }
template <typename... A> __attribute__((noinline)) int count(A... a) { return (int)sizeof...(a); }
__attribute__((noinline)) int call(const std::function<int(int)> &f, int x) { return f(x); }
int main() {
    std::function<int(int)> f = scale<3u>;
    printf("%d %d %d\n", call(f, 4), count(), count(1, 2));
    return 0;
}
