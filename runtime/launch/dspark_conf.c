#include "runtime/launch/dspark_conf.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/launch/rowmm.h"

int op_dspark_conf(const kit *k, CUstream s, const dspark_conf_args *a)
{
    if (a->d < 8 || a->d % 8 || a->R < 0 || a->R % 8 || a->ldu < a->d || a->lde < a->R || a->rows < 0)
        return dsk_err("dspark_conf: d %d and R %d must be multiples of 8 within the row strides %lld and %lld", a->d,
                       a->R, (long long)a->ldu, (long long)a->lde);
    if (a->ldu % 8 || a->lde % 8)
        return dsk_err("dspark_conf: row strides %lld (u) and %lld (e) must be multiples of 8 (16-byte rows)",
                       (long long)a->ldu, (long long)a->lde);
    if (a->bias && (a->V < 1 || a->ldb < a->V || a->ldl < a->V))
        return dsk_err("dspark_conf: %d logits with row strides %lld (bias) and %lld (logits)", a->V,
                       (long long)a->ldb, (long long)a->ldl);
    if (a->rows > 65535)
        return dsk_err("dspark_conf: %d rows: at most 65535 per launch (grid y)", a->rows);
    const struct {
        const char *name;
        CUdeviceptr p;
        int required;
    } ptrs[] = {{"u", a->u, 1},       {"e", a->e, a->R > 0}, {"w", a->w, 1},
                {"conf", a->conf, 1}, {"bias", a->bias, 0},  {"logits", a->logits, a->bias != 0}};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if ((!ptrs[i].p && ptrs[i].required) || ptrs[i].p % 16)
            return dsk_err("dspark_conf: %s (0x%llx) must be a 16-byte aligned device pointer", ptrs[i].name,
                           (unsigned long long)ptrs[i].p);
    if (a->rows == 0)
        return 0;
    rule_variant v;
    rule_dspark_conf_pick(&v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    CUdeviceptr u = a->u, e = a->e, w = a->w, conf = a->conf, bias = a->bias, logits = a->logits;
    int64_t ldu = a->ldu, lde = a->lde, ldb = a->ldb, ldl = a->ldl;
    int d = a->d, R = a->R, V = a->V;
    void *args[] = {&u, &ldu, &d, &e, &lde, &R, &w, &conf, &bias, &ldb, &logits, &ldl, &V};
    unsigned gx = 1 + (a->bias ? (unsigned)rule_dspark_conf_bias_blocks(a->V) : 0u);
    return kit_launch(kk, gx, (unsigned)a->rows, 1, s, args, 13);
}

int op_dspark_markov_bias(const kit *k, CUstream s, CUdeviceptr e, int rows, int R, CUdeviceptr head, int V,
                          CUdeviceptr bias)
{
    if (op_rowmm_bf16(k, s, e, head, bias, rows, R, V))
        return dsk_err_ctx("dspark Markov bias (rowmm_bf16, %d rows, rank %d, %d logits)", rows, R, V);
    return 0;
}
