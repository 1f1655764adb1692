#pragma once
#include <string>

namespace r3cx {
std::string greeting();
}
