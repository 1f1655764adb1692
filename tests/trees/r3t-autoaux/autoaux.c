#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    puts("autoaux 0.2.0");
    return 0;
  }
  puts("autoaux: ok");
  return 0;
}
