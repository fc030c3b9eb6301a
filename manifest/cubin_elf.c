/* Facts read from a cubin's ELF: the SM it targets and, per function, its registers, launch-bounds
 * limit and static shared memory. Layout facts used (CUDA ELF, ABI version 8):
 * - e_flags bits 8..15 hold the SM number (90 for sm_90 and sm_90a);
 * - section ".nv.info" holds records {u8 format, u8 attribute, u16 size-or-value}; format 0x04
 *   carries `size` payload bytes. Attribute 0x2f (REGCOUNT) has payload {u32 symbol index, u32 regs};
 * - section ".nv.info.<fn>" holds attribute 0x05 (MAX_THREADS) with payload {u32 x, y, z};
 * - section ".nv.shared.<fn>" (NOBITS) spans the function's static shared memory plus 1 KiB the
 *   system reserves on sm_80 and later (present even when the kernel declares none). */
#include "manifest/manifest.h"
#include "runtime/common/error.h"

#include <string.h>

enum { SMEM_SYSTEM_RESERVED = 1024 };

typedef struct {
    const unsigned char *d;
    size_t len;
    uint64_t shoff;
    unsigned shnum, shentsize;
    uint64_t stroff, strsize;
} elf_view;

static uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
    return rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static int elf_open(const void *data, size_t len, elf_view *v)
{
    const unsigned char *d = data;
    if (len < 64 || memcmp(d, "\x7f" "ELF", 4) || d[4] != 2 /* 64-bit */ || d[5] != 1 /* LE */ ||
        rd16(d + 18) != 190 /* EM_CUDA */)
        return dsk_err("not a 64-bit CUDA ELF (cubin)");
    v->d = d;
    v->len = len;
    v->shoff = rd64(d + 0x28);
    v->shentsize = rd16(d + 0x3a);
    v->shnum = rd16(d + 0x3c);
    unsigned shstrndx = rd16(d + 0x3e);
    if (v->shentsize < 64 || shstrndx >= v->shnum || v->shoff > len ||
        (uint64_t)v->shnum * v->shentsize > len - v->shoff)
        return dsk_err("cubin section table is out of bounds");
    const unsigned char *sh = d + v->shoff + (uint64_t)shstrndx * v->shentsize;
    v->stroff = rd64(sh + 0x18);
    v->strsize = rd64(sh + 0x20);
    if (v->stroff > len || v->strsize > len - v->stroff)
        return dsk_err("cubin section names are out of bounds");
    return 0;
}

/* Section i: name, type, file offset, size, link. */
static const char *sect(const elf_view *v, unsigned i, uint32_t *type, uint64_t *off, uint64_t *size)
{
    const unsigned char *sh = v->d + v->shoff + (uint64_t)i * v->shentsize;
    uint32_t name = rd32(sh);
    *type = rd32(sh + 4);
    *off = rd64(sh + 0x18);
    *size = rd64(sh + 0x20);
    if (name >= v->strsize || !memchr(v->d + v->stroff + name, 0, v->strsize - name))
        return "";
    return (const char *)v->d + v->stroff + name;
}

int mf_cubin_sm(const void *cubin, size_t len)
{
    elf_view v = {0};
    if (elf_open(cubin, len, &v))
        return -1;
    return (int)((rd32(v.d + 0x30) >> 8) & 0xff);
}

/* Index of the symbol named `symbol` in .symtab, or -1. */
static long find_symbol(const elf_view *v, const char *symbol)
{
    for (unsigned i = 0; i < v->shnum; i++) {
        uint32_t type;
        uint64_t off, size;
        sect(v, i, &type, &off, &size);
        if (type != 2 /* SHT_SYMTAB */ || off > v->len || size > v->len - off)
            continue;
        const unsigned char *sh = v->d + v->shoff + (uint64_t)i * v->shentsize;
        uint32_t link = rd32(sh + 0x28);
        uint32_t st;
        uint64_t soff, ssize;
        if (link >= v->shnum)
            return -1;
        sect(v, link, &st, &soff, &ssize);
        if (soff > v->len || ssize > v->len - soff)
            return -1;
        for (uint64_t k = 0; k + 24 <= size; k += 24) {
            uint32_t name = rd32(v->d + off + k);
            if (name < ssize && !strncmp((const char *)v->d + soff + name, symbol, ssize - name) &&
                strlen(symbol) < ssize - name)
                return (long)(k / 24);
        }
    }
    return -1;
}

/* Walk the records of an .nv.info section; calls back on attribute `attr` with its payload. */
static int find_attr(const elf_view *v, uint64_t off, uint64_t size, int attr, long symidx, uint32_t *out,
                     int nwords)
{
    if (off > v->len || size > v->len - off)
        return 0;
    const unsigned char *p = v->d + off, *end = p + size;
    while (p + 4 <= end) {
        int fmt = p[0], a = p[1];
        uint16_t sz = rd16(p + 2);
        const unsigned char *payload = p + 4;
        p += 4;
        if (fmt == 0x04) {
            if (p + sz > end)
                return 0;
            p += sz;
            if (a != attr)
                continue;
            if (symidx >= 0) {
                if (sz >= 8 && rd32(payload) == (uint32_t)symidx) {
                    *out = rd32(payload + 4);
                    return 1;
                }
            } else if (sz >= 4u * (unsigned)nwords) {
                for (int i = 0; i < nwords; i++)
                    out[i] = rd32(payload + 4 * i);
                return 1;
            }
        }
    }
    return 0;
}

int mf_cubin_resources(const void *cubin, size_t len, const char *symbol, int *regs, int *max_threads,
                       int *smem_static)
{
    elf_view v = {0};
    if (elf_open(cubin, len, &v))
        return -1;
    long symidx = find_symbol(&v, symbol);
    if (symidx < 0)
        return dsk_err("cubin has no symbol '%s'", symbol);
    char info_name[256], shared_name[256];
    snprintf(info_name, sizeof info_name, ".nv.info.%s", symbol);
    snprintf(shared_name, sizeof shared_name, ".nv.shared.%s", symbol);
    int have_regs = 0;
    *regs = 0;
    *max_threads = 0;
    *smem_static = 0;
    for (unsigned i = 0; i < v.shnum; i++) {
        uint32_t type;
        uint64_t off, size;
        const char *name = sect(&v, i, &type, &off, &size);
        uint32_t w[3];
        if (!strcmp(name, ".nv.info") && find_attr(&v, off, size, 0x2f, symidx, w, 1)) {
            *regs = (int)w[0];
            have_regs = 1;
        } else if (!strcmp(name, info_name) && find_attr(&v, off, size, 0x05, -1, w, 3)) {
            *max_threads = (int)(w[0] * w[1] * w[2]);
        } else if (!strcmp(name, shared_name)) {
            *smem_static = size > SMEM_SYSTEM_RESERVED ? (int)(size - SMEM_SYSTEM_RESERVED) : 0;
        }
    }
    if (!have_regs)
        return dsk_err("cubin has no register count for '%s' (no EIATTR_REGCOUNT record)", symbol);
    return 0;
}
