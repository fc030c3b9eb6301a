/* dskit tokenize: text -> ids, ids -> text, or an OpenAI chat request -> prompt ids, on stdin/stdout. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/tokenizer/chat.h"
#include "runtime/tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dskit tokenize --tokenizer FILE [--bos] [--decode] [--chat [--render]]\n"
    "  reads stdin; prints the ids separated by spaces (no BOS unless --bos)\n"
    "  --decode  read ids (whitespace-separated) and print the text they stand for\n"
    "  --chat    read an OpenAI chat request (messages, tools, reasoning_effort,\n"
    "            chat_template_kwargs) and print the prompt's ids\n"
    "  --render  with --chat: print the rendered prompt text instead of ids\n";

static int read_stdin(dsk_buf *in)
{
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        if (dsk_buf_append(in, chunk, n))
            return -1;
    if (ferror(stdin))
        return dsk_err_errno("reading stdin");
    return 0;
}

static int print_ids(const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (printf(i ? " %d" : "%d", ids[i]) < 0)
            return dsk_err_errno("writing stdout");
    if (printf("\n") < 0)
        return dsk_err_errno("writing stdout");
    return 0;
}

/* Parse whitespace-separated decimal ids from s[0..len): anything else, a NUL included, is an error
 * (what followed a NUL used to be ignored). */
static int parse_ids(const char *s, size_t len, tok_ids *ids)
{
    const char *end = s + len;
    while (s < end) {
        if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == ',') {
            s++;
            continue;
        }
        if (*s < '0' || *s > '9')
            return dsk_err("byte %zu ('%s') is not part of a token id", len - (size_t)(end - s),
                           *s ? (char[2]){*s, 0} : "\\0");
        char *stop;
        errno = 0;
        long v = strtol(s, &stop, 10);
        if (errno || v > INT32_MAX)
            return dsk_err("'%.20s' is not a token id", s);
        if (tok_ids_push(ids, (int32_t)v))
            return -1;
        s = stop;
    }
    return 0;
}

/* --chat: the request's prompt ids, or with --render its text. */
static int chat(const dsk_tokenizer *tok, const char *text, size_t len, int render)
{
    json_error_t jerr;
    json_t *req = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
    if (!req)
        return dsk_err("the request is not JSON (line %d column %d: %s)", jerr.line, jerr.column,
                       jerr.text);
    int rc = -1;
    if (render) {
        dsml_prompt p;
        if (!chat_render(req, &p, NULL)) {
            rc = fwrite(p.text.data, 1, p.text.len, stdout) == p.text.len ? 0
                                                                           : dsk_err_errno("writing stdout");
            dsml_prompt_free(&p);
        }
    } else {
        chat_prompt p;
        if (!chat_encode(tok, req, 0, &p)) {
            rc = print_ids(p.ids.data, p.ids.len);
            chat_prompt_free(&p);
        }
    }
    json_decref(req);
    return rc;
}

static int run(const char *path, int bos, int decode, int chat_mode, int render)
{
    dsk_tokenizer *tok = NULL;
    dsk_buf in = {0};
    tok_ids ids = {0};
    int rc = 2;
    if (read_stdin(&in) || dsk_buf_append(&in, "", 1))
        goto done;
    in.len--;
    if (tok_load(path, &tok))
        goto done;
    rc = 1;
    if (decode) {
        char *text;
        size_t len;
        if (parse_ids(in.data, in.len, &ids) || tok_decode(tok, ids.data, ids.len, &text, &len))
            goto done;
        size_t w = fwrite(text, 1, len, stdout);
        free(text);
        if (w != len) {
            dsk_err_errno("writing stdout");
            rc = 2;
            goto done;
        }
    } else if (chat_mode) {
        if (chat(tok, in.data, in.len, render))
            goto done;
    } else {
        if (bos) {
            if (tok_bos(tok) < 0) {
                dsk_err("the tokenizer has no BOS token");
                goto done;
            }
            if (tok_ids_push(&ids, tok_bos(tok)))
                goto done;
        }
        if (tok_encode_append(tok, in.data, in.len, TOK_SPECIAL, &ids) || print_ids(ids.data, ids.len))
            goto done;
    }
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "dskit tokenize: %s\n", dsk_err_msg());
    tok_ids_free(&ids);
    dsk_buf_free(&in);
    tok_free(tok);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *path = NULL;
    int bos = 0, decode = 0, chat_mode = 0, render = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(argv[i], "--bos")) {
            bos = 1;
        } else if (!strcmp(argv[i], "--decode")) {
            decode = 1;
        } else if (!strcmp(argv[i], "--chat")) {
            chat_mode = 1;
        } else if (!strcmp(argv[i], "--render")) {
            render = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else {
            fprintf(stderr, "dskit tokenize: unknown or incomplete option '%s'\n%s", argv[i],
                    usage_text);
            return 2;
        }
    }
    if (!path || decode + chat_mode > 1 || (render && !chat_mode) || (bos && (decode || chat_mode))) {
        fputs(usage_text, stderr);
        return 2;
    }
    return run(path, bos, decode, chat_mode, render);
}
