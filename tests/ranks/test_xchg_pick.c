/* The GPU ranks' choice of exchange transport (gpu_xchg_pick, runtime/gpu/gpu_xchg.h; docs/ranks.md): one
 * host and different GPUs -> peer memory; one GPU -> the host unless DSKIT_XCHG=peer; different hosts ->
 * NCCL; DSKIT_XCHG=nccl on one GPU -> the host (NCCL refuses it);
 * a DSKIT_XCHG of another value refused. Pure host code: no GPU needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runtime/common/error.h"
#include "runtime/gpu/gpu_xchg.h"

#include <stdio.h>
#include <string.h>

static gpu_xchg_where at(const char *host, int bus, int pid)
{
    gpu_xchg_where w;
    memset(&w, 0, sizeof w);
    snprintf(w.host, sizeof w.host, "%s", host);
    w.pci[1] = bus;
    w.pid = pid;
    return w;
}

static int pick(const gpu_xchg_where *w, const char *want, char *why)
{
    return gpu_xchg_pick(w, 2, want, why, 320);
}

static void test_one_host(void **state)
{
    (void)state;
    char why[320];
    gpu_xchg_where two_gpus[2] = {at("boot-a", 0x19, 10), at("boot-a", 0x3b, 11)};
    gpu_xchg_where one_gpu[2] = {at("boot-a", 0x19, 10), at("boot-a", 0x19, 11)};
    assert_int_equal(pick(two_gpus, NULL, why), GPU_XCHG_PEER);
    assert_int_equal(pick(two_gpus, "nccl", why), GPU_XCHG_NCCL);
    assert_int_equal(pick(two_gpus, "host", why), GPU_XCHG_HOST);
    assert_int_equal(pick(one_gpu, NULL, why), GPU_XCHG_HOST);
    assert_non_null(strstr(why, "share one GPU"));
    assert_int_equal(pick(one_gpu, "peer", why), GPU_XCHG_PEER);
    assert_int_equal(pick(one_gpu, "nccl", why), GPU_XCHG_HOST);
    assert_non_null(strstr(why, "NCCL refuses two ranks on one GPU"));
}

static void test_two_hosts(void **state)
{
    (void)state;
    char why[320];
    /* the same PCI address on two hosts is two GPUs */
    gpu_xchg_where w[2] = {at("boot-a", 0x19, 10), at("boot-b", 0x19, 10)};
    assert_int_equal(pick(w, NULL, why), GPU_XCHG_NCCL);
    assert_int_equal(pick(w, "peer", why), GPU_XCHG_HOST);
    assert_non_null(strstr(why, "one host"));
}

static void test_bad_want(void **state)
{
    (void)state;
    char why[320];
    gpu_xchg_where w[2] = {at("boot-a", 0x19, 10), at("boot-a", 0x3b, 11)};
    assert_int_equal(pick(w, "ipc", why), -1);
    assert_non_null(strstr(dsk_err_msg(), "DSKIT_XCHG=ipc: host, peer or nccl expected"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_host),
        cmocka_unit_test(test_two_hosts),
        cmocka_unit_test(test_bad_want),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
