/* The scheduler's state, shared by its files: sched.c (tasks, admission, the thread, life cycle),
 * sched_round.c (one round: rows, the step, accepting, publishing) and sched_cache.c (the prompt cache's
 * sequences). Only the scheduler thread touches what is not under mu. */
#ifndef DSK_SERVER_SCHED_INTERNAL_H
#define DSK_SERVER_SCHED_INTERNAL_H

#include "runtime/server/detok.h"
#include "runtime/server/prompt_cache.h"
#include "runtime/server/sched.h"

#include <time.h>

enum { TASK_SUBMIT, TASK_CANCEL };

typedef struct task {
    int kind;
    srv_req *r; /* the task holds a reference */
    struct task *next;
} task;

enum { FILL_NONE, FILL_WINDOW, FILL_FIRST }; /* a verify window's (or decode row's) masks; a prompt's first */

typedef struct {
    srv_req *r;        /* NULL: free */
    int seq;
    int64_t reserve;   /* the sequence's reservation (at least r->reserve) */
    int64_t hi;        /* one past the highest position its steps ran (the engine's rollback window) */
    uint64_t admit_no; /* prompt chunks go to the earliest admitted first */
    int n_fed;         /* prompt rows committed */
    int n_out;         /* tokens drawn */
    int32_t tok;       /* the last drawn token: the next row's input */
    int decoding, draft, drafted;
    int held;          /* a stream SCHED_AHEAD tokens ahead of its writer: no rows this round */
    int row0, n_rows;  /* its rows in this round's step (n_rows 0: none) */
    int fin;           /* FIN_* once it ended */
    srv_detok dt;
    srv_cseq cs;       /* structured output (r->gen.grammar set): the matcher and this round's masks */
    int fill;          /* this round's masks, written while the step runs: FILL_* */
    int fill_failed;   /* they could not be made: the slot fails after the step */
    /* this round's output, published at the end of the round */
    dsk_buf text;
    int32_t *toks;
    srv_logprob *lps;
    int n_new;
    double t_last;     /* when its previous tokens were published */
} slot;

struct sched {
    engine *e;
    const engine_info *info;
    const dsk_tokenizer *tok;
    sched_opts o;
    srv_metrics *m;
    int B, window;     /* draft length; rows of one sequence's decode round */
    pthread_t thread;
    int started;
    /* shared with the HTTP threads: mu guards these */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *head, *tail;
    int stop;
    int n_pending, n_running;
    /* the scheduler thread's own */
    srv_req **waiting;
    int n_waiting;
    slot *slots;
    int n_slots, n_open, n_held; /* n_open: sequences of running requests */
    prompt_cache pc;             /* idle sequences of finished requests: n_open + pc.n <= n_slots */
    int64_t pool_used;           /* reserved by every open sequence, the cached ones too */
    uint64_t admissions;
    engine_row *rows;
    int cap_rows;
    engine_out eo;
    int32_t *drafts;
    engine_draft_req *dreq;
    int *dslot, *order;
    double engine_s, engine_cpu; /* this round's wall and thread-CPU time inside engine calls */
    double grammar_s;            /* this round's time computing masks (beside the forward: fill_masks) */
    char fill_err[512];          /* why a slot's masks could not be made */
    uint64_t grammar_masks, grammar_cut; /* masks made; drafts cut because the grammar refused them */
};

/* The scheduler thread's CPU time: its own cost per round without the time it was descheduled (the
 * machine may be shared). */
static inline double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Time an engine call into the round's engine totals. */
#define ENGINE_CALL(s, rc, call)                                                                                     \
    do {                                                                                                           \
        double w_ = dsk_now(), c_ = thread_cpu();                                                                  \
        rc = (call);                                                                                               \
        (s)->engine_cpu += thread_cpu() - c_;                                                                      \
        (s)->engine_s += dsk_now() - w_;                                                                           \
    } while (0)


/* sched_cache.c */
/* The reservation of a fresh sequence for r: the whole context where that can never keep another request
 * waiting (the cache on and the pool unbounded or at least n_slots x context), so that the conversation's
 * next turn fits it; else r->reserve. */
int64_t sched_fresh_reserve(const sched *s, const srv_req *r);
/* Evict cached sequences, least recent first, until a fresh one of `need` positions has a sequence and
 * pool room; 0 when it cannot have them even with the cache empty. */
int sched_cache_room(sched *s, int64_t need);
/* Close cached sequence i. */
void sched_cache_evict(sched *s, int i);
/* The cached sequence r reuses: 1 with *seq committed to *keep (rolled back or as it was), its reservation
 * and hi; 0: none (the cache off, nothing usable, or the roll back refused: that sequence is closed). */
int sched_cache_take(sched *s, const srv_req *r, int *seq, int64_t *reserve, int64_t *hi, int64_t *keep);
/* A request that ended normally: keep its sequence (the least recent evicted when the cache is full);
 * 1 when kept, 0 when the caller must close it. */
int sched_cache_keep(sched *s, const slot *sl);
/* Close every cached sequence. */
void sched_cache_clear(sched *s);

/* sched_round.c */
/* One round; returns its rows (0: nothing could run, every open sequence being a held stream). */
int sched_round(sched *s);
/* End the slot's request (fin unless it ended already), publish it, free the sequence. */
void sched_end_slot(sched *s, slot *sl, int fin);

#endif
