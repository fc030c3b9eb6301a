/* The rank group on one host: one shared-memory segment (memfd, inherited by the followers rank 0
 * execs) holding the abort word, each rank's pid and settings, the exchange slots and the plan ring.
 * Every wait spins briefly, then sleeps in short steps, and on every step checks the abort word, its
 * deadline and whether the other ranks are still alive, so a dead or stuck rank stops everyone within
 * a second. */
#include "runtime/ranks/group.h"
#include "runtime/ranks/plan.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SEG_MAGIC 0x64736b72616e6b31ull /* "dskrank1" */
#define SLOT_BYTES ((size_t)4 << 20)    /* one rank's share of one exchange; larger ones go in pieces */
#define PLAN_BYTES ((size_t)8 << 20)

typedef struct {
    _Alignas(64) _Atomic uint64_t v;
} padded_u64;

typedef struct {
    uint64_t magic;
    int32_t tp;
    uint32_t pad0;
    _Atomic int32_t aborted;     /* 0, or 1 + the rank that set it */
    char abort_msg[512];
    _Atomic int32_t pid[RANKS_MAX];
    _Atomic int32_t attached[RANKS_MAX];
    char settings[RANKS_MAX][1024];
    padded_u64 published[RANKS_MAX]; /* exchanges each rank has put in its slot */
    padded_u64 plan_w;               /* plan bytes rank 0 has written */
    padded_u64 plan_r[RANKS_MAX];    /* plan bytes each follower has read */
} seg_hdr;

struct rank_group {
    rank_xchg x;
    int tp, rank, fd;
    seg_hdr *h;
    unsigned char *slots; /* [2][tp][SLOT_BYTES] */
    unsigned char *plan;  /* [PLAN_BYTES] */
    size_t seg_bytes;
    uint64_t exchanges;   /* this rank's count */
    pid_t child[RANKS_MAX];
    int child_done[RANKS_MAX];
    int timeout_ms;
    double slowest_round;
    pthread_t watchdog;
    int watching;
    _Atomic int stop_watching;
    int sock;             /* across hosts (tp 2): the connection to the other rank, else -1; the header and
                           * the slots are then this process's own memory */
};

/* ---- liveness, abort, bounded waits ---- */

static void set_abort(rank_group *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_abort(rank_group *g, const char *fmt, ...)
{
    int32_t zero = 0;
    if (!atomic_compare_exchange_strong(&g->h->aborted, &zero, g->rank + 1))
        return; /* someone was first: theirs is the cause */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->h->abort_msg, sizeof g->h->abort_msg, fmt, ap);
    va_end(ap);
}

/* The abort as an error message: its cause, and the rank that saw it. */
static int abort_error(rank_group *g)
{
    int32_t a = atomic_load(&g->h->aborted);
    return dsk_err("%s (seen by rank %d)", g->h->abort_msg, a - 1);
}

/* Whether every other rank is alive; when one is not, the abort word says which and why. */
static int others_alive(rank_group *g)
{
    if (g->sock >= 0) {
        struct pollfd p = {g->sock, POLLRDHUP, 0};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            set_abort(g, "rank %d closed the connection", 1 - g->rank);
            return 0;
        }
        return 1;
    }
    if (g->rank == 0) {
        for (int r = 1; r < g->tp; r++) {
            if (g->child[r] <= 0 || g->child_done[r])
                continue;
            int st;
            pid_t p = waitpid(g->child[r], &st, WNOHANG);
            if (p == g->child[r]) {
                g->child_done[r] = 1;
                if (WIFSIGNALED(st))
                    set_abort(g, "rank %d was killed by signal %d", r, WTERMSIG(st));
                else
                    set_abort(g, "rank %d exited with status %d", r, WEXITSTATUS(st));
                return 0;
            }
        }
        return 1;
    }
    pid_t p0 = (pid_t)atomic_load(&g->h->pid[0]);
    if (p0 > 0 && getppid() != p0) {
        set_abort(g, "rank 0 (pid %d) is gone", (int)p0);
        return 0;
    }
    return 1;
}

/* Every rank runs one: every 20 ms it checks that the other ranks live (rank 0 reaps its followers; a
 * follower watches its parent); when a rank is gone or the abort word is set, it says so on stderr, gives
 * this process 200 ms to stop on its own (its waits fail on the abort word), then ends it: every
 * rank stops within a second, also one busy computing. */
