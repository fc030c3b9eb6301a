/* `dskit run --backend cpu|gpu --model DIR --prompt TEXT`: one prompt through the engine, the generated text
 * to stdout as it is produced, one summary line to stderr. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/engine/generate.h"
#include "runtime/engine/image_input.h"
#include "runtime/model/config.h"
#include "runtime/tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: dskit run --backend cpu|gpu --model DIR (--prompt TEXT | --prompt-ids \"1 2 3\") [--max-tokens N]\n"
    "                 [--temperature T] [--seed S] [--draft] [--dump-logits FILE] [--threads N] [--cache-mb N]\n"
    "                 [--print-ids] [--engram host|device|nvme:DIR] [--tp N [--devices D0,D1]\n"
    "                 [--rank R --peer HOST:PORT]]\n"
    "                 [--image FILE|data:URL]...\n"
    "  --backend B         cpu (the reference) or gpu (needs --kit; --device N picks the GPU, default 0)\n"
    "  --kit KIT           the kit archive for --backend gpu (dskit-build --arch sm_90 --out kits)\n"
    "  --prompt TEXT       tokenized with DIR/tokenizer.json, BOS first\n"
    "  --prompt-ids IDS    token ids instead of text\n"
    "  --max-tokens N      new tokens at most (default 64); generation also stops at EOS\n"
    "  --temperature T     0 (default): argmax; otherwise Gumbel-max keyed by (seed, position)\n"
    "  --draft             DSpark drafting with exact verification (same output, maybe faster)\n"
    "  --dump-logits FILE  the fp32 logits row that chose each token (little-endian, vocab_size each)\n"
    "  --threads N         worker threads for the wide matmuls (default 2; results never depend on it)\n"
    "  --cache-mb N        decoded EXL3 weights kept in memory (default 4096; the rest decode per use)\n"
    "  --engram WHERE      Engram rows from host (the checkpoint, default), device (gpu: tables in GPU memory)\n"
    "                      or nvme:DIR (dskit engram pack)\n"
    "  --tp N              tensor-parallel ranks on this host (default 1; dskit starts the others itself)\n"
    "  --devices D0,D1     gpu, --tp N: rank r's GPU (default: rank r on GPU r; 0,0 runs both on GPU 0)\n"
    "  --rank R --peer HOST:PORT\n"
    "                      across hosts (--tp 2): rank 0 listens on HOST:PORT, rank 1 (started there with the same\n"
    "                      --model and options, no prompt) connects and follows until rank 0 ends\n"
    "  --rank-timeout S    how long ranks wait for each other to start or connect (default 30)\n"
    "  --print-ids         print the generated ids instead of text\n"
    "  --image SRC         an image (PNG or JPEG file, or a data: URL; repeatable, at most 16): its span of\n"
    "                      image positions goes after BOS, before the prompt, in the order given\n";

enum { MAX_IMAGES = 16 };

typedef struct {
    const char *backend, *model_dir, *prompt, *prompt_ids, *dump, *engram, *peer, *kit, *devices;
    long device, max_tokens, threads, cache_mb, tp, rank, rank_timeout;
    double temperature;
    uint64_t seed;
    int draft, print_ids;
    const char *images[MAX_IMAGES];
    int n_images;
} run_opts;

static int parse(int argc, char **argv, run_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(a, "--draft")) {
            o->draft = 1;
            continue;
        }
        if (!strcmp(a, "--print-ids")) {
            o->print_ids = 1;
            continue;
        }
        if (!v)
            return dsk_err("%s: unknown option, or it needs a value", a);
        i++;
        if (!strcmp(a, "--backend"))
            o->backend = v;
        else if (!strcmp(a, "--model"))
            o->model_dir = v;
        else if (!strcmp(a, "--prompt"))
            o->prompt = v;
        else if (!strcmp(a, "--prompt-ids"))
            o->prompt_ids = v;
        else if (!strcmp(a, "--dump-logits"))
            o->dump = v;
        else if (!strcmp(a, "--engram"))
            o->engram = v;
        else if (!strcmp(a, "--peer"))
            o->peer = v;
        else if (!strcmp(a, "--devices"))
            o->devices = v;
        else if (!strcmp(a, "--image")) {
            if (o->n_images == MAX_IMAGES)
                return dsk_err("--image: at most %d images", MAX_IMAGES);
            o->images[o->n_images++] = v;
        } else if (!strcmp(a, "--kit"))
            o->kit = v;
        else if (!strcmp(a, "--device")) {
            if (cli_parse_int(a, v, 0, 63, &o->device))
                return -1;
        }
        else if (!strcmp(a, "--rank-timeout")) {
            if (cli_parse_int(a, v, 1, 3600, &o->rank_timeout))
                return -1;
        } else if (!strcmp(a, "--rank")) {
            if (cli_parse_int(a, v, 0, 7, &o->rank))
                return -1;
        }
        else if (!strcmp(a, "--max-tokens")) {
            if (cli_parse_int(a, v, 1, 1 << 24, &o->max_tokens))
                return -1;
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_int(a, v, 1, 64, &o->threads))
                return -1;
        } else if (!strcmp(a, "--tp")) {
            if (cli_parse_int(a, v, 1, 8, &o->tp))
                return -1;
        } else if (!strcmp(a, "--cache-mb")) {
            if (cli_parse_int(a, v, 0, 1 << 22, &o->cache_mb))
                return -1;
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(a, v, 0, 0x7fffffffffffffffL, &n))
                return -1;
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--temperature")) {
            if (cli_parse_double(a, v, &o->temperature) || o->temperature < 0)
                return dsk_err("--temperature: '%s' must be a number >= 0", v);
        } else
            return dsk_err("unknown option '%s'", a);
    }
    if (!o->backend || (strcmp(o->backend, "cpu") && strcmp(o->backend, "gpu")))
        return dsk_err("--backend cpu or --backend gpu is required");
    if (!strcmp(o->backend, "gpu") && !o->kit)
        return dsk_err("--backend gpu needs --kit KIT (dskit-build --arch sm_90 --out kits)");
    if (o->devices && (strcmp(o->backend, "gpu") || o->tp < 2))
        return dsk_err("--devices goes with --backend gpu and --tp N (one GPU per rank; --device N for one rank)");
    if (!o->model_dir)
        return dsk_err("--model DIR is required");
    if ((o->rank > 0 || o->peer) && (!o->peer || o->tp < 2))
        return dsk_err("--rank and --peer go together, with --tp 2");
    if (o->rank > 0) {
        if (o->prompt || o->prompt_ids || o->n_images)
            return dsk_err("--rank %ld follows rank 0: it takes no prompt and no images", o->rank);
        return 0;
    }
    if (!o->prompt == !o->prompt_ids)
        return dsk_err("give exactly one of --prompt and --prompt-ids");
    return 0;
}

static int parse_ids(const char *s, int vocab, int32_t **ids, int *n)
{
    int cap = 16, len = 0;
    int32_t *v = dsk_malloc(sizeof(int32_t) * (size_t)cap);
    char *end;
    if (!v)
        return -1;
    for (;;) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n')
            s++;
        if (!*s)
            break;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x >= vocab) {
            free(v);
            return dsk_err("--prompt-ids: '%.16s' is not a token id in [0, %d)", s, vocab);
        }
        if (len == cap) {
            int32_t *w = dsk_realloc(v, sizeof(int32_t) * (size_t)(cap *= 2));
            if (!w) {
                free(v);
                return -1;
            }
            v = w;
        }
        v[len++] = (int32_t)x;
        s = end;
    }
    if (!len) {
        free(v);
        return dsk_err("--prompt-ids: no ids");
    }
    *ids = v;
    *n = len;
    return 0;
}

typedef struct {
    tok_stream ts;
    dsk_buf buf;
    int print_ids, first;
} out_ctx;

/* Each token goes out as soon as it completes a character (or as its id). */
static int on_token(int32_t id, void *ctx)
{
    out_ctx *oc = ctx;
    if (oc->print_ids) {
        printf("%s%d", oc->first ? "" : " ", id);
        oc->first = 0;
    } else {
        oc->buf.len = 0;
        if (tok_stream_push(&oc->ts, id, &oc->buf))
            return -1;
        fwrite(oc->buf.data, 1, oc->buf.len, stdout);
    }
    fflush(stdout);
    return 0;
}

