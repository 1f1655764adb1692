/* r3cx: the public header */
#pragma once
#include "r3cx_impl.h"
