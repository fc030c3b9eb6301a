/* The plan messages (runtime/ranks/plan.h) and what a follower does with a broken or hostile rank 0.
 *
 * The codec: every call rank 0 sends, encoded and decoded, comes back the same and re-encodes to the same
 * bytes; each defect class of the old inline decoding is refused with a message.
 *
 * The follower: this test plays rank 0 across hosts (a socket on the loopback) to a real
 * `dskit run --rank 1 --peer` on the tiny model. It writes the frames by hand (the wire format of
 * docs/ranks.md, independent of plan.c) and answers every exchange with zeros (a zero status is
 * success). Each malformed message must end the follower with exit 1 and a message naming it: before
 * the fixes these crashed it (an allow index, a draft count or a commit past what the message holds or
 * opened), allocated what the frame announced, or were ignored while the follower waited on. */
#include "tests/model/model_test_util.h"

#include "runtime/common/util.h"
#include "runtime/ranks/group.h"
#include "runtime/ranks/plan.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
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

/* ---- the codec ---- */

static plan_limits small_limits(void)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.vocab_size = 100; /* 4 mask words */
    c.vision_n_layers = 1;
    c.vision_patch_size = 2;
    c.vision_downsample_ratio = 2;
    c.vision_max_n_token = 16;
    plan_limits lim;
    plan_limits_init(&lim, &c, 8, 4, 64, 3);
    return lim;
}

/* decode(encode(m)) has m's values and encodes to the same bytes. */
static void round_trip(const plan_msg *m, const plan_limits *lim)
{
    unsigned char *a, *b;
    size_t na, nb;
    plan_msg d;
    assert_ok(plan_encode(m, lim, &a, &na));
    if (plan_decode(m->type, a, na, lim, &d))
        fail_msg("%s", dsk_err_msg());
    assert_int_equal(d.type, m->type);
    assert_int_equal(d.n, m->n);
    assert_ok(plan_encode(&d, lim, &b, &nb));
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    plan_msg_free(&d);
    free(a);
    free(b);
}

static void test_round_trips(void **state)
{
    (void)state;
    plan_limits lim = small_limits();
    srand(1);
    uint32_t masks[2][4];
    for (int i = 0; i < 8; i++)
        masks[i / 4][i % 4] = (uint32_t)rand();
    sample_params sp = {0.7f, 0.9f, 40, ((uint64_t)rand() << 32) | (uint64_t)rand()};
    engine_row rows[5] = {
        {0, 17, 3, 0, sp, NULL, -1},  {0, 99, 4, 1, sp, masks[1], 5}, {2, 0, 10, 0, sp, NULL, -1},
        {2, 42, 11, 1, sp, masks[0], -1}, {1, 7, 63, 1, SAMPLE_GREEDY, NULL, 20},
    };
    round_trip(&(plan_msg){.type = PLAN_STEP, .n = 5, .want = 1, .rows = rows}, &lim);
    engine_draft_req dr[2] = {{1, 5, sp}, {3, 98, SAMPLE_GREEDY}};
    round_trip(&(plan_msg){.type = PLAN_DRAFT, .n = 2, .want = 1, .drafts = dr}, &lim);
    round_trip(&(plan_msg){.type = PLAN_SEQ_OPEN, .seq = 3, .flags = ENGINE_SEQ_DRAFT, .reserve = 64}, &lim);
    round_trip(&(plan_msg){.type = PLAN_SEQ_CLOSE, .seq = 2}, &lim);
    round_trip(&(plan_msg){.type = PLAN_COMMIT, .seq = 1, .old_len = 40, .len = 12}, &lim);
    round_trip(&(plan_msg){.type = PLAN_SHUTDOWN}, &lim);
    uint16_t patches[3 * 5 * 12];
    for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++)
        patches[i] = (uint16_t)rand();
    round_trip(&(plan_msg){.type = PLAN_IMAGE, .seq = 0, .pos = 9, .image = {patches, 3, 5, 0x1234567890abcdefull}},
               &lim);
    /* a decoded step's values, and its rows' masks where they were */
    unsigned char *p;
    size_t n;
    plan_msg d;
    assert_ok(plan_encode(&(plan_msg){.type = PLAN_STEP, .n = 5, .rows = rows}, &lim, &p, &n));
    assert_int_equal(n, 16 + 5 * 56 + 2 * 4 * 4);
    assert_ok(plan_decode(PLAN_STEP, p, n, &lim, &d));
    for (int i = 0; i < 5; i++) {
        assert_int_equal(d.rows[i].seq, rows[i].seq);
        assert_int_equal(d.rows[i].token, rows[i].token);
        assert_int_equal(d.rows[i].pos, rows[i].pos);
        assert_int_equal(d.rows[i].top_logprobs, rows[i].top_logprobs);
        assert_int_equal(d.rows[i].sp.seed, rows[i].sp.seed);
        assert_int_equal(!d.rows[i].allow, !rows[i].allow);
        if (rows[i].allow)
            assert_memory_equal(d.rows[i].allow, rows[i].allow, sizeof masks[0]);
    }
    plan_msg_free(&d);
    free(p);
}

