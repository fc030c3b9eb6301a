/* A group of tensor-parallel ranks (docs/ranks.md): rank 0 schedules and the followers issue the same
 * engine calls in the same order, each on its own backend holding its slice of the model. The group owns
 * what the ranks share: the exchange transport (rank_xchg), the plan channel from rank 0 to the
 * followers, the abort word, and each rank's liveness. On one host they live in one shared-memory
 * segment inherited by the followers rank 0 starts itself; across hosts they run over one TCP connection
 * per follower. Internal to runtime/ranks and runtime/engine. */
#ifndef DSK_RANKS_GROUP_H
#define DSK_RANKS_GROUP_H

#include "runtime/engine/engine.h"
#include "runtime/engine/xchg.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RANKS_MAX 8

typedef struct rank_group rank_group;

typedef struct {
    int tp;                  /* ranks (2..RANKS_MAX) */
    const char *settings;    /* what every rank must agree on (model, kit root, options), compared at start */
    const char *peer;        /* "HOST:PORT": across hosts (rank 0 listens, the others connect); NULL: one host */
    int rank;                /* with peer: this process's rank */
    int timeout_ms;          /* exchange and start bound (default 30000; a round's measured time raises it) */
    /* one host: how rank 0 starts follower r (argv for execv, NULL-terminated; "{RANK}" and "{FD}" are
     * replaced), built by the caller from its own options */
    char *const *follower_argv;
} rank_group_opts;

/* Rank 0 on one host: create the segment, start the followers, wait (bounded) until each has attached
 * with the same settings. Across hosts (peer set): listen (rank 0) or connect (rank > 0). A follower that
 * cannot start, never connects, or differs is an error naming its rank (both settings printed), and no
 * process is left behind. */
int rank_group_open(const rank_group_opts *o, rank_group **out);
/* A follower started by rank 0: attach to the inherited segment fd as rank `rank`. */
int rank_group_attach(int fd, int rank, const char *settings, int timeout_ms, rank_group **out);
/* Stop: tell the followers to exit, wait for them (bounded), free everything. */
void rank_group_close(rank_group *g);

rank_xchg *rank_group_xchg(rank_group *g);
int rank_group_rank(const rank_group *g);
int rank_group_tp(const rank_group *g);

/* The plan channel: rank 0 sends one message to every follower; a follower receives the next. A message
 * is a type and a byte payload (plan.h). recv waits while the group is alive (watching rank 0 and the abort
 * word), with no timeout: an idle follower is not a hang. It refuses a frame that announces more than
 * max_bytes (plan_limits.max_bytes) before allocating anything: a broken or hostile peer. */
int rank_plan_send(rank_group *g, uint32_t type, const void *payload, size_t bytes);
int rank_plan_recv(rank_group *g, size_t max_bytes, uint32_t *type, void **payload, size_t *bytes);

/* What every rank must agree on, as one line (the model folder and its config hash, backend, kit, tp,
 * limits): compared at start, both printed when they differ. */
int tp_settings(const engine_opts *o, char *buf, size_t cap);

/* The round time the group has seen, to bound exchanges: call after every step. */
void rank_group_round_time(rank_group *g, double seconds);

#endif
