/* The answers route handlers give (routes.c calls these; http.c never does, so the two do not call each
 * other): plain and JSON responses, OpenAI-style errors, the wait on a generation that watches the client's
 * socket, and the SSE content reader. */
#include "runtime/server/http.h"
#include "runtime/common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define WAIT_SLICE_MS 100    /* how often a waiting handler looks at its socket and the server state */
#define KEEPALIVE_S 10.0     /* an SSE comment when a stream has been quiet this long */

/* ---- responses ---- */

/* Counted when queued, before any byte goes out: a client that has its answer sees it in /metrics. */
static void queued(http_ctx *cx, int status)
{
    cx->status = status;
    metrics_request(&cx->srv->metrics, cx->route, status);
}

enum MHD_Result http_respond(http_ctx *cx, int status, const char *ctype, char *body, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)cx->seed);
    int bad = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) != MHD_YES ||
              (cx->id && MHD_add_response_header(r, "x-request-id", cx->id) != MHD_YES) ||
              (cx->has_seed && MHD_add_response_header(r, "x-dskit-seed", seed) != MHD_YES) ||
              (status == 401 && MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer") != MHD_YES) ||
              (status == 503 && MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "5") != MHD_YES);
    enum MHD_Result rc = bad ? MHD_NO : MHD_queue_response(cx->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    if (rc == MHD_YES)
        queued(cx, status);
    return rc;
}

enum MHD_Result http_json(http_ctx *cx, int status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return http_error(cx, 500, "server_error", NULL, NULL, "out of memory building the reply");
    return http_respond(cx, status, "application/json", s, strlen(s));
}

enum MHD_Result http_error(http_ctx *cx, int status, const char *type, const char *code, const char *param,
                           const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status >= 500 && status != 503)
        fprintf(stderr, "dskit serve: %s %s: %s\n", srv_route_names[cx->route], cx->id ? cx->id : "", msg);
    char *s = oai_error_body(msg, type, param, code);
    if (!s)
        return MHD_NO;
    return http_respond(cx, status, "application/json", s, strlen(s));
}

/* ---- waiting on a generation ---- */

/* Whether the client closed its end (or the socket failed). Called only by the connection's own thread
 * while MHD is not reading it, so a peek sees what the client sent. */
static int client_gone(http_ctx *cx)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(cx->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 0;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* MHD's idle timeout must not close a connection while its handler is busy waiting for the model: it is
 * off while we wait and set again (which restarts it) when we hand MHD something to send. */
static void idle_timeout(http_ctx *cx, int on)
{
    MHD_set_connection_option(cx->conn, MHD_CONNECTION_OPTION_TIMEOUT, on ? (unsigned)cx->srv->o.timeout_s : 0u);
}

int http_wait(http_ctx *cx, int until_done)
{
    srv_req *r = cx->req;
    idle_timeout(cx, 0);
    int rc = 0;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int ready = r->done || (!until_done && r->admitted);
        unsigned v = r->version;
        pthread_mutex_unlock(&r->mu);
        if (ready)
            break;
        if (client_gone(cx) || atomic_load(&cx->srv->stopping)) {
            sched_cancel(cx->srv->sched, r);
            rc = -1;
            break;
        }
        srv_req_wait(r, v, WAIT_SLICE_MS);
    }
    idle_timeout(cx, 1);
    return rc;
}

/* The SSE body: chunks as the scheduler publishes tokens; a keep-alive comment when quiet. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_ctx *cx = cls;
    srv_req *r = cx->req;
    ssize_t n = 0;
    idle_timeout(cx, 0);
    for (;;) {
        size_t avail = cx->w.out.len - cx->out_off;
        if (avail) {
            n = (ssize_t)(avail < max ? avail : max);
            memcpy(buf, cx->w.out.data + cx->out_off, (size_t)n);
            cx->out_off += (size_t)n;
            if (cx->out_off == cx->w.out.len)
                cx->out_off = cx->w.out.len = 0;
            cx->last_send = dsk_now();
            break;
        }
        if (cx->stream_done) {
            n = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        if (atomic_load(&cx->srv->stopping) || client_gone(cx)) {
            sched_cancel(cx->srv->sched, r);
            n = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        unsigned v = srv_req_wait(r, cx->seen, WAIT_SLICE_MS);
        int rc = 0, took = 0;
        pthread_mutex_lock(&r->mu);
        if (r->done) {
            rc = oai_stream_finish(&cx->w, r);
            cx->stream_done = 1;
        } else if (v != cx->seen)
            rc = oai_stream_update(&cx->w, r->text.data ? r->text.data : "", r->text.len, r->tokens, r->lps,
                                   r->n_tokens);
        if (!rc && r->n_taken != r->n_tokens) {
            r->n_taken = r->n_tokens;
            took = 1;
        }
        cx->seen = v;
        pthread_mutex_unlock(&r->mu);
        if (took)
            sched_wake(cx->srv->sched); /* the scheduler may hold this stream until it was read */
        if (rc) {
            fprintf(stderr, "dskit serve: request %s: writing the stream: %s\n", r->id, dsk_err_msg());
            sched_cancel(cx->srv->sched, r);
            n = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        if (cx->w.out.len == 0 && dsk_now() - cx->last_send > KEEPALIVE_S && dsk_buf_printf(&cx->w.out, ": keepalive\n\n"))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    idle_timeout(cx, 1);
    return n;
}

enum MHD_Result http_stream(http_ctx *cx)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, cx, NULL);
    if (!r)
        return MHD_NO;
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)cx->seed);
    int bad = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream") != MHD_YES ||
              MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") != MHD_YES ||
              MHD_add_response_header(r, "x-request-id", cx->id) != MHD_YES ||
              (cx->has_seed && MHD_add_response_header(r, "x-dskit-seed", seed) != MHD_YES);
    cx->last_send = dsk_now();
    enum MHD_Result rc = bad ? MHD_NO : MHD_queue_response(cx->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    if (rc == MHD_YES)
        queued(cx, 200);
    return rc;
}

/* ---- the access handler ---- */

