/* `dskit serve`: the OpenAI-compatible HTTP server. Listens first (so /health answers 503 while the model
 * loads), loads the tokenizer and the engine, starts the scheduler, prints one line when ready. SIGTERM or
 * SIGINT drains: new requests get 503, running and queued ones finish, then it exits 0; a second signal
 * exits at once. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/server/http.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: dskit serve --model DIR [--kit KIT] [--backend cpu|gpu] [--tp N [--devices D0,D1]] [--host H] [--port P]\n"
    "                   [--parallel N] [--context N] [--pool TOKENS] [--api-key-file F]\n"
    "                   [--served-model-name NAME] [--draft on|off] [--max-body BYTES] [--timeout S]\n"
    "                   [--send-buffer BYTES] [--max-connections N] [--queue N] [--queue-timeout S]\n"
    "                   [--drain-timeout S] [--prefill-chunk N] [--default-max-tokens N] [--threads N]\n"
    "                   [--cache-mb N] [--engram host|device|nvme:DIR] [--engram-cache-mb N]\n"
    "                   [--prompt-cache N]\n"
    "  --model DIR            the checkpoint (config.json, safetensors, tokenizer.json)\n"
    "  --kit KIT              the kernel kit; --backend defaults to gpu with a kit, cpu without\n"
    "  --tp N                 tensor-parallel ranks (default 1)\n"
    "  --devices D0,D1        gpu, --tp N: rank r's GPU (default: rank r on GPU r; 0,0: both on GPU 0)\n"
    "  --host H, --port P     where to listen (default 127.0.0.1:8000; port 0: any free port)\n"
    "  --parallel N           sequences decoding together in one step (default 8)\n"
    "  --context N            positions one sequence may hold (default: the model's limit)\n"
    "  --pool TOKENS          positions all sequences may hold together (default: the engine's)\n"
    "  --api-key-file F       keys, one a line or sha256:HEX; mode 600; every route but /health needs one\n"
    "  --served-model-name N  the model name clients send and see (default: the model folder's name)\n"
    "  --draft on|off         DSpark drafting with exact verification (default on when the model has it)\n"
    "  --max-body BYTES       largest request body (default 8388608); larger: 413\n"
    "  --timeout S            a connection idle this long (a stalled upload, a stream not read) is closed\n"
    "                         (default 60)\n"
    "  --send-buffer BYTES    kernel send buffer per connection (default 0: the kernel's autotuning)\n"
    "  --max-connections N    connections at once (default 256)\n"
    "  --queue N              requests that may wait for a sequence (default 64); more: 429\n"
    "  --queue-timeout S      a request waiting longer fails with 503 (default 600)\n"
    "  --drain-timeout S      on SIGTERM, how long running requests may take to finish (default 600)\n"
    "  --prefill-chunk N      prompt rows per round, so long prompts do not stall streams (default 256)\n"
    "  --prompt-cache N       finished requests' sequences kept for prompt reuse (default parallel / 2, at\n"
    "                         least 1; 0: off; at most --parallel)\n"
    "  --default-max-tokens N max_tokens when a request gives none (default 32768; capped by the context)\n"
    "  --threads N            cpu backend: worker threads (default 2)\n"
    "  --cache-mb N           cpu backend: decoded weights kept (default 4096)\n"
    "  --engram WHERE         Engram rows from host (the checkpoint, default), device (gpu: the tables in GPU\n"
    "                         memory) or nvme:DIR (dskit engram pack; docs/engram.md)\n"
    "  --engram-cache-mb N    nvme: the hot-row cache in (pinned) memory (default 256)\n";

static int parse_on_off(const char *opt, const char *v, int *out)
{
    if (!strcmp(v, "on"))
        *out = 1;
    else if (!strcmp(v, "off"))
        *out = 0;
    else
        return dsk_err("%s: '%s' must be on or off", opt, v);
    return 0;
}

static int parse(int argc, char **argv, serve_opts *o)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        double d = 0;
        if (!v)
            return dsk_err("%s: unknown option, or it needs a value", a);
#define INT_OPT(name, lo, hi, field)                                                                               \
    else if (!strcmp(a, name)) {                                                                                   \
        if (cli_parse_int(a, v, lo, hi, &n))                                                                       \
            return -1;                                                                                             \
        o->field = n;                                                                                              \
    }
#define SECONDS_OPT(name, field)                                                                                   \
    else if (!strcmp(a, name)) {                                                                                   \
        if (cli_parse_double(a, v, &d) || !(d > 0))                                                                \
            return dsk_err("%s: '%s' must be a number of seconds > 0", a, v);                                      \
        o->field = d;                                                                                              \
    }
        if (!strcmp(a, "--model"))
            o->model_dir = v;
        else if (!strcmp(a, "--kit"))
            o->kit = v;
        else if (!strcmp(a, "--backend"))
            o->backend = v;
        else if (!strcmp(a, "--host"))
            o->host = v;
        else if (!strcmp(a, "--engram"))
            o->engram = v;
        else if (!strcmp(a, "--devices"))
            o->devices = v;
        else if (!strcmp(a, "--api-key-file"))
            o->api_key_file = v;
        else if (!strcmp(a, "--served-model-name"))
            o->served_name = v;
        else if (!strcmp(a, "--draft")) {
            if (parse_on_off(a, v, &o->draft))
                return -1;
        }
        INT_OPT("--port", 0, 65535, port)
        INT_OPT("--engram-cache-mb", 0, 1L << 20, engram_cache_mb)
        INT_OPT("--tp", 1, 8, tp)
        INT_OPT("--parallel", 1, 1024, parallel)
        INT_OPT("--context", 2, 1L << 40, context)
        INT_OPT("--pool", 2, 1L << 50, pool)
        INT_OPT("--max-body", 1024, 1L << 32, max_body)
        INT_OPT("--send-buffer", 0, 1L << 30, send_buffer)
        INT_OPT("--timeout", 1, 86400, timeout_s)
        INT_OPT("--max-connections", 1, 65536, max_connections)
        INT_OPT("--queue", 1, 1 << 20, max_queue)
        INT_OPT("--prefill-chunk", 1, 1 << 16, prefill_chunk)
        INT_OPT("--prompt-cache", 0, 1024, prompt_cache)
        INT_OPT("--default-max-tokens", 1, 1 << 30, default_max_tokens)
        INT_OPT("--threads", 1, 256, threads)
        INT_OPT("--cache-mb", 0, 1L << 24, cache_mb)
        SECONDS_OPT("--queue-timeout", queue_timeout_s)
        SECONDS_OPT("--drain-timeout", drain_timeout_s)
        else return dsk_err("unknown option '%s'", a);
#undef INT_OPT
#undef SECONDS_OPT
    }
    if (!o->model_dir)
        return dsk_err("--model DIR is required");
    if (o->prompt_cache < 0)
        o->prompt_cache = o->parallel / 2 > 1 ? o->parallel / 2 : 1;
    if (o->prompt_cache > o->parallel)
        return dsk_err("--prompt-cache %d: the cache keeps at most --parallel (%d) sequences", o->prompt_cache,
                       o->parallel);
    if (!o->backend)
        o->backend = o->kit ? "gpu" : "cpu";
    if (!o->served_name) {
        const char *b = o->model_dir + strlen(o->model_dir);
        while (b > o->model_dir && b[-1] == '/')
            b--;
        const char *e = b;
        while (b > o->model_dir && b[-1] != '/')
            b--;
        static char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(e - b), b);
        o->served_name = name[0] ? name : "dskit";
    }
    return 0;
}

/* ---- signals: a thread of their own, so a signal during the load is seen too ---- */

