#include "runtime/common/json_cost.h"

enum { COST_OBJECT = 240, COST_ARRAY = 144, COST_STRING = 96, COST_SCALAR = 48 };

size_t dsk_json_cost(const char *text, size_t len)
{
    size_t cost = len, i = 0;
    while (i < len) {
        char c = text[i];
        if (c == '"') { /* a string or a key: skip to its closing quote, past escapes */
            cost += COST_STRING;
            for (i++; i < len && text[i] != '"'; i++)
                if (text[i] == '\\')
                    i++;
            i++;
        } else if (c == '{' || c == '[') {
            cost += c == '{' ? COST_OBJECT : COST_ARRAY;
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
            /* a number or a literal: one value for the run of characters it spans */
            cost += COST_SCALAR;
            while (i < len && text[i] != ',' && text[i] != ']' && text[i] != '}' && text[i] != ' ' &&
                   text[i] != '\n' && text[i] != '\t' && text[i] != '\r' && text[i] != '"')
                i++;
        } else {
            i++;
        }
    }
    return cost;
}
