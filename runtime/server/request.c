#include "runtime/server/request.h"
#include "runtime/common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int srv_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a))
        return dsk_err("pthread_condattr_init failed");
    int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) || pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc ? dsk_err("pthread_cond_init failed") : 0;
}

void srv_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, mu, &t); /* a timeout or a spurious wake: the caller looks again */
}

srv_req *srv_req_new(void)
{
    srv_req *r = dsk_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    if (pthread_mutex_init(&r->mu, NULL)) {
        free(r);
        dsk_err("pthread_mutex_init failed");
        return NULL;
    }
    if (srv_cond_init(&r->cv)) {
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
    }
    r->refs = 1;
    return r;
}

void srv_req_ref(srv_req *r)
{
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
}

void srv_req_unref(srv_req *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    for (int i = 0; i < r->gen.n_stops; i++)
        free(r->gen.stops[i]);
    free(r->gen.stops);
    grammar_free(r->gen.grammar);
    free(r->prompt);
    engine_prompt_free(&r->images);
    dsk_buf_free(&r->text);
    free(r->tokens);
    free(r->lps);
    free(r);
}

unsigned srv_req_wait(srv_req *r, unsigned seen, int ms)
{
    pthread_mutex_lock(&r->mu);
    if (r->version == seen && !r->done)
        srv_cond_wait_ms(&r->cv, &r->mu, ms);
    unsigned v = r->version;
    pthread_mutex_unlock(&r->mu);
    return v;
}

void srv_req_fail(srv_req *r, int status, const char *type, const char *code, const char *fmt, ...)
{
    pthread_mutex_lock(&r->mu);
    if (!r->done) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        va_end(ap);
        r->done = 1;
        r->finish = FIN_ERROR;
        r->status = status;
        r->err_type = type;
        r->err_code = code;
        r->version++;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}