static atomic_int drain_asked;

static void *signal_thread(void *arg)
{
    sigset_t *set = arg;
    struct timespec slice = {1, 0};
    for (;;) {
        int sig = sigtimedwait(set, NULL, &slice);
        if (sig < 0)
            continue; /* timeout or EINTR: wait again */
        if (atomic_fetch_add(&drain_asked, 1) > 0) {
            static const char msg[] = "dskit serve: second signal: exiting now\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            _exit(1);
        }
        static const char msg[] = "dskit serve: draining (new requests get 503; a second signal exits now)\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
    }
    return NULL;
}

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static int load(server *s)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", s->o.model_dir);
    if (tok_load(path, &s->tok))
        return dsk_err_ctx("the model's tokenizer");
    engine_opts eo = {.backend = s->o.backend, .model_dir = s->o.model_dir, .kit = s->o.kit, .tp = s->o.tp, .devices = s->o.devices,
                      .tokenizer = s->tok, .max_seqs = s->o.parallel, .context = s->o.context, .pool = s->o.pool,
                      /* a round carries one chunk of prompt rows and every sequence's verify window */
                      .max_rows = s->o.prefill_chunk + s->o.parallel * 64, .threads = s->o.threads,
                      .cache_bytes = s->o.cache_mb << 20, .engram = s->o.engram,
                      .engram_cache = s->o.engram_cache_mb << 20};
    if (engine_open(&eo, &s->e))
        return -1;
    const engine_info *in = engine_get_info(s->e);
    if (s->o.draft && in->draft_block == 0) {
        fprintf(stderr, "dskit serve: the model has no DSpark stages: drafting off\n");
        s->o.draft = 0;
    }
    s->vocab = in->vocab;
    s->cfg = in->cfg;
    s->takes_images = in->takes_images;
    s->context = in->context;
    s->pool = in->pool;
    s->window = 1 + (s->o.draft ? in->draft_block : 0);
    /* structured output's vocabulary (tries and masks over every id: a fraction of a second, once) */
    if (srv_genv_init(&s->genv, s->tok, in->vocab))
        return -1;
    sched_opts so = {.prefill_chunk = s->o.prefill_chunk, .draft = s->o.draft, .max_queue = s->o.max_queue,
                     .queue_timeout_s = s->o.queue_timeout_s, .genv = &s->genv, .prompt_cache = s->o.prompt_cache};
    return sched_start(s->e, s->tok, &so, &s->metrics, &s->sched);
}

