/* dskit bench tokenize: load time, single-core encode speed on 1 MB of mixed text, a 1M-token
 * prompt, long words and space runs (to show the cost stays linear), and decode speed. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const words[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had",
    "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if",
    "more", "when", "will", "would", "who", "so", "no", "model", "token", "attention", "kernel",
    "memory", "throughput", "latency", "quantization", "inference", "server", "request", "budget",
    "committee", "reasonable", "timeline", "weather", "library", "function", "variable", "pointer"};
static const char *const code[] = {
    "int ", "return ", "if (", ") {\n", "}\n", "for (int i = 0; i < n; i++)", "    ", "\t", "->",
    "printf(\"%d\\n\", ", "x[i]", " = ", " + ", ";\n", "def ", "self.", "import numpy as np\n",
    "{\"key\": ", "\"value\"", ", ", "]", "[", "0x", "/* ", " */", "// ", "const char *", "NULL"};
static const char *const other[] = {"Привет", "мир", "сегодня", "погода", "مرحبا", "بالعالم",
                                    "안녕하세요", "세계", "こんにちは", "カタカナ", "👍🏽", "👨‍👩‍👧",
                                    "🇯🇵", "😀", "ﬁ", "ＡＢＣ", "。", "，", "！", "«", "»", "—"};

static void append(dsk_buf *b, const char *s)
{
    dsk_buf_append(b, s, strlen(s));
}

/* Mixed text of about n bytes: English-like prose with distinct identifiers, code, CJK, other
 * scripts, emoji, numbers and whitespace, from a fixed seed. */
static int mixed_text(uint64_t seed, size_t n, dsk_buf *b)
{
    dsk_rng r;
    dsk_rng_seed(&r, seed);
    while (b->len < n) {
        uint64_t k = dsk_rng_below(&r, 100);
        char tmp[64];
        if (k < 45) {
            append(b, words[dsk_rng_below(&r, sizeof words / sizeof words[0])]);
            append(b, dsk_rng_below(&r, 12) ? " " : ". ");
        } else if (k < 55) {
            int l = 3 + (int)dsk_rng_below(&r, 9);
            for (int i = 0; i < l; i++)
                tmp[i] = (char)('a' + dsk_rng_below(&r, 26));
            tmp[l] = 0;
            append(b, tmp);
            append(b, dsk_rng_below(&r, 3) ? " " : "_");
        } else if (k < 70) {
            append(b, code[dsk_rng_below(&r, sizeof code / sizeof code[0])]);
        } else if (k < 82) {
            int l = 1 + (int)dsk_rng_below(&r, 12);
            for (int i = 0; i < l; i++) {
                uint8_t u[4];
                int m = utf8_encode(0x4E00 + (uint32_t)dsk_rng_below(&r, 0x1000), u);
                dsk_buf_append(b, u, (size_t)m);
            }
            append(b, dsk_rng_below(&r, 2) ? "，" : "。");
        } else if (k < 92) {
            append(b, other[dsk_rng_below(&r, sizeof other / sizeof other[0])]);
            append(b, " ");
        } else if (k < 97) {
            snprintf(tmp, sizeof tmp, "%llu ", (unsigned long long)dsk_rng_below(&r, 10000000));
            append(b, tmp);
        } else {
            append(b, dsk_rng_below(&r, 2) ? "\n\n" : "\r\n    ");
        }
    }
    return dsk_buf_append(b, "", 1) ? -1 : (b->len--, 0);
}

/* Seconds to encode text (best of reps); *n_ids gets the id count. */
static double time_encode(const dsk_tokenizer *tok, const char *text, size_t len, int reps,
                          size_t *n_ids)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        tok_ids ids = {0};
        double t = dsk_now();
        if (tok_encode_append(tok, text, len, TOK_SPECIAL, &ids)) {
            tok_ids_free(&ids);
            return -1;
        }
        t = dsk_now() - t;
        *n_ids = ids.len;
        tok_ids_free(&ids);
        if (t < best)
            best = t;
    }
    return best;
}

