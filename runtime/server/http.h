/* The HTTP layer over libmicrohttpd: one thread per connection (MHD's), bounded connections, an idle
 * timeout for clients that stall, request bodies up to a limit, keys checked before a body is read.
 * Route handlers (routes.c) answer through the helpers here; a generation's handler posts its request
 * to the scheduler and waits on it with timeouts, watching the socket so a client that leaves cancels. */
#ifndef DSK_SERVER_HTTP_H
#define DSK_SERVER_HTTP_H

#include "runtime/server/oai_reply.h"
#include "runtime/server/server.h"

#include <jansson.h>
#include <microhttpd.h>

typedef struct {
    server *srv;
    struct MHD_Connection *conn;
    int route;
    dsk_buf body;
    size_t received;    /* body bytes received (more than body holds once over the limit) */
    int status;         /* the status queued, 0 before */
    const char *id;     /* the request id, once it has one (x-request-id) */
    uint64_t seed;      /* the sampling seed (x-dskit-seed), when has_seed */
    int has_seed;
    int generation;     /* counted in srv->gen_in_flight */
    /* a generation */
    srv_req *req;
    oai_writer w;
    int has_writer;
    size_t out_off;     /* bytes of w.out already handed to MHD */
    int stream_done;
    unsigned seen;      /* the request version last read */
    double last_send;
} http_ctx;

enum MHD_Result http_respond(http_ctx *cx, int status, const char *ctype, char *body, size_t len);
/* Takes j. */
enum MHD_Result http_json(http_ctx *cx, int status, json_t *j);
enum MHD_Result http_error(http_ctx *cx, int status, const char *type, const char *code, const char *param,
                           const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Queue the SSE response that streams cx->req through cx->w. */
enum MHD_Result http_stream(http_ctx *cx);
/* Wait until cx->req is admitted (or done) or, with until_done, done. -1: the client left or the server is
 * stopping (the request was cancelled). */
int http_wait(http_ctx *cx, int until_done);

/* routes.c: the final call for a request whose body is complete. */
enum MHD_Result routes_dispatch(http_ctx *cx);
/* Which route a method and path are; ROUTE_OTHER with *allowed NULL for an unknown path, or the method the
 * route wants in *allowed when the method is wrong. */
int routes_find(const char *method, const char *url, const char **allowed);

#endif
