/* `dskit bench serve`: the server under 1, 4 and 16 concurrent streams (time to first token, tokens/s per
 * stream and in total) and its own cost per token: the scheduler's time outside engine calls per round
 * (from /metrics) and one stream's time per token against engine_generate on the same prompt. The server
 * is this binary's `serve`, started on a free port; the client is a small HTTP/1.0 one (a stream ends when
 * the server closes the connection). */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/engine/generate.h"

#include <arpa/inet.h>
#include <ftw.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *model_dir;
    long prompt, tokens, threads;
    int draft;
} bench_opts;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* ---- a minimal HTTP/1.0 client ---- */

typedef struct {
    int port;
    const char *body;
    double t_send, t_first, t_last;
    int tokens, ok;
} stream_run;

static int http_send(int port, const char *method, const char *path, const char *body)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0)
            close(fd);
        return dsk_err_errno("bench serve: connecting to port %d", port);
    }
    dsk_buf req = {0};
    size_t n = body ? strlen(body) : 0;
    if (dsk_buf_printf(&req, "%s %s HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                             "Content-Length: %zu\r\n\r\n%s", method, path, n, body ? body : "")) {
        close(fd);
        return -1;
    }
    for (size_t off = 0; off < req.len;) {
        ssize_t w = send(fd, req.data + off, req.len - off, MSG_NOSIGNAL);
        if (w <= 0) {
            dsk_buf_free(&req);
            close(fd);
            return dsk_err_errno("bench serve: sending");
        }
        off += (size_t)w;
    }
    dsk_buf_free(&req);
    return fd;
}

/* The whole reply (headers and body) until the server closes. */
static int http_get(int port, const char *path, dsk_buf *out)
{
    int fd = http_send(port, "GET", path, NULL);
    if (fd < 0)
        return -1;
    char buf[65536];
    ssize_t r;
    while ((r = recv(fd, buf, sizeof buf, 0)) > 0)
        if (dsk_buf_append(out, buf, (size_t)r))
            break;
    close(fd);
    return r == 0 ? 0 : dsk_err("bench serve: reading %s failed", path);
}

/* One streaming completion: the time of the first and last token events; the count from the usage chunk. */
static void *stream_thread(void *arg)
{
    stream_run *s = arg;
    s->t_send = dsk_now();
    int fd = http_send(s->port, "POST", "/v1/completions", s->body);
    if (fd < 0)
        return NULL;
    dsk_buf b = {0};
    size_t scan = 0;
    char buf[16384];
    ssize_t r;
    while ((r = recv(fd, buf, sizeof buf, 0)) > 0) {
        double now = dsk_now();
        if (dsk_buf_append(&b, buf, (size_t)r))
            break;
        char *line;
        while ((line = memmem(b.data + scan, b.len - scan, "data: ", 6))) {
            char *end = memchr(line, '\n', (size_t)(b.data + b.len - line));
            if (!end)
                break;
            *end = 0;
            scan = (size_t)(end + 1 - b.data);
            json_t *j = json_loads(line + 6, 0, NULL);
            json_t *u = json_object_get(json_object_get(j, "usage"), "completion_tokens");
            if (json_is_integer(u))
                s->tokens = (int)json_integer_value(u);
            else if (json_array_size(json_object_get(j, "choices"))) {
                if (!s->t_first)
                    s->t_first = now;
                s->t_last = now;
            } else if (!strcmp(line + 6, "[DONE]"))
                s->ok = s->tokens > 0;
            json_decref(j);
        }
    }
    close(fd);
    dsk_buf_free(&b);
    return NULL;
}

/* ---- the server child ---- */

static pid_t start_server(const bench_opts *o, int *port)
{
    int p[2];
    if (pipe(p))
        return -1;
    char threads[16];
    snprintf(threads, sizeof threads, "%ld", o->threads);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        /* every stream sends the same prompt: the prompt cache off, so each one's prefill is measured */
        execl("/proc/self/exe", "dskit", "serve", "--model", o->model_dir, "--port", "0", "--parallel", "16",
              "--threads", threads, "--draft", o->draft ? "on" : "off", "--prompt-cache", "0", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return -1;
    }
    FILE *f = fdopen(p[0], "r");
    char line[1024];
    *port = 0;
    struct pollfd pf = {p[0], POLLIN, 0};
    while (!*port && poll(&pf, 1, 120000) > 0 && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "ready on http://");
        const char *colon = at ? strchr(at + 16, ':') : NULL;
        if (colon)
            *port = atoi(colon + 1);
    }
    fclose(f);
    if (!*port) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        dsk_err("bench serve: the server did not get ready");
        return -1;
    }
    return pid;
}