/* A payload refused, with a message holding `what`. */
static void refused(uint32_t type, const void *p, size_t n, const plan_limits *lim, const char *what)
{
    plan_msg d;
    if (plan_decode(type, p, n, lim, &d) == 0)
        fail_msg("a %u message of %zu bytes was accepted (expected: %s)", type, n, what);
    if (!strstr(dsk_err_msg(), what))
        fail_msg("refused with '%s', expected '%s'", dsk_err_msg(), what);
}

static void set32(unsigned char *p, size_t at, int32_t v)
{
    memcpy(p + at, &v, 4);
}

/* The defects of the inline decoding each refused: a step shorter than its header, fixed messages shorter
 * than their struct, an allow index past the masks, a draft count past the payload, a message past the
 * limit; and what the checks add: ids, counts, rows out of order, padding, unknown types. */
static void test_refusals(void **state)
{
    (void)state;
    plan_limits lim = small_limits();
    unsigned char b[4096] = {0};
    refused(PLAN_STEP, b, 4, &lim, "header is cut");
    refused(PLAN_SEQ_OPEN, b, 0, &lim, "holds 0 bytes, not 16");
    refused(PLAN_SEQ_CLOSE, b, 2, &lim, "holds 2 bytes, not 4");
    refused(PLAN_COMMIT, b, 8, &lim, "holds 8 bytes, not 24");
    refused(PLAN_DRAFT, b, 4, &lim, "header is cut");
    refused(PLAN_IMAGE, b, 8, &lim, "header is cut");
    refused(PLAN_SHUTDOWN, b, 1, &lim, "holds 1 bytes, not 0");
    refused(99, b, 0, &lim, "not a type rank 0 sends");
    refused(PLAN_STEP, b, lim.max_bytes + 1, &lim, "more than the");
    /* a step of one row with no masks whose allow names mask 5 */
    unsigned char *p;
    size_t n;
    engine_row row = {1, 7, 3, 1, SAMPLE_GREEDY, NULL, -1};
    assert_ok(plan_encode(&(plan_msg){.type = PLAN_STEP, .n = 1, .rows = &row}, &lim, &p, &n));
    set32(p, 16 + 48, 5);
    refused(PLAN_STEP, p, n, &lim, "mask 5");
    set32(p, 16 + 48, 0);
    refused(PLAN_STEP, p, n, &lim, "holds 0 masks");
    set32(p, 16 + 48, -1);
    set32(p, 16 + 4, 100);
    refused(PLAN_STEP, p, n, &lim, "outside the vocabulary");
    set32(p, 16 + 4, 7);
    set32(p, 16, 4);
    refused(PLAN_STEP, p, n, &lim, "sequence 4 is not one of 0..3");
    set32(p, 16, 1);
    set32(p, 16 + 36, 1);
    refused(PLAN_STEP, p, n, &lim, "padding");
    set32(p, 16 + 36, 0);
    set32(p, 0, 2);
    refused(PLAN_STEP, p, n, &lim, "does not hold 2 rows");
    set32(p, 0, 9);
    refused(PLAN_STEP, p, n, &lim, "9 rows, a step carries 1..8");
    set32(p, 0, 1);
    set32(p, 8, 1);
    refused(PLAN_STEP, p, n, &lim, "does not hold 1 rows and 1 masks");
    free(p);
    /* two rows using one mask twice, in the wrong order, a sequence in two runs */
    uint32_t mk[4] = {1, 2, 3, 4};
    engine_row two[3] = {{0, 1, 0, 1, SAMPLE_GREEDY, mk, -1}, {0, 1, 1, 1, SAMPLE_GREEDY, mk, -1},
                         {1, 1, 0, 0, SAMPLE_GREEDY, NULL, -1}};
    assert_ok(plan_encode(&(plan_msg){.type = PLAN_STEP, .n = 3, .rows = two}, &lim, &p, &n));
    set32(p, 16 + 56 + 48, 0);
    refused(PLAN_STEP, p, n, &lim, "row 1: mask 0, but the next");
    set32(p, 16 + 56 + 48, 1);
    set32(p, 16 + 56 + 16, 5);
    refused(PLAN_STEP, p, n, &lim, "does not follow");
    set32(p, 16 + 56 + 16, 1);
    set32(p, 16 + 112, 0);
    set32(p, 16 + 56, 1);
    refused(PLAN_STEP, p, n, &lim, "appears twice");
    free(p);
    /* a draft whose count is past its payload */
    engine_draft_req dr = {1, 5, SAMPLE_GREEDY};
    assert_ok(plan_encode(&(plan_msg){.type = PLAN_DRAFT, .n = 1, .drafts = &dr}, &lim, &p, &n));
    set32(p, 0, 3);
    refused(PLAN_DRAFT, p, n, &lim, "does not hold 3 requests");
    set32(p, 0, 1 << 20);
    refused(PLAN_DRAFT, p, n, &lim, "a draft carries 0..4");
    free(p);
    plan_limits nodraft = lim;
    nodraft.draft_block = 0;
    assert_ok(plan_encode(&(plan_msg){.type = PLAN_DRAFT, .n = 1, .drafts = &dr}, &lim, &p, &n));
    refused(PLAN_DRAFT, p, n, &nodraft, "no drafter");
    free(p);
    /* an image whose grid makes more positions than the model's 16: 1 x 30 patches, 1 x 15 cells, 18 */
    uint16_t patches[30 * 12] = {0};
    assert_ok(plan_encode(&(plan_msg){.type = PLAN_IMAGE, .image = {patches, 1, 30, 0}}, &lim, &p, &n));
    refused(PLAN_IMAGE, p, n, &lim, "more positions");
    free(p);
    /* a frame that announces more than the limit, before anything is read or allocated */
    unsigned char f[PLAN_FRAME_BYTES];
    uint32_t type;
    size_t bytes;
    plan_frame_encode(PLAN_STEP, (size_t)1 << 40, f);
    assert_int_equal(plan_frame_decode(f, lim.max_bytes, &type, &bytes), -1);
    assert_non_null(strstr(dsk_err_msg(), "announced"));
    plan_frame_encode(PLAN_STEP, lim.max_bytes, f);
    assert_ok(plan_frame_decode(f, lim.max_bytes, &type, &bytes));
    assert_int_equal(bytes, lim.max_bytes);
}

