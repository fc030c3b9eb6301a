#include "runtime/launch/rows_copy.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <limits.h>

int rows_copy_job_check(const rows_copy_job *j, int i)
{
    if (j->n < 0 || j->row_bytes <= 0 || j->row_bytes % 16)
        return dsk_err("rows_copy: copy %d: %d rows of %d bytes (n >= 0, row_bytes a positive multiple of 16)", i,
                       j->n, j->row_bytes);
    if (j->src_stride < j->row_bytes || j->src_stride % 16 || j->dst_stride < j->row_bytes || j->dst_stride % 16)
        return dsk_err("rows_copy: copy %d: strides %lld (src) and %lld (dst) must be multiples of 16 and at least the "
                       "row (%d bytes)", i, (long long)j->src_stride, (long long)j->dst_stride, j->row_bytes);
    if (!j->src || !j->dst || j->src % 16 || j->dst % 16 || j->src_idx % 16 || j->dst_idx % 16)
        return dsk_err("rows_copy: copy %d: src %#llx, dst %#llx, src_idx %#llx, dst_idx %#llx: src and dst are "
                       "needed, every pointer 16-byte aligned", i, (unsigned long long)j->src,
                       (unsigned long long)j->dst, (unsigned long long)j->src_idx, (unsigned long long)j->dst_idx);
    return 0;
}

int op_rows_copy_jobs(const kit *k, CUstream s, const rows_copy_job *jobs, int njobs)
{
    if (njobs < 1 || njobs > 2)
        return dsk_err("rows_copy: %d copies in one launch (1 or 2)", njobs);
    int64_t most = 0;
    for (int i = 0; i < njobs; i++) {
        if (rows_copy_job_check(&jobs[i], i))
            return -1;
        int64_t t = (int64_t)jobs[i].n * (jobs[i].row_bytes / 16);
        most = t > most ? t : most;
    }
    rule_variant v;
    rule_rows_copy_pick(&v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int T = kk->meta->block;
    if ((most + T - 1) / T > INT_MAX)
        return dsk_err("rows_copy: %lld 16-byte chunks is too large for one launch", (long long)most);
    if (most == 0)
        return 0;
    rows_copy_job j[2] = {jobs[0], njobs > 1 ? jobs[1] : (rows_copy_job){0}};
    void *args[] = {&j[0].src, &j[0].src_stride, &j[0].src_idx, &j[0].dst, &j[0].dst_stride, &j[0].dst_idx,
                    &j[0].n,   &j[0].row_bytes,  &j[1].src,     &j[1].src_stride, &j[1].src_idx, &j[1].dst,
                    &j[1].dst_stride, &j[1].dst_idx, &j[1].n, &j[1].row_bytes};
    if (kit_launch(kk, (unsigned)((most + T - 1) / T), (unsigned)njobs, 1, s, args, 16))
        return dsk_err_ctx("rows_copy %s", v.params);
    return 0;
}

int op_rows_copy(const kit *k, CUstream s, CUdeviceptr src, int64_t src_stride, CUdeviceptr src_idx, CUdeviceptr dst,
                 int64_t dst_stride, CUdeviceptr dst_idx, int n, int row_bytes)
{
    rows_copy_job j = {src, src_stride, src_idx, dst, dst_stride, dst_idx, n, row_bytes};
    return op_rows_copy_jobs(k, s, &j, 1);
}
