#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    puts("r3cx-tool 0.3.0");
    return 0;
  }
  puts("r3cx-tool: nothing to do");
  return 0;
}