/* ---- a hostile rank 0 ---- */

static void put(dsk_buf *b, const void *p, size_t n)
{
    assert_ok(dsk_buf_append(b, p, n));
}

static void put32v(dsk_buf *b, int32_t v)
{
    put(b, &v, 4);
}

static void put64v(dsk_buf *b, int64_t v)
{
    put(b, &v, 8);
}

static void frame(dsk_buf *b, uint32_t type, uint64_t bytes)
{
    put32v(b, (int32_t)type);
    put32v(b, 0);
    put64v(b, (int64_t)bytes);
}

/* SEQ_OPEN of sequence 0: 16 bytes, as rank 0 sends it. */
static void open_seq0(dsk_buf *b)
{
    frame(b, PLAN_SEQ_OPEN, 16);
    put32v(b, 0);
    put32v(b, 0);
    put64v(b, 64);
}

/* A step of one greedy sampling row of sequence 0 at position 0 whose allow index is `allow`, with no
 * masks. */
static void step_allow(dsk_buf *b, int32_t allow)
{
    frame(b, PLAN_STEP, 16 + 56);
    put32v(b, 1), put32v(b, 0), put32v(b, 0), put32v(b, 0);         /* n, want_taps, masks, pad */
    put32v(b, 0), put32v(b, 1), put32v(b, 1), put32v(b, -1);        /* seq, token, sample, top_logprobs */
    put64v(b, 0);                                                   /* pos */
    float t = 0.0f, top_p = 1.0f;
    put(b, &t, 4), put(b, &top_p, 4), put32v(b, 0), put32v(b, 0);  /* temperature, top_p, top_k, pad */
    put64v(b, 0);                                                   /* seed */
    put32v(b, allow), put32v(b, 0);
}

