/* config.json on any bytes: model_config_parse refuses what it cannot use, naming the field; what it
 * accepts is a config whose derived sizes are sane: the checkpoint schema and the kit needs are computed
 * from it without overflow (UBSan) and the role table points only at real layers. */
#include "manifest/needs.h"
#include "runtime/model/config.h"
#include "runtime/model/schema.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    FUZZ_CHECK(text);
    memcpy(text, data, size);
    text[size] = 0;
    model_config c;
    if (model_config_parse(text, "fuzz/config.json", &c) == 0) {
        FUZZ_CHECK(c.n_all_layers <= MODEL_MAX_LAYERS);
        for (int l = 0; l < c.n_all_layers; l++) {
            const layer_role *r = &c.roles[l];
            FUZZ_CHECK(r->kv_source < c.n_layers && r->topk_source < c.n_layers);
            FUZZ_CHECK((r->ratio == 0) == (r->kv_source < 0) || r->mode == LAYER_DSPARK);
        }
        /* the schema of a real-sized config lists ~100k tensors: only small ones are expanded */
        if (c.n_layers * (int64_t)c.n_routed_experts <= 4096) {
            schema_tensor *t;
            int n;
            if (model_schema(&c, &t, &n) == 0)
                free(t);
        }
        need_list needs;
        if (needs_for_model(&c, NULL, &needs) == 0)
            need_list_free(&needs);
    }
    free(text);
    return 0;
}