static void *watch(void *arg)
{
    rank_group *g = arg;
    while (!atomic_load(&g->stop_watching)) {
        others_alive(g);
        if (atomic_load(&g->h->aborted)) {
            int32_t a = atomic_load(&g->h->aborted);
            fprintf(stderr, "dskit: rank %d: stopping: %s (seen by rank %d)\n", g->rank, g->h->abort_msg, a - 1);
            for (int i = 0; i < 10 && !atomic_load(&g->stop_watching); i++) {
                struct timespec ts = {0, 20000000};
                nanosleep(&ts, NULL);
            }
            if (!atomic_load(&g->stop_watching)) {
                if (g->rank == 0)
                    for (int r = 1; r < g->tp; r++)
                        if (g->child[r] > 0 && !g->child_done[r])
                            kill(g->child[r], SIGKILL);
                _exit(1);
            }
            return NULL;
        }
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int start_watch(rank_group *g)
{
    if (pthread_create(&g->watchdog, NULL, watch, g))
        return dsk_err("rank %d: cannot start its watchdog thread", g->rank);
    g->watching = 1;
    return 0;
}

static void stop_watch(rank_group *g)
{
    if (!g->watching)
        return;
    atomic_store(&g->stop_watching, 1);
    pthread_join(g->watchdog, NULL);
    g->watching = 0;
}

typedef int (*ready_fn)(rank_group *g, void *ctx);

/* Wait until ready(g, ctx), at most timeout_ms (< 0: no deadline, for an idle follower); 0 when ready, -1
 * (with a message) on abort, a dead rank or the deadline. */
static int wait_until(rank_group *g, ready_fn ready, void *ctx, int timeout_ms, const char *what)
{
    double t0 = dsk_now(), last_check = t0;
    for (unsigned spin = 0;; spin++) {
        if (ready(g, ctx))
            return 0;
        if (atomic_load_explicit(&g->h->aborted, memory_order_acquire))
            return abort_error(g);
        if (spin < 2000)
            continue;
        double now = dsk_now();
        if (now - last_check > 0.01) {
            last_check = now;
            if (timeout_ms >= 0 && (now - t0) * 1000.0 > timeout_ms) {
                set_abort(g, "rank %d waited %.1f s for %s (the bound)", g->rank, now - t0, what);
                return abort_error(g);
            }
        }
        struct timespec ts = {0, spin < 20000 ? 0 : 50000};
        if (ts.tv_nsec)
            nanosleep(&ts, NULL);
        else
            sched_yield();
    }
}

/* ---- exchanges ---- */

typedef struct {
    uint64_t k;
} seq_ctx;

static int all_published(rank_group *g, void *ctx)
{
    uint64_t k = ((seq_ctx *)ctx)->k;
    for (int r = 0; r < g->tp; r++)
        if (atomic_load_explicit(&g->h->published[r].v, memory_order_acquire) < k)
            return 0;
    return 1;
}

/* Exchange bounds: at least 2 s, and ten times the slowest round seen (a long prompt chunk on one rank
 * is not a failure), at most the configured timeout while no round has been measured. */
static int exchange_timeout(const rank_group *g)
{
    double t = g->slowest_round * 10.0 * 1000.0;
    if (t < 2000.0)
        t = 2000.0;
    return g->slowest_round > 0 ? (int)(t < 3600e3 ? t : 3600e3) : g->timeout_ms;
}

/* Across hosts: send `out` and receive `in` (the same length) at once, so neither side blocks on a full
 * socket buffer; bounded, watching the abort word. */
static int sock_swap(rank_group *g, const void *out, void *in, size_t bytes, int timeout_ms, const char *what)
{
    size_t sent = 0, got = 0;
    double t0 = dsk_now();
    while (sent < bytes || got < bytes) {
        if (atomic_load(&g->h->aborted))
            return abort_error(g);
        struct pollfd p = {g->sock, (short)((got < bytes ? POLLIN : 0) | (sent < bytes ? POLLOUT : 0)), 0};
        int r = poll(&p, 1, 20);
        if (r < 0 && errno != EINTR)
            return dsk_err_errno("rank %d: poll on the connection", g->rank);
        if ((dsk_now() - t0) * 1000.0 > timeout_ms && timeout_ms >= 0) {
            set_abort(g, "rank %d waited %.1f s for %s (the bound)", g->rank, dsk_now() - t0, what);
            return abort_error(g);
        }
        if (r <= 0)
            continue;
        if ((p.revents & POLLOUT) && sent < bytes) {
            ssize_t w = send(g->sock, (const char *)out + sent, bytes - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
                set_abort(g, "rank %d: sending to rank %d failed: %s", g->rank, 1 - g->rank, strerror(errno));
                return abort_error(g);
            }
            sent += w > 0 ? (size_t)w : 0;
        }
        if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && got < bytes) {
            ssize_t rd = recv(g->sock, (char *)in + got, bytes - got, MSG_DONTWAIT);
            if (rd == 0 || (rd < 0 && errno != EAGAIN && errno != EINTR)) {
                set_abort(g, "rank %d closed the connection", 1 - g->rank);
                return abort_error(g);
            }
            got += rd > 0 ? (size_t)rd : 0;
        }
    }
    return 0;
}

/* Put `bytes` (<= SLOT_BYTES) of mine in this rank's slot of exchange k and wait for every rank's. */
static int publish(rank_group *g, const void *mine, size_t bytes, unsigned char **slot_base)
{
    if (g->sock >= 0) {
        unsigned char *base = g->slots;
        memcpy(base + (size_t)g->rank * SLOT_BYTES, mine, bytes);
        if (sock_swap(g, mine, base + (size_t)(1 - g->rank) * SLOT_BYTES, bytes, exchange_timeout(g), "an exchange"))
            return -1;
        *slot_base = base;
        return 0;
    }
    uint64_t k = ++g->exchanges;
    unsigned char *base = g->slots + (size_t)(k & 1) * (size_t)g->tp * SLOT_BYTES;
    memcpy(base + (size_t)g->rank * SLOT_BYTES, mine, bytes);
    atomic_store_explicit(&g->h->published[g->rank].v, k, memory_order_release);
    seq_ctx c = {k};
    if (wait_until(g, all_published, &c, exchange_timeout(g), "an exchange"))
        return -1;
    *slot_base = base;
    return 0;
}

static int shm_allgather_sum(rank_xchg *x, float *buf, size_t n)
{
    rank_group *g = x->impl;
    size_t per = SLOT_BYTES / sizeof(float);
    for (size_t off = 0; off < n; off += per) {
        size_t m = n - off < per ? n - off : per;
        unsigned char *base;
        if (publish(g, buf + off, m * sizeof(float), &base))
            return -1;
        /* the same sum on every rank: rank 0's partial, plus rank 1's, ... */
        const float *p0 = (const float *)base;
        for (size_t i = 0; i < m; i++) {
            float s = p0[i];
            for (int r = 1; r < g->tp; r++)
                s += ((const float *)(base + (size_t)r * SLOT_BYTES))[i];
            buf[off + i] = s;
        }
    }
    return 0;
}

static int shm_allgather(rank_xchg *x, const void *mine, size_t bytes, void *all)
{
    rank_group *g = x->impl;
    for (size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += SLOT_BYTES) {
        size_t m = bytes - off < SLOT_BYTES ? bytes - off : SLOT_BYTES;
        unsigned char *base;
        if (publish(g, (const unsigned char *)mine + off, m, &base))
            return -1;
        for (int r = 0; r < g->tp; r++)
            memcpy((unsigned char *)all + (size_t)r * bytes + off, base + (size_t)r * SLOT_BYTES, m);
        if (bytes == 0)
            break;
    }
    return 0;
}

static void shm_abort(rank_xchg *x, const char *cause)
{
    rank_group *g = x->impl;
    set_abort(g, "rank %d: %s", g->rank, cause);
}

static int shm_aborted(rank_xchg *x)
{
    rank_group *g = x->impl;
    if (atomic_load(&g->h->aborted)) {
        abort_error(g);
        return 1;
    }
    return 0;
}

static void shm_close(rank_xchg *x)
{
    (void)x; /* the group owns the transport */
}

/* ---- the segment ---- */

static int map_segment(rank_group *g, int fd, int create)
{
    size_t hdr = (sizeof(seg_hdr) + 4095) & ~(size_t)4095;
    g->seg_bytes = hdr + 2 * (size_t)g->tp * SLOT_BYTES + PLAN_BYTES;
    if (create && ftruncate(fd, (off_t)g->seg_bytes))
        return dsk_err_errno("sizing the ranks' shared memory (%zu bytes)", g->seg_bytes);
    void *p = mmap(NULL, g->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return dsk_err_errno("mapping the ranks' shared memory");
    g->h = p;
    g->slots = (unsigned char *)p + hdr;
    g->plan = g->slots + 2 * (size_t)g->tp * SLOT_BYTES;
    g->fd = fd;
    return 0;
}

static void init_xchg(rank_group *g)
{
    g->x = (rank_xchg){g->tp, g->rank, shm_allgather_sum, shm_allgather, shm_abort, shm_aborted, shm_close, g};
}

typedef struct {
    int r;
} rank_ctx;

static int is_attached(rank_group *g, void *ctx)
{
    return atomic_load(&g->h->attached[((rank_ctx *)ctx)->r]) != 0;
}

/* Across hosts: rank 0 listens on HOST:PORT, rank 1 connects (retrying while rank 0 starts), both send
 * their settings and refuse a peer whose settings differ, printing both. */
static int open_tcp(const rank_group_opts *o, rank_group **out)
{
    if (o->tp != 2)
        return dsk_err("--peer: ranks across hosts are two (--tp 2), not %d", o->tp);
    if (o->rank < 0 || o->rank > 1)
        return dsk_err("--rank %d: 0 or 1 with --tp 2", o->rank);
    char host[256];
    const char *colon = strrchr(o->peer, ':');
    if (!colon || colon == o->peer || (size_t)(colon - o->peer) >= sizeof host || !colon[1])
        return dsk_err("--peer %s: HOST:PORT expected", o->peer);
    snprintf(host, sizeof host, "%.*s", (int)(colon - o->peer), o->peer);
    rank_group *g = dsk_calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->tp = 2;
    g->rank = o->rank;
    g->fd = -1;
    g->sock = -1;
    g->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    g->h = dsk_calloc(1, sizeof *g->h);
    g->slots = dsk_malloc(2 * SLOT_BYTES);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = o->rank ? 0 : AI_PASSIVE},
                    *ai = NULL;
    int e = getaddrinfo(host, colon + 1, &hints, &ai);
    if (!g->h || !g->slots || e) {
        if (e)
            dsk_err("--peer %s: %s", o->peer, gai_strerror(e));
        goto fail;
    }
    double t0 = dsk_now();
    if (o->rank == 0) {
        int ls = socket(ai->ai_family, SOCK_STREAM, 0), one = 1;
        if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
            bind(ls, ai->ai_addr, ai->ai_addrlen) || listen(ls, 1)) {
            dsk_err_errno("rank 0: listening on %s", o->peer);
            if (ls >= 0)
                close(ls);
            goto fail;
        }
        struct pollfd p = {ls, POLLIN, 0};
        int r = poll(&p, 1, g->timeout_ms);
        g->sock = r > 0 ? accept(ls, NULL, NULL) : -1;
        close(ls);
        if (g->sock < 0) {
            dsk_err("rank 1 never connected to %s (waited %.0f s)", o->peer, dsk_now() - t0);
            goto fail;
        }
    } else {
        for (;;) {
            int sk = socket(ai->ai_family, SOCK_STREAM, 0);
            if (sk >= 0 && connect(sk, ai->ai_addr, ai->ai_addrlen) == 0) {
                g->sock = sk;
                break;
            }
            if (sk >= 0)
                close(sk);
            if ((dsk_now() - t0) * 1000.0 > g->timeout_ms) {
                dsk_err("rank 1: rank 0 never answered at %s (tried for %.0f s)", o->peer, dsk_now() - t0);
                goto fail;
            }
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        }
    }
    freeaddrinfo(ai);
    ai = NULL;
    int one = 1;
    setsockopt(g->sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    snprintf(g->h->settings[g->rank], sizeof g->h->settings[0], "%s", o->settings ? o->settings : "");
    if (sock_swap(g, g->h->settings[g->rank], g->h->settings[1 - g->rank], sizeof g->h->settings[0], g->timeout_ms,
                  "the other rank's settings"))
        goto fail;
    g->h->settings[1 - g->rank][sizeof g->h->settings[0] - 1] = 0; /* the peer's bytes: maybe without a NUL */
    if (strcmp(g->h->settings[0], g->h->settings[1])) {
        dsk_err("rank %d differs from rank %d:\n  rank 0: %s\n  rank 1: %s", 1 - g->rank, g->rank, g->h->settings[0],
                g->h->settings[1]);
        goto fail;
    }
    init_xchg(g);
    if (start_watch(g))
        goto fail;
    *out = g;
    return 0;
fail:
    if (ai)
        freeaddrinfo(ai);
    if (g->sock >= 0)
        close(g->sock);
    free(g->h);
    free(g->slots);
    free(g);
    return -1;
}

int rank_group_open(const rank_group_opts *o, rank_group **out)
{
    if (o->peer)
        return open_tcp(o, out);
    if (o->tp < 2 || o->tp > RANKS_MAX)
        return dsk_err("--tp %d: 2 to %d ranks", o->tp, RANKS_MAX);
    rank_group *g = dsk_calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->tp = o->tp;
    g->sock = -1;
    g->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    int fd = memfd_create("dskit-ranks", 0); /* no MFD_CLOEXEC: the followers inherit it */
    if (fd < 0) {
        free(g);
        return dsk_err_errno("creating the ranks' shared memory");
    }
    if (map_segment(g, fd, 1)) {
        close(fd);
        free(g);
        return -1;
    }
    memset(g->h, 0, sizeof *g->h);
    g->h->magic = SEG_MAGIC;
    g->h->tp = o->tp;
    atomic_store(&g->h->pid[0], (int32_t)getpid());
    snprintf(g->h->settings[0], sizeof g->h->settings[0], "%s", o->settings ? o->settings : "");
    init_xchg(g);
    /* start the followers: the same binary, told their rank and the segment's fd. A process that was itself
     * started as a rank never starts more: a program other than dskit (a test) that opens tp > 1 would
     * run itself again, and again (the children carry DSKIT_RANK_CHILD) */
    if (getenv("DSKIT_RANK_CHILD")) {
        rank_group_close(g);
        return dsk_err("tp %d: this process was started as a rank and cannot start ranks of its own (is the "
                       "program dskit?)", g->tp);
    }
    for (int r = 1; r < g->tp; r++) {
        char rank_s[16], fd_s[16];
        snprintf(rank_s, sizeof rank_s, "%d", r);
        snprintf(fd_s, sizeof fd_s, "%d", fd);
        int argc = 0;
        while (o->follower_argv[argc])
            argc++;
        char **argv = dsk_calloc((size_t)argc + 1, sizeof *argv);
        if (!argv) {
            rank_group_close(g);
            return -1;
        }
        for (int i = 0; i < argc; i++)
            argv[i] = !strcmp(o->follower_argv[i], "{RANK}") ? rank_s
                      : !strcmp(o->follower_argv[i], "{FD}") ? fd_s
                                                             : o->follower_argv[i];
        fflush(NULL);
        pid_t p = fork();
        if (p == 0) {
            setenv("DSKIT_RANK_CHILD", "1", 1);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "dskit: rank %d: cannot start (execv /proc/self/exe: %s)\n", r, strerror(errno));
            _exit(127);
        }
        free(argv);
        if (p < 0) {
            dsk_err_errno("starting rank %d", r);
            rank_group_close(g);
            return -1;
        }
        g->child[r] = p;
    }
    if (start_watch(g)) {
        rank_group_close(g);
        return -1;
    }
    /* every follower attaches with the same settings, or the group does not start */
    for (int r = 1; r < g->tp; r++) {
        rank_ctx c = {r};
        if (wait_until(g, is_attached, &c, g->timeout_ms * 4, "a rank to start")) {
            dsk_err_ctx("rank %d did not start", r);
            rank_group_close(g);
            return -1;
        }
        if (atomic_load(&g->h->attached[r]) < 0) {
            dsk_err("rank %d differs from rank 0:\n  rank 0: %s\n  rank %d: %s", r, g->h->settings[0], r,
                    g->h->settings[r]);
            rank_group_close(g);
            return -1;
        }
    }
    *out = g;
    return 0;
}

