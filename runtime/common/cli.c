#include "runtime/common/cli.h"
#include "runtime/common/error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int cli_parse_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end)
        return dsk_err("%s: '%s' is not an integer", opt, s);
    if (v < lo || v > hi)
        return dsk_err("%s: %ld is out of range [%ld, %ld]", opt, v, lo, hi);
    *out = v;
    return 0;
}

int cli_parse_double(const char *opt, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return dsk_err("%s: '%s' is not a finite number", opt, s);
    *out = v;
    return 0;
}
