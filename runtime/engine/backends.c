/* The backends this build has, by name: what engine_open (tp = 1) and each rank (tp > 1) open. */
#include "runtime/common/error.h"
#include "runtime/engine/backend.h"

#include <string.h>

int engine_local_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops)
{
    if (!strcmp(a->opts->backend, "cpu"))
        return cpu_backend_open(a, impl, ops);
    if (!strcmp(a->opts->backend, "gpu"))
        return gpu_backend_open(a, impl, ops);
    return dsk_err("backend '%s' is not available (this build has: cpu, gpu)", a->opts->backend);
}
