/* Two ranks as processes on the CPU backend (tiny preset), through `dskit run --tp 2`: the same run twice
 * gives the same bits; drafted == serial, greedy and seeded; a follower that cannot open, a rank-local
 * step failure, a rank that exits, stalls or is killed with SIGKILL at a random point: each a clear error
 * naming the rank, the other rank gone within a second, and no process left behind. */
#include "tests/model/model_test_util.h"

#include "runtime/common/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static cpu_model *M;
static char dir[1100];

static int setup(void **state)
{
    (void)state;
    M = model_test_make("tiny", 4);
    snprintf(dir, sizeof dir, "%s/ckpt", model_test_root);
    return M ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    model_test_cleanup(M);
    return 0;
}

static const char *prompt = "0 1042 77 9000 313 99 64000 12 2 40000 7 4242";

/* Start `dskit run --tp 2 ...` with stdout and stderr into files; returns its pid. */
static pid_t start_run(const char *extra, const char *fault, const char *out, const char *err)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s/dskit run --backend cpu --model %s --prompt-ids \"%s\" --print-ids --tp 2 %s",
             test_binary_dir(), dir, prompt, extra);
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0) {
        if (fault)
            setenv("DSKIT_RANK_FAULT", fault, 1);
        else
            unsetenv("DSKIT_RANK_FAULT");
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return p;
}

static int finish(pid_t p)
{
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *path)
{
    char *d;
    size_t n;
    if (dsk_read_file(path, &d, &n))
        return strdup("");
    return d;
}

/* The pids of this test's `rank-follower` processes (their model is under model_test_root: other
 * worktrees' tests run followers on the same shared machine) whose parent is `parent` (0: any). */
static int followers(pid_t parent, pid_t *out, int cap)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = 0;
        /* a follower of this test's own model: other programs on the machine may run ranks of their own */
        int is = 0, ours = 0;
        for (ssize_t i = 0; i < len; i += (ssize_t)strlen(buf + i) + 1) {
            is |= !strcmp(buf + i, "rank-follower");
            ours |= strstr(buf + i, model_test_root) != NULL;
        }
        if (!is || !ours)
            continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        int pid = 0, ppid = 0;
        char state;
        if (f && fscanf(f, "%d %*s %c %d", &pid, &state, &ppid) == 3 && state != 'Z' &&
            (!parent || ppid == parent) && n < cap)
            out[n++] = pid;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

static void run_ok(const char *extra, char **ids, char **dump_path)
{
    static int k;
    char out[1200], err[1200], args[2000] = "";
    snprintf(out, sizeof out, "%s/run%d.out", model_test_root, k);
    snprintf(err, sizeof err, "%s/run%d.err", model_test_root, k);
    if (dump_path) {
        *dump_path = malloc(1200);
        snprintf(*dump_path, 1200, "%s/run%d.f32", model_test_root, k);
        snprintf(args, sizeof args, "%s --dump-logits %s", extra, *dump_path);
    } else
        snprintf(args, sizeof args, "%s", extra);
    k++;
    int rc = finish(start_run(args, NULL, out, err));
    if (rc) {
        char *e = slurp(err);
        fail_msg("dskit run --tp 2 %s: exit %d: %s", extra, rc, e);
    }
    *ids = slurp(out);
}

static void assert_same_file(const char *a, const char *b)
{
    char *x, *y;
    size_t nx, ny;
    assert_ok(dsk_read_file(a, &x, &nx));
    assert_ok(dsk_read_file(b, &y, &ny));
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    free(x);
    free(y);
}

static void test_repeatable_and_drafted(void **state)
{
    (void)state;
    const char *modes[2] = {"--max-tokens 20", "--max-tokens 20 --temperature 0.8 --seed 5"};
    for (int m = 0; m < 2; m++) {
        char *a, *b, *c, *da, *db, *dc, args[200];
        run_ok(modes[m], &a, &da);
        run_ok(modes[m], &b, &db);
        snprintf(args, sizeof args, "%s --draft", modes[m]);
        run_ok(args, &c, &dc);
        assert_string_equal(a, b);
        assert_string_equal(a, c);
        assert_same_file(da, db);
        assert_same_file(da, dc);
        free(a), free(b), free(c), free(da), free(db), free(dc);
    }
    assert_int_equal(followers(0, (pid_t[8]){0}, 8), 0);
}

/* A fault: the run fails with a message naming `who`, nothing is left running. */
static void expect_failure(const char *fault, const char *who, const char *what)
{
    char out[1200], err[1200];
    snprintf(out, sizeof out, "%s/fault.out", model_test_root);
    snprintf(err, sizeof err, "%s/fault.err", model_test_root);
    double t0 = dsk_now();
    int rc = finish(start_run("--max-tokens 8", fault, out, err));
    char *e = slurp(err);
    if (rc == 0 || !strstr(e, who) || !strstr(e, what))
        fail_msg("DSKIT_RANK_FAULT=%s: exit %d, stderr:\n%s", fault, rc, e);
    printf("%s: exit %d after %.1f s\n", fault, rc, dsk_now() - t0);
    free(e);
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    assert_int_equal(followers(0, (pid_t[8]){0}, 8), 0);
}

static void test_faults(void **state)
{
    (void)state;
    expect_failure("1:open", "rank 1", "injected fault");
    expect_failure("1:step:3", "rank 1", "injected fault");
    expect_failure("1:exit:3", "rank 1 exited", "status 3");
    expect_failure("1:stall:3", "rank 0 waited", "for an exchange");
}

