#include <cstdio>
int main() { std::puts("kvik"); return 0; }
