#include "r3cx.h"

std::string r3cx::greeting() { return "r3cx"; }