/* SIGKILL one rank while the two generate: the other is gone within a second, naming it. */
static void kill_one(int victim_rank)
{
    char out[1200], err[1200];
    snprintf(out, sizeof out, "%s/kill.out", model_test_root);
    snprintf(err, sizeof err, "%s/kill.err", model_test_root);
    pid_t lead = start_run("--max-tokens 100000", NULL, out, err), f[8];
    double t0 = dsk_now();
    int nf = 0;
    while ((nf = followers(lead, f, 8)) == 0 && dsk_now() - t0 < 60) {
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(nf, 1);
    /* a random moment after both have started generating */
    srand((unsigned)time(NULL) ^ (unsigned)victim_rank);
    while (dsk_now() - t0 < 60) {
        char *o = slurp(out);
        int started = strlen(o) > 0;
        free(o);
        if (started)
            break;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, (long)(rand() % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    pid_t victim = victim_rank == 0 ? lead : f[0], other = victim_rank == 0 ? f[0] : lead;
    assert_int_equal(kill(victim, SIGKILL), 0);
    double tk = dsk_now(), gone = -1;
    while (dsk_now() - tk < 5) {
        int st;
        if (other == lead ? waitpid(lead, &st, WNOHANG) == lead : followers(0, f, 8) == 0) {
            gone = dsk_now() - tk;
            break;
        }
        struct timespec p = {0, 5000000};
        nanosleep(&p, NULL);
    }
    if (other != lead)
        finish(lead);
    printf("rank %d killed: rank %d gone after %.3f s\n", victim_rank, 1 - victim_rank, gone);
    assert_true(gone >= 0 && gone <= 1.0);
    if (victim_rank == 1) {
        char *e = slurp(err);
        if (!strstr(e, "rank 1 was killed by signal 9"))
            fail_msg("stderr does not name the killed rank:\n%s", e);
        free(e);
    }
    assert_int_equal(followers(0, f, 8), 0);
}

static void test_kill(void **state)
{
    (void)state;
    kill_one(1);
    kill_one(0);
}

/* Across hosts (here: two processes on the loopback): rank 1 started by hand follows rank 0 over TCP and
 * gives the same bits as the shared-memory pair; a peer with another model is refused with both settings
 * printed; a peer that never connects is an error within the bound. */
static void test_across_hosts(void **state)
{
    (void)state;
    char *ids_shm, *dump_shm;
    run_ok("--max-tokens 12", &ids_shm, &dump_shm);
    int port = 20000 + (int)(getpid() % 20000);
    char cmd[16384], peer[64], out[1200], err[1200], err1[1200];
    snprintf(peer, sizeof peer, "127.0.0.1:%d", port);
    snprintf(out, sizeof out, "%s/tcp.out", model_test_root);
    snprintf(err, sizeof err, "%s/tcp.err", model_test_root);
    snprintf(err1, sizeof err1, "%s/tcp1.err", model_test_root);
    snprintf(cmd, sizeof cmd,
             "%s/dskit run --backend cpu --model %s --tp 2 --rank 1 --peer %s 2>%s & "
             "%s/dskit run --backend cpu --model %s --prompt-ids \"%s\" --print-ids --tp 2 --rank 0 --peer %s "
             "--max-tokens 12 --dump-logits %s/tcp.f32 >%s 2>%s; rc=$?; wait; exit $rc",
             test_binary_dir(), dir, peer, err1, test_binary_dir(), dir, prompt, peer, model_test_root, out, err);
    int rc = system(cmd);
    assert_int_equal(rc, 0);
    char *ids = slurp(out), *e1 = slurp(err1), dump[1300];
    assert_string_equal(ids, ids_shm);
    snprintf(dump, sizeof dump, "%s/tcp.f32", model_test_root);
    assert_same_file(dump, dump_shm);
    assert_string_equal(e1, ""); /* a clean stop: nothing to say */
    free(ids), free(e1), free(ids_shm), free(dump_shm);
    /* another model on rank 1: refused on both sides, both settings printed */
    char other[1200];
    snprintf(other, sizeof other, "%s/other", model_test_root);
    snprintf(cmd, sizeof cmd,
             "%s/dskit mkmodel --preset tiny --seed 77 --out %s >/dev/null && "
             "(%s/dskit run --backend cpu --model %s --tp 2 --rank 1 --peer 127.0.0.1:%d 2>%s &) ; "
             "%s/dskit run --backend cpu --model %s --prompt-ids \"1 2\" --tp 2 --rank 0 --peer 127.0.0.1:%d "
             "--max-tokens 2 >%s 2>%s; sleep 1",
             test_binary_dir(), other, test_binary_dir(), other, port + 1, err1, test_binary_dir(), dir, port + 1, out,
             err);
    assert_true(system(cmd) != -1);
    char *e = slurp(err);
    e1 = slurp(err1);
    if (!strstr(e, "differs") || !strstr(e, "rank 0: model") || !strstr(e, "rank 1: model") || !strstr(e1, "differs"))
        fail_msg("a mismatched peer was not refused on both sides:\nrank 0: %s\nrank 1: %s", e, e1);
    free(e), free(e1);
    /* nobody at the other end: an error within the bound */
    double t0 = dsk_now();
    snprintf(cmd, sizeof cmd,
             "%s/dskit run --backend cpu --model %s --prompt-ids \"1 2\" --tp 2 --rank 0 --peer 127.0.0.1:%d "
             "--rank-timeout 2 --max-tokens 2 >%s 2>%s",
             test_binary_dir(), dir, port + 2, out, err);
    rc = system(cmd);
    e = slurp(err);
    assert_true(rc != 0 && strstr(e, "never connected"));
    assert_true(dsk_now() - t0 < 20);
    free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeatable_and_drafted),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_kill),
        cmocka_unit_test(test_across_hosts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