static void ready_line(const server *s)
{
    const engine_info *in = engine_get_info(s->e);
    int v6 = strchr(s->o.host, ':') != NULL;
    char pool[32];
    if (s->pool > 0)
        snprintf(pool, sizeof pool, "%lld", (long long)s->pool);
    else
        snprintf(pool, sizeof pool, "unbounded");
    printf("dskit serve: ready on http://%s%s%s:%d: model %s (%s), backend %s (%s), parallel %d, context %lld, "
           "pool %s, drafting %s, prompt cache %d%s\n",
           v6 ? "[" : "", s->o.host, v6 ? "]" : "", s->port, s->o.served_name, s->o.model_dir, in->backend,
           in->device, in->max_seqs, (long long)s->context, pool, s->o.draft ? "on" : "off", s->o.prompt_cache,
           s->keys.n ? ", API keys required" : "");
    fflush(stdout);
}

int cmd_serve(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_text, stdout);
        return 0;
    }
    static server srv; /* the signal thread and MHD's threads outlive no part of it */
    server *s = &srv;
    s->o = (serve_opts){.host = "127.0.0.1", .port = 8000, .tp = 1, .parallel = 8, .threads = 2,
                        .prefill_chunk = 256, .draft = 1, .prompt_cache = -1, .max_body = 8u << 20,
                        .cache_mb = 4096, .timeout_s = 60, .max_connections = 256, .max_queue = 64,
                        .default_max_tokens = 32768, .queue_timeout_s = 600, .drain_timeout_s = 600};
    if (parse(argc, argv, &s->o)) {
        fprintf(stderr, "dskit serve: %s\n%s", dsk_err_msg(), usage_text);
        return 2;
    }
    if (s->o.api_key_file && srv_keys_load(s->o.api_key_file, &s->keys)) {
        fprintf(stderr, "dskit serve: %s\n", dsk_err_msg());
        return 2;
    }
    if (metrics_init(&s->metrics)) {
        fprintf(stderr, "dskit serve: %s\n", dsk_err_msg());
        return 2;
    }
    if (getrandom(&s->id_salt, sizeof s->id_salt, 0) != sizeof s->id_salt)
        s->id_salt = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    s->started = (double)time(NULL);
    atomic_store(&s->state, SRV_LOADING);
    /* every thread started from here inherits the mask: only the signal thread takes SIGTERM/SIGINT */
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    signal(SIGPIPE, SIG_IGN);
    pthread_t sig_th;
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) || pthread_create(&sig_th, NULL, signal_thread, &set)) {
        fprintf(stderr, "dskit serve: cannot set up signal handling\n");
        return 2;
    }
    pthread_detach(sig_th);
    int rc = 2;
    if (http_start(s)) {
        fprintf(stderr, "dskit serve: %s\n", dsk_err_msg());
        goto done;
    }
    fprintf(stderr, "dskit serve: loading %s (%s backend)\n", s->o.model_dir, s->o.backend);
    if (load(s)) {
        fprintf(stderr, "dskit serve: %s\n", dsk_err_msg());
        goto done;
    }
    atomic_store(&s->state, SRV_READY);
    ready_line(s);
    while (!atomic_load(&drain_asked))
        sleep_ms(100);
    atomic_store(&s->state, SRV_DRAINING);
    double t0 = dsk_now();
    while ((sched_busy(s->sched) || atomic_load(&s->gen_in_flight)) && dsk_now() - t0 < s->o.drain_timeout_s)
        sleep_ms(50);
    if (sched_busy(s->sched) || atomic_load(&s->gen_in_flight))
        fprintf(stderr, "dskit serve: drain timeout (%.0f s): stopping what still runs\n", s->o.drain_timeout_s);
    rc = 0;
done:
    atomic_store(&s->stopping, 1);
    http_stop(s);
    sched_stop(s->sched);
    engine_close(s->e);
    srv_genv_free(&s->genv);
    tok_free(s->tok);
    srv_keys_free(&s->keys);
    metrics_destroy(&s->metrics);
    if (rc == 0)
        fprintf(stderr, "dskit serve: stopped\n");
    return rc;
}
