/* A string -> index hash table (open addressing, xxh3) for tensor names: the real checkpoint has
 * ~96k tensors, so lookups must not scan. The table stores the caller's name pointers, which must
 * outlive it. */
#ifndef DSK_NAME_TABLE_H
#define DSK_NAME_TABLE_H

#include <stdint.h>

typedef struct {
    struct name_slot *slots; /* [mask + 1]; NULL name = empty */
    uint32_t mask;
    uint32_t used;
} name_table;

/* Find the index stored for name, or -1. */
int name_table_find(const name_table *t, const char *name);
/* Store name -> idx unless name is already present; *prior receives the existing index or -1. */
int name_table_insert(name_table *t, const char *name, int idx, int *prior);
void name_table_free(name_table *t);

#endif