static int send_all(int s, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = send(s, (const char *)p + done, n - done, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

static int recv_all(int s, void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t r = recv(s, (char *)p + done, n - done, 0);
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* Play rank 0 to a `dskit run --rank 1 --peer` follower: settings (rank 1's own echoed back, or `settings`
 * when given: 1024 bytes), the open's status, then the messages of plan[0..n) with a successful status
 * exchange after each but the last (every message here before the last is a sequence open), then zeros
 * for every exchange until rank 1 closes (or 20 s). Returns rank 1's exit status (128 + signal when
 * killed); its stderr in *err. */
static int hostile_rank0(const char *settings, const dsk_buf *plan, int n, char **err)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_true(ls >= 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    assert_ok(bind(ls, (struct sockaddr *)&a, sizeof a));
    assert_ok(listen(ls, 1));
    assert_ok(getsockname(ls, (struct sockaddr *)&a, &al));
    char cmd[4096], errpath[1200];
    snprintf(errpath, sizeof errpath, "%s/hostile.err", model_test_root);
    snprintf(cmd, sizeof cmd, "exec %s/dskit run --backend cpu --model %s --tp 2 --rank 1 --peer 127.0.0.1:%d 2>%s",
             test_binary_dir(), dir, ntohs(a.sin_port), errpath);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ls);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct pollfd pl = {ls, POLLIN, 0};
    assert_int_equal(poll(&pl, 1, 60000), 1);
    int s = accept(ls, NULL, NULL);
    close(ls);
    assert_true(s >= 0);
    char theirs[1024], status[504] = {0};
    assert_ok(recv_all(s, theirs, sizeof theirs));
    assert_ok(send_all(s, settings ? settings : theirs, sizeof theirs));
    /* the open's agreement, then the plan */
    for (int k = -1; !settings && k < n && recv_all(s, status, sizeof status) == 0; k++) {
        memset(status, 0, sizeof status);
        send_all(s, status, sizeof status);
        if (k + 1 < n && send_all(s, plan[k + 1].data, plan[k + 1].len))
            break;
        if (k + 2 >= n)
            break;
    }
    double t0 = dsk_now();
    char buf[65536], zeros[65536] = {0};
    while (dsk_now() - t0 < 20) {
        struct pollfd p = {s, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t r = recv(s, buf, sizeof buf, 0);
        if (r <= 0 || send_all(s, zeros, (size_t)r))
            break;
    }
    close(s);
    int st, rc = -1;
    for (t0 = dsk_now(); dsk_now() - t0 < 10;) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    if (rc < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    size_t len;
    if (dsk_read_file(errpath, err, &len))
        *err = strdup("");
    return rc;
}

/* Rank 1 must stop by itself within the time rank 0 waits (not when this test gives up on it), exit 1
 * and say what was wrong. plan[0] is a sequence open when n is 2. */
static int expect_refused(const char *what, const dsk_buf *plan, int n, const char *said)
{
    char *err;
    double t0 = dsk_now();
    int rc = hostile_rank0(NULL, plan, n, &err);
    double took = dsk_now() - t0;
    int ok = rc == 1 && strstr(err, said) && took <= 15;
    printf("%s%s: rank 1 exit %d after %.1f s%s:\n%s", ok ? "" : "WRONG: ", what, rc, took,
           ok ? "" : " (expected exit 1 within 15 s saying what is wrong)", err);
    free(err);
    return ok ? 0 : 1;
}

static void test_hostile_rank0(void **state)
{
    (void)state;
    dsk_buf b[2] = {{0}, {0}};
    int wrong = 0; /* every case runs: a report of each */
    open_seq0(&b[0]);
    /* the frame announces 2^40 bytes: refused before allocating */
    frame(&b[1], PLAN_STEP, (uint64_t)1 << 40);
    wrong += expect_refused("a 1 TiB frame", &b[1], 1, "more than the");
    /* fixed messages shorter than their struct */
    b[1].len = 0;
    frame(&b[1], PLAN_SEQ_OPEN, 0);
    wrong += expect_refused("an empty sequence open", &b[1], 1, "holds 0 bytes, not 16");
    b[1].len = 0;
    frame(&b[1], PLAN_STEP, 4);
    put32v(&b[1], 1);
    wrong += expect_refused("a step of 4 bytes", &b[1], 1, "header is cut");
    /* a row's allow index past the message's masks */
    b[1].len = 0;
    step_allow(&b[1], 1 << 20);
    wrong += expect_refused("an allow index past the masks", b, 2, "mask 1048576");
    /* a draft count past its payload */
    b[1].len = 0;
    frame(&b[1], PLAN_DRAFT, 8);
    put32v(&b[1], 1 << 20), put32v(&b[1], 0);
    wrong += expect_refused("a draft of 2^20 requests in 8 bytes", b, 2, "requests");
    /* a commit of a sequence never opened */
    b[1].len = 0;
    frame(&b[1], PLAN_COMMIT, 24);
    put32v(&b[1], 0), put32v(&b[1], 0), put64v(&b[1], 5), put64v(&b[1], 0);
    wrong += expect_refused("a commit of a closed sequence", &b[1], 1, "not open");
    /* an unknown type */
    b[1].len = 0;
    frame(&b[1], 99, 0);
    wrong += expect_refused("type 99", &b[1], 1, "not a type rank 0 sends");
    dsk_buf_free(&b[0]);
    dsk_buf_free(&b[1]);
    assert_int_equal(wrong, 0);
}

/* Settings are 1024 raw bytes: a peer's without a NUL are cut at 1023, not read on into the next
 * rank's. */
static void test_settings_without_nul(void **state)
{
    (void)state;
    char s[1024], *err;
    memset(s, 'A', sizeof s);
    int rc = hostile_rank0(s, NULL, 0, &err);
    char want[1100];
    snprintf(want, sizeof want, "rank 0: %.1023s\n", s);
    if (rc == 0 || !strstr(err, "differs") || !strstr(err, want))
        fail_msg("rank 1: exit %d, the message's end:\n%s", rc, err + (strlen(err) > 300 ? strlen(err) - 300 : 0));
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_hostile_rank0),
        cmocka_unit_test(test_settings_without_nul),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
