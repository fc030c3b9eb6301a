/* libmicrohttpd glue: the access handler (checks that need no body first: route, method, key, state,
 * declared size; then the body, bounded; then the route) and the completion callback that cancels a
 * generation whose client went away. The answers themselves are in http_reply.c. */
#include "runtime/server/http.h"
#include "runtime/common/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static enum MHD_Result early_checks(http_ctx *cx, const char *method, const char *url)
{
    server *s = cx->srv;
    const char *allowed = NULL;
    cx->route = routes_find(method, url, &allowed);
    if (cx->route == ROUTE_OTHER && !allowed)
        return http_error(cx, 404, "invalid_request_error", "not_found", NULL, "no route %s %s", method, url);
    if (allowed)
        return http_error(cx, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s: use %s",
                          method, url, allowed);
    if (cx->route != ROUTE_HEALTH &&
        !srv_keys_check(&s->keys, MHD_lookup_connection_value(cx->conn, MHD_HEADER_KIND, "Authorization")))
        return http_error(cx, 401, "authentication_error", "invalid_api_key", NULL,
                          "%s: a valid API key is required (Authorization: Bearer KEY)", srv_route_names[cx->route]);
    int st = atomic_load(&s->state);
    if (st != SRV_READY && cx->route != ROUTE_HEALTH && cx->route != ROUTE_METRICS)
        return http_error(cx, 503, "service_unavailable", st == SRV_LOADING ? "loading" : "draining", NULL,
                          "%s: the server is %s", srv_route_names[cx->route],
                          st == SRV_LOADING ? "loading the model" : "shutting down");
    const char *cl = MHD_lookup_connection_value(cx->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body)
        return http_error(cx, 413, "invalid_request_error", "request_too_large", NULL,
                          "the request body is %s bytes; the limit is %zu (--max-body)", cl, s->o.max_body);
    if (cx->route == ROUTE_CHAT || cx->route == ROUTE_COMPLETIONS) {
        /* counted from here: a drain waits for it */
        cx->generation = 1;
        atomic_fetch_add(&s->gen_in_flight, 1);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    server *s = cls;
    http_ctx *cx = *con_cls;
    if (!cx) {
        if (!(cx = dsk_calloc(1, sizeof *cx)))
            return MHD_NO;
        cx->srv = s;
        cx->conn = conn;
        *con_cls = cx;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        int sb = (int)s->o.send_buffer;
        /* a fixed send buffer bounds what the kernel holds for a client that does not read (its writes then
         * block, and the idle timeout closes it) instead of the autotuned megabytes */
        if (sb > 0 && ci && setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb))
            fprintf(stderr, "dskit serve: setting the send buffer of a connection: %s\n", strerror(errno));
        return early_checks(cx, method, url);
    }
    if (*upload_size) {
        /* MHD takes no answer while a body arrives: an oversized body (chunked, so its size was not
         * declared) is read and dropped up to a bound, then answered 413; past the bound the connection
         * is closed */
        cx->received += *upload_size;
        if (cx->received > s->o.max_body) {
            dsk_buf_free(&cx->body);
            *upload_size = 0;
            return cx->received > 4 * s->o.max_body + (1u << 20) ? MHD_NO : MHD_YES;
        }
        if (!cx->status && dsk_buf_append(&cx->body, upload, *upload_size))
            return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cx->status)
        return MHD_YES; /* answered already (an early refusal) */
    if (cx->received > s->o.max_body)
        return http_error(cx, 413, "invalid_request_error", "request_too_large", NULL,
                          "the request body is over the limit of %zu bytes (--max-body)", s->o.max_body);
    return routes_dispatch(cx);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    (void)toe;
    server *s = cls;
    http_ctx *cx = *con_cls;
    if (!cx)
        return;
    *con_cls = NULL;
    if (cx->req) {
        pthread_mutex_lock(&cx->req->mu);
        int done = cx->req->done, fin = cx->req->finish;
        pthread_mutex_unlock(&cx->req->mu);
        if (!done) /* the client left mid-generation (toe says how): its sequence is freed */
            sched_cancel(s->sched, cx->req);
        srv_req_unref(cx->req);
        metrics_finished(&s->metrics, !done ? "cancelled" : oai_finish_reason(&cx->w, fin));
    }
    if (!cx->status) /* 499: the client left before an answer was queued (nginx's convention) */
        metrics_request(&s->metrics, cx->route, 499);
    if (cx->has_writer)
        oai_writer_free(&cx->w);
    if (cx->generation)
        atomic_fetch_sub(&s->gen_in_flight, 1);
    dsk_buf_free(&cx->body);
    free((char *)cx->id);
    free(cx);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = 0;
    fprintf(stderr, "dskit serve: http: %s\n", msg);
}

int http_start(server *s)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    int gai = getaddrinfo(s->o.host, port, &hints, &ai);
    if (gai)
        return dsk_err("--host %s: %s", s->o.host, gai_strerror(gai));
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    /* the logger first: MHD reports the options it reads after it through it */
    s->mhd = MHD_start_daemon(flags, (uint16_t)s->o.port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                              s, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)s->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.timeout_s,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                              (size_t)256 * 1024, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->mhd)
        return dsk_err("cannot listen on %s:%d (in use, or not an address of this machine?)", s->o.host, s->o.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->o.port;
    return 0;
}

void http_stop(server *s)
{
    if (s->mhd)
        MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
}