int rank_group_attach(int fd, int rank, const char *settings, int timeout_ms, rank_group **out)
{
    rank_group *g = dsk_calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->rank = rank;
    g->sock = -1;
    g->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
    seg_hdr probe;
    if (pread(fd, &probe, sizeof probe, 0) != (ssize_t)sizeof probe || probe.magic != SEG_MAGIC) {
        free(g);
        return dsk_err("rank %d: fd %d is not the ranks' shared memory", rank, fd);
    }
    g->tp = probe.tp;
    if (rank < 1 || rank >= g->tp || map_segment(g, fd, 0)) {
        free(g);
        return dsk_err("rank %d of a group of %d: cannot attach", rank, probe.tp);
    }
    init_xchg(g);
    if (start_watch(g)) {
        munmap(g->h, g->seg_bytes);
        free(g);
        return -1;
    }
    atomic_store(&g->h->pid[rank], (int32_t)getpid());
    snprintf(g->h->settings[rank], sizeof g->h->settings[rank], "%s", settings ? settings : "");
    int same = !strcmp(g->h->settings[0], g->h->settings[rank]);
    atomic_store(&g->h->attached[rank], same ? 1 : -1);
    if (!same) {
        dsk_err("rank %d differs from rank 0:\n  rank 0: %s\n  rank %d: %s", rank, g->h->settings[0], rank,
                g->h->settings[rank]);
        stop_watch(g);
        munmap(g->h, g->seg_bytes);
        free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void rank_group_close(rank_group *g)
{
    if (!g)
        return;
    stop_watch(g); /* a follower's exit from here on is the one this close asks for */
    if (g->sock >= 0) {
        if (g->rank == 0 && !atomic_load(&g->h->aborted) && rank_plan_send(g, PLAN_SHUTDOWN, NULL, 0) == 0) {
            /* the follower closes its end once it has read the stop: wait for that (5 s at most), so it
             * never mistakes this close for a failure */
            struct pollfd p = {g->sock, POLLIN, 0};
            char c;
            double t0 = dsk_now();
            while (dsk_now() - t0 < 5.0 && poll(&p, 1, 100) >= 0)
                if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && recv(g->sock, &c, 1, MSG_DONTWAIT) <= 0)
                    break;
        }
        close(g->sock);
        free(g->h);
        free(g->slots);
        free(g);
        return;
    }
    if (g->rank == 0) {
        /* a shutdown message if the plan channel still works, then a bounded wait, then SIGKILL */
        if (!atomic_load(&g->h->aborted))
            rank_plan_send(g, PLAN_SHUTDOWN, NULL, 0);
        double t0 = dsk_now();
        for (int r = 1; r < g->tp; r++) {
            while (g->child[r] > 0 && !g->child_done[r]) {
                int st;
                if (waitpid(g->child[r], &st, WNOHANG) == g->child[r]) {
                    g->child_done[r] = 1;
                    break;
                }
                if (dsk_now() - t0 > 5.0) {
                    kill(g->child[r], SIGKILL);
                    waitpid(g->child[r], &st, 0);
                    g->child_done[r] = 1;
                    break;
                }
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
        }
    }
    if (g->h)
        munmap(g->h, g->seg_bytes);
    if (g->rank == 0 && g->fd >= 0)
        close(g->fd);
    free(g);
}

rank_xchg *rank_group_xchg(rank_group *g)
{
    return &g->x;
}

int rank_group_rank(const rank_group *g)
{
    return g->rank;
}

int rank_group_tp(const rank_group *g)
{
    return g->tp;
}

void rank_group_round_time(rank_group *g, double seconds)
{
    if (seconds > g->slowest_round)
        g->slowest_round = seconds;
}

/* ---- the plan channel: a byte stream in a ring, one writer (rank 0), one reader per follower ---- */

typedef struct {
    uint64_t need; /* ring bytes that must be free (writer) or present (reader) */
    int reader;
} ring_ctx;

static int ring_has_room(rank_group *g, void *ctx)
{
    ring_ctx *c = ctx;
    uint64_t w = atomic_load_explicit(&g->h->plan_w.v, memory_order_relaxed), lo = w;
    for (int r = 1; r < g->tp; r++) {
        uint64_t rr = atomic_load_explicit(&g->h->plan_r[r].v, memory_order_acquire);
        lo = rr < lo ? rr : lo;
    }
    return w + c->need - lo <= PLAN_BYTES;
}

static int ring_has_data(rank_group *g, void *ctx)
{
    ring_ctx *c = ctx;
    return atomic_load_explicit(&g->h->plan_w.v, memory_order_acquire) -
               atomic_load_explicit(&g->h->plan_r[c->reader].v, memory_order_relaxed) >=
           c->need;
}

static int ring_write(rank_group *g, const void *src, size_t bytes)
{
    const unsigned char *s = src;
    while (bytes) {
        size_t piece = bytes < PLAN_BYTES / 2 ? bytes : PLAN_BYTES / 2;
        ring_ctx c = {piece, 0};
        if (wait_until(g, ring_has_room, &c, g->timeout_ms, "the followers to read the plan"))
            return -1;
        uint64_t w = atomic_load_explicit(&g->h->plan_w.v, memory_order_relaxed);
        size_t at = (size_t)(w % PLAN_BYTES), first = piece < PLAN_BYTES - at ? piece : PLAN_BYTES - at;
        memcpy(g->plan + at, s, first);
        memcpy(g->plan, s + first, piece - first);
        atomic_store_explicit(&g->h->plan_w.v, w + piece, memory_order_release);
        s += piece;
        bytes -= piece;
    }
    return 0;
}

static int ring_read(rank_group *g, void *dst, size_t bytes, int idle)
{
    unsigned char *d = dst;
    while (bytes) {
        size_t piece = bytes < PLAN_BYTES / 2 ? bytes : PLAN_BYTES / 2;
        ring_ctx c = {piece, g->rank};
        if (wait_until(g, ring_has_data, &c, idle ? -1 : g->timeout_ms, "the plan from rank 0"))
            return -1;
        uint64_t r = atomic_load_explicit(&g->h->plan_r[g->rank].v, memory_order_relaxed);
        size_t at = (size_t)(r % PLAN_BYTES), first = piece < PLAN_BYTES - at ? piece : PLAN_BYTES - at;
        memcpy(d, g->plan + at, first);
        memcpy(d + first, g->plan, piece - first);
        atomic_store_explicit(&g->h->plan_r[g->rank].v, r + piece, memory_order_release);
        d += piece;
        bytes -= piece;
        idle = 0;
    }
    return 0;
}

/* Across hosts: the whole of buf, bounded (send) or while the group lives (an idle receive). */
static int sock_all(rank_group *g, void *buf, size_t bytes, int sending, int idle)
{
    size_t done = 0;
    double t0 = dsk_now();
    while (done < bytes) {
        if (atomic_load(&g->h->aborted))
            return abort_error(g);
        struct pollfd p = {g->sock, (short)(sending ? POLLOUT : POLLIN), 0};
        int r = poll(&p, 1, 20);
        if (!idle && (dsk_now() - t0) * 1000.0 > g->timeout_ms) {
            set_abort(g, "rank %d waited %.1f s for the plan (the bound)", g->rank, dsk_now() - t0);
            return abort_error(g);
        }
        if (r <= 0)
            continue;
        ssize_t n = sending ? send(g->sock, (const char *)buf + done, bytes - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(g->sock, (char *)buf + done, bytes - done, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            set_abort(g, "rank %d closed the connection", 1 - g->rank);
            return abort_error(g);
        }
        done += n > 0 ? (size_t)n : 0;
        idle = 0;
    }
    return 0;
}

int rank_plan_send(rank_group *g, uint32_t type, const void *payload, size_t bytes)
{
    unsigned char f[PLAN_FRAME_BYTES];
    plan_frame_encode(type, bytes, f);
    if (g->sock >= 0)
        return sock_all(g, f, sizeof f, 1, 0) || sock_all(g, (void *)payload, bytes, 1, 0) ? -1 : 0;
    return ring_write(g, f, sizeof f) || ring_write(g, payload, bytes) ? -1 : 0;
}

int rank_plan_recv(rank_group *g, size_t max_bytes, uint32_t *type, void **payload, size_t *bytes)
{
    unsigned char f[PLAN_FRAME_BYTES];
    size_t n;
    if (g->sock >= 0 ? sock_all(g, f, sizeof f, 0, 1) : ring_read(g, f, sizeof f, 1))
        return -1;
    if (plan_frame_decode(f, max_bytes, type, &n)) /* before any allocation: the size is the peer's word */
        return -1;
    void *p = dsk_malloc(n ? n : 1);
    if (!p)
        return -1;
    if (g->sock >= 0 ? sock_all(g, p, n, 0, 0) : ring_read(g, p, n, 0)) {
        free(p);
        return -1;
    }
    *payload = p;
    *bytes = n;
    return 0;
}
