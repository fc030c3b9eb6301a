#include "manifest/rules/rules.h"

int rule_rmsnorm_threads(int width)
{
    return width <= 256 ? 32 : width <= 1280 ? 128 : 256;
}