static int run(const char *path, const char *input)
{
    double t = dsk_now();
    dsk_tokenizer *tok;
    if (tok_load(path, &tok))
        return -1;
    double load_s = dsk_now() - t;
    int rc = -1;
    dsk_buf text = {0}, big = {0}, run = {0};
    if (input) {
        char *data;
        size_t len;
        if (dsk_read_file(input, &data, &len))
            goto done;
        while (text.len < (1u << 20) && len)
            dsk_buf_append(&text, data, len < (1u << 20) - text.len ? len : (1u << 20) - text.len);
        free(data);
    } else if (mixed_text(1, 1u << 20, &text)) {
        goto done;
    }
    size_t n_ids;
    printf("dskit bench tokenize: %s (vocab %d), one thread\n\n", path, tok_vocab_size(tok));
    printf("%-44s %10s %12s %10s\n", "case", "bytes", "tokens", "seconds");
    printf("%-44s %10s %12s %10.3f\n", "load tokenizer.json", "-", "-", load_s);
    double s = time_encode(tok, text.data, text.len, 5, &n_ids);
    if (s < 0)
        goto done;
    printf("%-44s %10zu %12zu %10.4f  -> %.1f MB/s, %.2f M tokens/s\n",
           input ? "encode input (1 MB)" : "encode mixed text (1 MB)", text.len, n_ids, s,
           (double)text.len / s / 1e6, (double)n_ids / s / 1e6);

    /* a prompt of 1M tokens: fresh mixed text (not the 1 MB above repeated) */
    size_t want = 1000000;
    size_t bytes = (size_t)((double)text.len / (double)n_ids * (double)want * 1.02);
    if (mixed_text(2, bytes, &big))
        goto done;
    s = time_encode(tok, big.data, big.len, 1, &n_ids);
    if (s < 0)
        goto done;
    printf("%-44s %10zu %12zu %10.3f\n", "1M-token prompt (mixed text)", big.len, n_ids, s);

    /* linear, not quadratic: a long word and a long run of spaces at two sizes */
    static const struct {
        const char *name, *unit;
    } runs[] = {{"word of letters, no spaces", "abcdefghijklmnopqrstuvwxyz"},
                {"run of spaces", " "},
                {"run of newlines and spaces", "\n  "},
                {"run of digits", "0123456789"}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        for (size_t size = 1u << 19; size <= 1u << 20; size <<= 1) {
            run.len = 0;
            while (run.len < size)
                append(&run, runs[k].unit);
            s = time_encode(tok, run.data, run.len, 1, &n_ids);
            if (s < 0)
                goto done;
            char name[64];
            snprintf(name, sizeof name, "%s (%zu KB)", runs[k].name, size >> 10);
            printf("%-44s %10zu %12zu %10.4f\n", name, run.len, n_ids, s);
        }
    }

    /* decode: whole and streaming */
    int32_t *ids;
    if (tok_encode(tok, text.data, text.len, 0, &ids, &n_ids))
        goto done;
    char *back;
    size_t blen;
    t = dsk_now();
    if (tok_decode(tok, ids, n_ids, &back, &blen)) {
        free(ids);
        goto done;
    }
    s = dsk_now() - t;
    free(back);
    printf("%-44s %10zu %12zu %10.4f\n", "decode (1 MB of ids)", blen, n_ids, s);
    tok_stream st;
    dsk_buf out = {0};
    tok_stream_init(&st, tok);
    t = dsk_now();
    for (size_t i = 0; i < n_ids; i++)
        if (tok_stream_push(&st, ids[i], &out)) {
            free(ids);
            dsk_buf_free(&out);
            goto done;
        }
    s = dsk_now() - t;
    printf("%-44s %10zu %12zu %10.4f\n", "streaming decode, one id at a time", out.len, n_ids, s);
    free(ids);
    dsk_buf_free(&out);
    rc = 0;
done:
    dsk_buf_free(&text);
    dsk_buf_free(&big);
    dsk_buf_free(&run);
    tok_free(tok);
    return rc;
}

int bench_tokenize(int argc, char **argv)
{
    const char *path = "data/tokenizer/deepseek-v3-tokenizer.json", *input = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(argv[i], "--input") && i + 1 < argc) {
            input = argv[++i];
        } else {
            int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
            fprintf(help ? stdout : stderr,
                    "usage: dskit bench tokenize [--tokenizer FILE] [--input TEXT_FILE]\n"
                    "  default tokenizer: %s (run from the repository root)\n", path);
            return help ? 0 : 2;
        }
    }
    if (run(path, input)) {
        fprintf(stderr, "dskit bench tokenize: %s\n", dsk_err_msg());
        return 1;
    }
    return 0;
}