static double metric(int port, const char *name)
{
    dsk_buf b = {0};
    double v = 0;
    if (!http_get(port, "/metrics", &b)) {
        char key[128];
        snprintf(key, sizeof key, "\n%s ", name);
        const char *at = strstr(b.data, key);
        if (at)
            v = strtod(at + strlen(key), NULL);
    }
    dsk_buf_free(&b);
    return v;
}

/* ---- the benchmark ---- */

static int parse(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return dsk_err("bench serve: '%s' needs a value", a);
        if (!strcmp(a, "--model"))
            o->model_dir = v;
        else if (!strcmp(a, "--draft") && (!strcmp(v, "on") || !strcmp(v, "off")))
            o->draft = !strcmp(v, "on");
        else if (!strcmp(a, "--prompt-len")) {
            if (cli_parse_int(a, v, 1, 1 << 16, &o->prompt))
                return -1;
        } else if (!strcmp(a, "--tokens")) {
            if (cli_parse_int(a, v, 2, 1 << 16, &o->tokens))
                return -1;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_int(a, v, 1, 64, &o->threads))
                return -1;
        } else
            return dsk_err("bench serve: unknown option '%s' (options: --model DIR, --draft on|off, --prompt-len N, "
                           "--tokens N, --threads N)", a);
    }
    return 0;
}

/* The single-sequence loop on the same prompt, in this process: decode seconds per token of one run. */
static int alone_once(engine *e, const bench_opts *o, const int32_t *prompt, double *per_token)
{
    int32_t *out = dsk_malloc(sizeof(int32_t) * (size_t)o->tokens);
    gen_opts g = {.max_tokens = (int)o->tokens, .sp = SAMPLE_GREEDY, .draft = o->draft};
    gen_stats st;
    int rc = !out || engine_generate(e, prompt, (int)o->prompt, &g, out, &st) ? -1 : 0;
    if (!rc)
        *per_token = st.decode_s / (st.n_out - 1);
    free(out);
    return rc;
}

