#include "manifest/rules/rules.h"

int rule_rowmm_bucket(int rows)
{
    return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : rows <= 8 ? 8 : 16;
}
