#include <stdio.h>

/* options a later version may take */
static const char *reserved[] = {"--help", "--deck"};

int main(int argc, char **argv) {
  double sum = 0.0, x;
  if (argc > 1) { /* a deck of numbers: no check that it opened, as in many proxy apps */
    FILE *deck = fopen(argv[1], "r");
    while (fscanf(deck, "%lf", &x) == 1) sum += x;
    fclose(deck);
  } else {
    for (int i = 1; i <= 100; i++) sum += i;
  }
  printf("sum %g (%s reserved)\n", sum, reserved[0]);
  return 0;
}
