/* dskit serve: the pieces one server holds, shared by the HTTP layer (http.c), the route handlers
 * (routes.c) and the command (cmd_serve.c). The HTTP threads read the engine's limits from here (copied
 * once the engine is loaded) and never call the engine: only the scheduler thread does (sched.h). */
#ifndef DSK_SERVER_SERVER_H
#define DSK_SERVER_SERVER_H

#include "runtime/engine/engine.h"
#include "runtime/server/auth.h"
#include "runtime/server/constrain.h"
#include "runtime/server/metrics.h"
#include "runtime/server/sched.h"
#include "runtime/tokenizer/tokenizer.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *model_dir, *kit, *backend, *host, *served_name, *api_key_file, *engram, *devices;
    int port, tp, parallel, threads, prefill_chunk, draft;
    int prompt_cache;          /* sequences the prompt cache keeps (-1: parallel / 2, at least 1) */
    int64_t context, pool;
    size_t max_body, cache_mb, send_buffer, engram_cache_mb;
    int timeout_s, max_connections, max_queue, default_max_tokens;
    double queue_timeout_s, drain_timeout_s;
} serve_opts;

enum { SRV_LOADING, SRV_READY, SRV_DRAINING };

struct MHD_Daemon;

typedef struct server {
    serve_opts o;
    srv_keys keys;
    srv_metrics metrics;
    struct MHD_Daemon *mhd;
    int port;                  /* the bound port (--port 0 picks one) */
    atomic_int state;          /* SRV_* */
    atomic_int stopping;       /* shutting down: every HTTP wait gives up */
    atomic_int gen_in_flight;  /* generation requests between arrival and their last byte */
    atomic_uint_fast64_t next_id;
    uint64_t id_salt;
    /* set before state becomes SRV_READY, read-only after */
    engine *e;
    dsk_tokenizer *tok;
    sched *sched;
    srv_genv genv;             /* structured output: the grammar vocabulary, built at load */
    int vocab, window;         /* window: rows a decode round of one sequence may carry */
    const model_config *cfg;   /* the model's (image spans are sized from it) */
    int takes_images;          /* the model has a vision tower and the backend runs it */
    int64_t context, pool;
    double started;
} server;

/* http.c */
int http_start(server *s);
void http_stop(server *s);

#endif