int bench_serve(int argc, char **argv)
{
    bench_opts o = {NULL, 32, 64, 2, 0};
    char root[256] = "", dir[300];
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "dskit bench serve: %s\n", dsk_err_msg());
        return 2;
    }
    if (!o.model_dir) {
        snprintf(root, sizeof root, "%s/dskit-bench-serve-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(root)) {
            perror("dskit bench serve: mkdtemp");
            return 2;
        }
        snprintf(dir, sizeof dir, "%s/tiny", root);
        char *mk[] = {"mkmodel", "--preset", "tiny", "--seed", "1", "--out", dir, NULL};
        if (cmd_mkmodel(7, mk)) {
            nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
            return 1;
        }
        o.model_dir = dir;
    }
    int rc = 1, port = 0;
    pid_t pid = -1;
    int32_t prompt[1 << 16];
    dsk_rng r;
    dsk_rng_seed(&r, 42);
    for (long i = 0; i < o.prompt; i++)
        prompt[i] = (int32_t)(1000 + dsk_rng_below(&r, 100000));
    double alone = 0, t;
    engine *e = NULL;
    engine_opts eo = {.backend = "cpu", .model_dir = o.model_dir, .max_seqs = 1, .threads = (int)o.threads};
    /* the first run warms the decoded-weight cache */
    if (engine_open(&eo, &e) || alone_once(e, &o, prompt, &t) || (pid = start_server(&o, &port)) < 0) {
        fprintf(stderr, "dskit bench serve: %s\n", dsk_err_msg());
        goto done;
    }
    char device[64];
    snprintf(device, sizeof device, "%s", engine_get_info(e)->device);
    dsk_buf body = {0};
    dsk_buf_printf(&body, "{\"prompt\": [");
    for (long i = 0; i < o.prompt; i++)
        dsk_buf_printf(&body, "%s%d", i ? "," : "", prompt[i]);
    dsk_buf_printf(&body, "], \"max_tokens\": %ld, \"temperature\": 0, \"ignore_eos\": true, \"stream\": true, "
                          "\"stream_options\": {\"include_usage\": true}}", o.tokens);
    printf("dskit bench serve: %s, cpu backend (%s), prompt %ld tokens, %ld new tokens per stream, drafting %s\n",
           o.model_dir, device, o.prompt, o.tokens, o.draft ? "on" : "off");
    printf("%8s %14s %14s %17s %12s %13s %10s %10s\n", "streams", "TTFT mean ms", "TTFT max ms", "tok/s per stream",
           "tok/s total", "ms per round", "sched ms", "sched CPU");
    /* a warm-up stream first (the server's decoded-weight cache), then 1, 4 and 16 at once. One stream and
     * engine_generate alone take turns five times, the best of each counts: on a shared machine that is
     * what compares them, not a run that was descheduled. */
    double one_stream_tpot = 0, worst_wall = 0, worst_cpu = 0;
    static const int levels[] = {1, 1, 1, 1, 1, 1, 4, 16};
    for (int li = 0; li < 8; li++) {
        int n = levels[li];
        stream_run runs[16];
        pthread_t th[16];
        double rounds0 = metric(port, "dskit_scheduler_rounds_total"),
               over0 = metric(port, "dskit_scheduler_overhead_seconds_total"),
               cpu0 = metric(port, "dskit_scheduler_overhead_cpu_seconds_total"),
               eng0 = metric(port, "dskit_scheduler_engine_seconds_total");
        double t0 = dsk_now();
        for (int i = 0; i < n; i++) {
            runs[i] = (stream_run){.port = port, .body = body.data};
            pthread_create(&th[i], NULL, stream_thread, &runs[i]);
        }
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
        double wall = dsk_now() - t0, ttft_sum = 0, ttft_max = 0, per_stream = 0;
        int total = 0;
        for (int i = 0; i < n; i++) {
            if (!runs[i].ok) {
                fprintf(stderr, "dskit bench serve: stream %d of %d failed\n", i, n);
                goto done;
            }
            double ttft = runs[i].t_first - runs[i].t_send;
            ttft_sum += ttft;
            ttft_max = ttft > ttft_max ? ttft : ttft_max;
            per_stream += (runs[i].tokens - 1) / (runs[i].t_last - runs[i].t_first);
            total += runs[i].tokens;
        }
        if (li == 0)
            continue;
        double rounds = metric(port, "dskit_scheduler_rounds_total") - rounds0,
               over = metric(port, "dskit_scheduler_overhead_seconds_total") - over0,
               cpu = metric(port, "dskit_scheduler_overhead_cpu_seconds_total") - cpu0,
               eng = metric(port, "dskit_scheduler_engine_seconds_total") - eng0;
        double tpot = (runs[0].t_last - runs[0].t_first) / (runs[0].tokens - 1);
        if (n == 1 && (one_stream_tpot == 0 || tpot < one_stream_tpot))
            one_stream_tpot = tpot;
        double round = (over + eng) / rounds;
        worst_wall = over / rounds / round > worst_wall ? over / rounds / round : worst_wall;
        worst_cpu = cpu / rounds / round > worst_cpu ? cpu / rounds / round : worst_cpu;
        if (n == 1) {
            if (alone_once(e, &o, prompt, &t)) {
                fprintf(stderr, "dskit bench serve: %s\n", dsk_err_msg());
                goto done;
            }
            if (alone == 0 || t < alone)
                alone = t;
            if (li < 5)
                continue;
        }
        printf("%8d %14.1f %14.1f %17.1f %12.1f %13.2f %10.3f %10.3f\n", n, ttft_sum / n * 1e3, ttft_max * 1e3,
               per_stream / n, total / wall, round * 1e3, over / rounds * 1e3, cpu / rounds * 1e3);
    }
    printf("\nserver overhead: the scheduler's own work is at most %.2f %% of a round (CPU time; %.2f %% in wall time,\n"
           "preemption on a shared machine included); one stream costs %.2f ms per token against %.2f ms for\n"
           "engine_generate alone (%+.1f %%, HTTP, JSON and SSE included)\n",
           worst_cpu * 100, worst_wall * 100, one_stream_tpot * 1e3, alone * 1e3, (one_stream_tpot / alone - 1) * 100);
    printf("engine_generate alone, best of five: %.2f ms per token (%.1f tok/s)\n", alone * 1e3, 1 / alone);
    dsk_buf_free(&body);
    rc = 0;
done:
    engine_close(e);
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    if (root[0])
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