int cmd_run(int argc, char **argv)
{
    run_opts o = {.max_tokens = 64, .threads = 2, .cache_mb = 4096, .tp = 1};
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "dskit run: %s\n%s", dsk_err_msg(), usage_text);
        return 2;
    }
    engine *e = NULL;
    dsk_tokenizer *tok = NULL;
    int32_t *ids = NULL, *out = NULL;
    int n_ids = 0, rc = 2, n_loaded = 0;
    vision_image imgs[MAX_IMAGES];
    uint64_t keys[MAX_IMAGES];
    size_t at[MAX_IMAGES];
    engine_prompt ep = {0};
    FILE *dump = NULL;
    out_ctx oc = {.print_ids = o.print_ids, .first = 1};
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", o.model_dir);
    if ((o.prompt || !o.print_ids) && tok_load(path, &tok)) {
        fprintf(stderr, "dskit run: %s\n", dsk_err_msg());
        goto done;
    }
    engine_opts eo = {.backend = o.backend, .model_dir = o.model_dir, .tokenizer = tok, .max_seqs = 1, .engram = o.engram,
                      .kit = o.kit, .device = (int)o.device, .devices = o.devices,
                      .tp = (int)o.tp, .peer = o.peer, .rank = (int)o.rank,
                      .rank_timeout_ms = (int)o.rank_timeout * 1000,
                      .threads = (int)o.threads, .cache_bytes = (size_t)o.cache_mb << 20};
    if (engine_open(&eo, &e)) {
        fprintf(stderr, "dskit run: %s\n", dsk_err_msg());
        goto done;
    }
    if (o.rank > 0) { /* a follower across hosts: rank 0's calls, until it ends */
        rc = engine_follow(e) ? 1 : 0;
        if (rc)
            fprintf(stderr, "dskit run: rank %ld: %s\n", o.rank, dsk_err_msg());
        goto done;
    }
    int vocab = engine_get_info(e)->vocab;
    if (o.prompt) {
        size_t n;
        if (tok_encode(tok, o.prompt, strlen(o.prompt), 1, &ids, &n)) {
            fprintf(stderr, "dskit run: tokenizing the prompt: %s\n", dsk_err_msg());
            goto done;
        }
        n_ids = (int)n;
    } else if (parse_ids(o.prompt_ids, vocab, &ids, &n_ids)) {
        fprintf(stderr, "dskit run: %s\n", dsk_err_msg());
        goto done;
    }
    const model_config *cfg = engine_get_info(e)->cfg;
    for (int k = 0; k < o.n_images; k++) {
        if (engine_image_load(cfg, o.images[k], strlen(o.images[k]), 1, 0, &imgs[k], &keys[k])) {
            fprintf(stderr, "dskit run: --image %.200s: %s\n", o.images[k], dsk_err_msg());
            goto done;
        }
        n_loaded++;
        at[k] = 1; /* after BOS */
        fprintf(stderr, "image %d: %d x %d patches, %lld positions\n", k, imgs[k].plan.n_vit_w, imgs[k].plan.n_vit_h,
                (long long)imgs[k].plan.positions);
    }
    if (o.n_images && engine_prompt_images(cfg, ids, (size_t)n_ids, at, imgs, keys, o.n_images, &ep)) {
        fprintf(stderr, "dskit run: %s\n", dsk_err_msg());
        goto done;
    }
    if (o.dump && !(dump = fopen(o.dump, "wb"))) {
        fprintf(stderr, "dskit run: cannot write %s\n", o.dump);
        goto done;
    }
    if (tok)
        tok_stream_init(&oc.ts, tok);
    out = dsk_malloc(sizeof(int32_t) * (size_t)o.max_tokens);
    gen_opts g = {.max_tokens = (int)o.max_tokens,
                  .sp = {.temperature = (float)o.temperature, .top_p = 1.0f, .seed = o.seed},
                  .draft = o.draft, .stop_at_eos = 1, .dump_logits = dump, .on_token = on_token, .ctx = &oc,
                  .images = ep.images, .image_pos = ep.pos, .n_images = ep.n_images};
    gen_stats st;
    rc = 1;
    if (!out || engine_generate(e, o.n_images ? ep.ids : ids, o.n_images ? ep.n_ids : n_ids, &g, out, &st)) {
        fprintf(stderr, "\ndskit run: %s\n", dsk_err_msg());
        goto done;
    }
    oc.buf.len = 0;
    if (tok && !o.print_ids && tok_stream_flush(&oc.ts, &oc.buf) == 0)
        fwrite(oc.buf.data, 1, oc.buf.len, stdout);
    printf("\n");
    if (fflush(stdout) || ferror(stdout)) { /* the text before the summary on stderr, also when redirected */
        fprintf(stderr, "dskit run: writing the output failed\n");
        goto done;
    }
    if (dump && fclose(dump)) {
        dump = NULL;
        fprintf(stderr, "dskit run: writing %s failed\n", o.dump);
        goto done;
    }
    dump = NULL;
    fprintf(stderr, "prompt %d tokens, %.1f tok/s; decode %d tokens, %.1f tok/s", st.n_prompt,
            st.n_prompt / st.prefill_s, st.n_out - 1, st.n_out > 1 ? (st.n_out - 1) / st.decode_s : 0.0);
    if (o.draft)
        fprintf(stderr, "; draft: %.2f accepted per round (%d rounds)",
                st.rounds ? (double)st.accepted / st.rounds : 0.0, st.rounds);
    fprintf(stderr, "\n");
    rc = 0;
done:
    if (dump)
        fclose(dump);
    dsk_buf_free(&oc.buf);
    for (int k = 0; k < n_loaded; k++)
        vision_image_free(&imgs[k]);
    engine_prompt_free(&ep);
    free(ids);
    free(out);
    tok_free(tok);
    engine_close(e);
    return rc;
}
