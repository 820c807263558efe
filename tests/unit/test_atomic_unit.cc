#include <gtest/gtest.h>
#include "atomic_unit.h"
TEST(AtomicUnit, Placeholder) {}
