// The emulator's scheduler: every CUDA thread of a block is a fiber; a fiber runs until it reaches a
// scheduler point (a block barrier, a warp operation, __nanosleep) or exits. A barrier completes when
// every thread of the block has reached it at the same line; a warp operation when every lane of its
// mask has reached one with the same mask and kind. When no fiber can run and some have not exited, the
// grid stops with a report of where each thread waits. Also here: the mma of the PTX ISA fragment
// layouts, cp.async copies that land at their wait, shared-memory addresses, and a SIGSEGV report that
// names the kernel, block and thread.
#include "tests/emu/emu.h"
#include "tests/emu/emu_launch.h"

#include <cuda.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

emu_ids *emu_cur;
uint3 emu_block_idx;
dim3 emu_block_dim, emu_grid_dim;

namespace {

/* ---- contexts: a hand-written switch on x86-64 (the callee-saved registers; every fiber shares the
 * host's floating-point control state, which kernels cannot change), ucontext elsewhere ---- */
#if defined(__x86_64__)
struct context {
    void *sp;
};
extern "C" void emu_switch(void **save, void *to) EMU_INTERNAL;
asm(".text\n"
    ".p2align 4\n"
    ".globl emu_switch\n"
    ".hidden emu_switch\n"
    ".type emu_switch,@function\n"
    "emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size emu_switch, .-emu_switch\n"
    ".p2align 4\n"
    ".globl emu_fiber_start\n"
    ".hidden emu_fiber_start\n"
    ".type emu_fiber_start,@function\n"
    "emu_fiber_start:\n"
    "  movq %r12, %rdi\n  call *%r13\n  ud2\n"
    ".size emu_fiber_start, .-emu_fiber_start\n");
extern "C" void emu_fiber_start() EMU_INTERNAL;

void context_init(context *c, char *stack, size_t size, void (*fn)(void *), void *arg)
{
    /* saved: r15 r14 r13 r12 rbx rbp, then the return address; emu_fiber_start's call then sees the
     * stack 16-byte aligned */
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72);
    memset(sp, 0, 72);
    sp[2] = (uint64_t)(uintptr_t)fn;  /* r13 */
    sp[3] = (uint64_t)(uintptr_t)arg; /* r12 */
    sp[6] = (uint64_t)(uintptr_t)emu_fiber_start;
    c->sp = sp;
}
inline void context_switch(context *from, context *to) { emu_switch(&from->sp, to->sp); }
#else
struct context {
    ucontext_t uc;
};
void (*start_fn)(void *);
void start_trampoline(int hi, int lo)
{
    start_fn((void *)(((uintptr_t)(unsigned)hi << 32) | (unsigned)lo));
}
void context_init(context *c, char *stack, size_t size, void (*fn)(void *), void *arg)
{
    getcontext(&c->uc);
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    start_fn = fn;
    uintptr_t a = (uintptr_t)arg;
    makecontext(&c->uc, (void (*)())start_trampoline, 2, (int)(a >> 32), (int)(a & 0xffffffffu));
}
inline void context_switch(context *from, context *to) { swapcontext(&from->uc, &to->uc); }
#endif

enum { RUN, WAIT_BAR, WAIT_WARP, DONE };
enum { OP_MMA = 100 };

struct cp_copy {
    unsigned char *dst;
    const void *src;
};

struct fiber {
    emu_ids ids;
    context ctx;
    int state;
    const char *wfile, *wwhat; // where it waits
    int wline;
    int kind;                  // warp operation
    unsigned mask;
    unsigned long long value, result;
    int src, pred;
    unsigned mma_a[4], mma_b[2];
    float mma_c[4], *mma_d;
    int mma_kind;
    std::vector<cp_copy> open;               // cp.async not yet committed
    std::vector<std::vector<cp_copy>> groups; // committed groups, oldest first
};

struct warp_state {
    unsigned exist, arrived, exited;
};

const size_t GUARD = 64;      // bytes after the dynamic shared memory, checked after each block
const size_t MAX_THREADS = 1024;

struct run_state {
    const emu_grid *g;
    const emu_kernel_def *k;
    unsigned nthreads;
    fiber *fibers;
    warp_state warps[32];
    int bar_arrived, bar_result;
    unsigned char *dyn;
    size_t dyn_size;
    std::vector<unsigned> order;
    fiber *cur;
    unsigned pos; /* cur's index in order */
    context sched;
    int failed, code;
    char *msg;
    size_t cap;
    volatile sig_atomic_t in_kernel;
} R;

/* fiber stacks, kept between grids: mapped once, a guard page below each */
size_t stack_bytes, page;
char *stacks[MAX_THREADS];
fiber *fiber_pool;

unsigned long long clock_counter;
unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
int thread_order; /* 0 forward, 1 reverse, 2 shuffled per block */

unsigned long long rnd()
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

std::map<std::string, const emu_kernel_def *> &registry()
{
    static std::map<std::string, const emu_kernel_def *> r;
    return r;
}

void configure()
{
    static int done;
    if (done)
        return;
    done = 1;
    page = (size_t)sysconf(_SC_PAGESIZE);
    const char *s = getenv("DSKIT_EMU_STACK_KB");
    stack_bytes = (size_t)(s ? atoi(s) : 128) << 10;
    if (stack_bytes < 16384)
        stack_bytes = 16384;
    stack_bytes = (stack_bytes + page - 1) / page * page;
    const char *o = getenv("DSKIT_EMU_ORDER");
    thread_order = o && !strcmp(o, "reverse") ? 1 : o && !strcmp(o, "shuffle") ? 2 : 0;
    const char *seed = getenv("DSKIT_EMU_SEED");
    if (seed)
        rng_state = strtoull(seed, nullptr, 0) * 0x9e3779b97f4a7c15ull | 1;
    fiber_pool = new fiber[MAX_THREADS];
}

char *stack_of(unsigned t)
{
    if (!stacks[t]) {
        char *m = (char *)mmap(nullptr, stack_bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return nullptr;
        mprotect(m, page, PROT_NONE);
        stacks[t] = m;
    }
    return stacks[t];
}

/* ---- reports ---- */

void append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void append(const char *fmt, ...)
{
    size_t len = strlen(R.msg);
    if (len + 1 >= R.cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(R.msg + len, R.cap - len, fmt, ap);
    va_end(ap);
}

void report_head()
{
    snprintf(R.msg, R.cap, "kernel %s (%s), block (%u,%u,%u) of (%u,%u,%u): ", R.k->symbol, R.k->source,
             emu_block_idx.x, emu_block_idx.y, emu_block_idx.z, R.g->grid[0], R.g->grid[1], R.g->grid[2]);
}

std::string describe(const fiber &f)
{
    char b[320];
    if (f.state == DONE)
        return "exited";
    if (f.state == RUN)
        return "runnable";
    if (f.state == WAIT_BAR)
        snprintf(b, sizeof b, "wait at __syncthreads (%s:%d)", f.wfile, f.wline);
    else
        snprintf(b, sizeof b, "wait at %s (%s:%d) with mask 0x%08x", f.wwhat, f.wfile, f.wline, f.mask);
    return b;
}

/* "threads 0-31, 64-95: <what>; threads 32-63: <what>" over the threads in [first, first + n) */
void append_groups(unsigned first, unsigned n, const char *unit)
{
    std::vector<std::pair<std::string, std::string>> groups;
    unsigned t = first;
    while (t < first + n) {
        std::string d = describe(R.fibers[t]);
        unsigned e = t;
        while (e + 1 < first + n && describe(R.fibers[e + 1]) == d)
            e++;
        char r[48];
        if (e == t)
            snprintf(r, sizeof r, "%u", t - first);
        else
            snprintf(r, sizeof r, "%u-%u", t - first, e - first);
        size_t i = 0;
        while (i < groups.size() && groups[i].first != d)
            i++;
        if (i == groups.size())
            groups.push_back({d, r});
        else
            groups[i].second += std::string(", ") + r;
        t = e + 1;
    }
    for (size_t i = 0; i < groups.size(); i++)
        append("%s%s %s: %s", i ? "; " : "", unit, groups[i].second.c_str(), groups[i].first.c_str());
}

[[noreturn]] void stop_in_fiber(int code)
{
    R.failed = 1;
    R.code = code;
    context_switch(&R.cur->ctx, &R.sched);
    __builtin_unreachable();
}

/* Leave the running fiber for the next runnable one of this pass (in order), or for the scheduler at
 * the end of the pass. Whoever resumes a fiber sets R.cur to it. */
void leave(fiber &me)
{
    for (unsigned i = R.pos + 1; i < R.nthreads; i++) {
        fiber &n = R.fibers[R.order[i]];
        if (n.state == RUN) {
            R.pos = i;
            R.cur = &n;
            emu_cur = &n.ids;
            context_switch(&me.ctx, &n.ctx);
            return;
        }
    }
    context_switch(&me.ctx, &R.sched);
}

void wait_here()
{
    leave(*R.cur);
}

/* ---- the mma: PTX ISA mma.m16n8k16, f16 or bf16 A/B, f32 C/D; g = lane/4, t = lane%4:
 *   A register j of lane l: A[g + 8(j&1)][2t + 8(j>>1) + h], h = 0 low half, 1 high half
 *   B register j of lane l: B[2t + 8j + h][g]
 *   C/D element i of lane l: D[g + 8(i>>1)][2t + (i&1)]
 * Each output is c plus its 16 products (exact in double), rounded once to fp32: a model of the
 * tensor core, whose own internal rounding is not documented. */
float half_bits(unsigned h, int kind)
{
    h &= 0xffff;
    if (kind == EMU_MMA_BF16)
        return __uint_as_float(h << 16);
    return f16_to_f32((uint16_t)h);
}

void mma_complete(unsigned base)
{
    float A[16][16], B[16][8];
    int kind = R.fibers[base].mma_kind;
    for (int l = 0; l < 32; l++) {
        const fiber &f = R.fibers[base + l];
        if (f.mma_kind != kind) {
            report_head();
            append("warp %u: an f16 and a bf16 mma meet (lane %d)", f.ids.warp, l);
            stop_in_fiber(CUDA_ERROR_LAUNCH_FAILED);
        }
        int g = l / 4, t = l % 4;
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++)
                A[g + 8 * (j & 1)][2 * t + 8 * (j >> 1) + h] = half_bits(f.mma_a[j] >> (16 * h), kind);
        for (int j = 0; j < 2; j++)
            for (int h = 0; h < 2; h++)
                B[2 * t + 8 * j + h][g] = half_bits(f.mma_b[j] >> (16 * h), kind);
    }
    for (int l = 0; l < 32; l++) {
        fiber &f = R.fibers[base + l];
        int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; i++) {
            int r = g + 8 * (i >> 1), c = 2 * t + (i & 1);
            double s = f.mma_c[i];
            for (int k = 0; k < 16; k++)
                s += (double)A[r][k] * (double)B[k][c];
            f.mma_d[i] = (float)s;
        }
    }
}

/* every lane of mask has arrived with this mask: compute each lane's result */
void warp_complete(unsigned w, unsigned mask)
{
    unsigned base = w * 32;
    fiber &me = *R.cur;
    for (int l = 0; l < 32; l++)
        if ((mask >> l & 1) && R.fibers[base + l].kind != me.kind) {
            report_head();
            append("warp %u: lanes meet at different warp operations: ", w);
            append_groups(base, 32, "lanes");
            stop_in_fiber(CUDA_ERROR_LAUNCH_FAILED);
        }
    unsigned ballot = 0;
    unsigned long long acc = 0;
    int first = 1;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1))
            continue;
        const fiber &f = R.fibers[base + l];
        unsigned v = (unsigned)f.value;
        ballot |= (f.value != 0) << l;
        switch (me.kind) {
        case EMU_OP_REDUCE_ADD: acc = first ? v : (unsigned)(acc + v); break;
        case EMU_OP_REDUCE_MIN_U: acc = first || v < (unsigned)acc ? v : acc; break;
        case EMU_OP_REDUCE_MAX_U: acc = first || v > (unsigned)acc ? v : acc; break;
        case EMU_OP_REDUCE_MIN_I: acc = first || (int)v < (int)(unsigned)acc ? v : acc; break;
        case EMU_OP_REDUCE_MAX_I: acc = first || (int)v > (int)(unsigned)acc ? v : acc; break;
        case EMU_OP_REDUCE_AND: acc = first ? v : (acc & v); break;
        case EMU_OP_REDUCE_OR: acc = first ? v : (acc | v); break;
        case EMU_OP_REDUCE_XOR: acc = first ? v : (acc ^ v); break;
        default: break;
        }
        first = 0;
    }
    if (me.kind == OP_MMA) {
        if (mask != 0xffffffffu) {
            report_head();
            append("warp %u: mma.sync needs all 32 lanes of the warp (the block has %u threads)", w, R.nthreads);
            stop_in_fiber(CUDA_ERROR_LAUNCH_FAILED);
        }
        mma_complete(base);
    }
    int all_equal = 1;
    for (int l = 0; l < 32; l++) {
        if (!(mask >> l & 1))
            continue;
        fiber &f = R.fibers[base + l];
        switch (me.kind) {
        case EMU_OP_SHFL:
            f.result = f.src >= 0 && f.src < 32 && (mask >> f.src & 1) ? R.fibers[base + f.src].value : f.value;
            break;
        case EMU_OP_BALLOT: f.result = ballot; break;
        case EMU_OP_MATCH_ANY:
        case EMU_OP_MATCH_ALL: {
            unsigned m = 0;
            for (int o = 0; o < 32; o++)
                if ((mask >> o & 1) && R.fibers[base + o].value == f.value)
                    m |= 1u << o;
            all_equal &= m == mask;
            f.result = m;
            break;
        }
        default: f.result = acc; break;
        }
    }
    if (me.kind == EMU_OP_MATCH_ALL)
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1)
                R.fibers[base + l].result = all_equal ? (1ull << 32 | mask) : 0;
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1)
            R.fibers[base + l].state = RUN;
    R.warps[w].arrived &= ~mask;
}

unsigned long long warp_op(int kind, unsigned mask, unsigned long long value, int src, const char *what,
                           const char *file, int line)
{
    fiber &f = *R.cur;
    unsigned w = f.ids.warp, lane = f.ids.lane;
    warp_state &ws = R.warps[w];
    mask &= ws.exist;
    if (!(mask >> lane & 1))
        emu_fail("%s (%s:%d) with mask 0x%08x, which leaves out the calling lane %u", what, file, line, mask, lane);
    f.kind = kind, f.mask = mask, f.value = value, f.src = src;
    f.wwhat = what, f.wfile = file, f.wline = line;
    f.state = WAIT_WARP;
    ws.arrived |= 1u << lane;
    int complete = (ws.arrived & mask) == mask;
    for (int l = 0; l < 32 && complete; l++)
        if (mask >> l & 1)
            complete = R.fibers[w * 32 + l].mask == mask;
    if (complete)
        warp_complete(w, mask);
    else
        wait_here();
    return f.result;
}

/* ---- one block ---- */

extern "C" void emu_fiber_main(void *arg)
{
    fiber *f = (fiber *)arg;
    R.k->entry(R.g->args);
    for (auto &grp : f->groups) /* copies still in flight land when the thread is gone */
        for (auto &c : grp)
            memcpy(c.dst, c.src, 16);
    f->groups.clear();
    f->state = DONE;
    R.warps[f->ids.warp].exited |= 1u << f->ids.lane;
    leave(*f);
    abort(); /* never resumed */
}

int run_block()
{
    const unsigned n = R.nthreads;
    if (R.k->smem_end > R.k->smem_begin)
        memset(R.k->smem_begin, 0xCD, (size_t)(R.k->smem_end - R.k->smem_begin)); /* shared memory starts as garbage */
    memset(R.dyn, 0xCD, R.dyn_size);
    for (size_t i = 0; i < GUARD; i++)
        R.dyn[R.dyn_size + i] = (unsigned char)(0x5A + 37 * i);
    R.bar_arrived = 0;
    for (unsigned w = 0; w < (n + 31) / 32; w++) {
        unsigned lanes = n - w * 32 < 32 ? n - w * 32 : 32;
        R.warps[w].exist = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        R.warps[w].arrived = R.warps[w].exited = 0;
    }
    for (unsigned t = 0; t < n; t++) {
        fiber &f = R.fibers[t];
        unsigned bx = R.g->block[0], by = R.g->block[1];
        f.ids.tid = make_uint3(t % bx, (t / bx) % by, t / (bx * by));
        f.ids.linear = t, f.ids.lane = t & 31, f.ids.warp = t >> 5;
        f.state = RUN;
        f.mask = 0;
        f.open.clear();
        f.groups.clear();
        char *stack = stack_of(t);
        if (!stack) {
            report_head();
            append("cannot map a stack for thread %u", t);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        /* stack tops 64 bytes apart modulo a page, or every fiber's frames fall into the same L1 sets */
        context_init(&f.ctx, stack + page, stack_bytes - 64 * (t % 64), emu_fiber_main, &f);
    }
    if (thread_order == 2)
        for (unsigned i = n; i > 1; i--)
            std::swap(R.order[i - 1], R.order[rnd() % i]);
    /* passes over the threads in order: each runs until it waits or exits, then hands over to the next
     * runnable one; the pass ends back here */
    for (;;) {
        unsigned i = 0;
        while (i < n && R.fibers[R.order[i]].state != RUN)
            i++;
        if (i == n) {
            unsigned alive = 0;
            for (unsigned t = 0; t < n; t++)
                alive += R.fibers[t].state != DONE;
            if (!alive)
                break;
            report_head();
            append("deadlock, no thread can go on: ");
            append_groups(0, n, "threads");
            return CUDA_ERROR_LAUNCH_FAILED;
        }
        R.pos = i;
        R.cur = &R.fibers[R.order[i]];
        emu_cur = &R.cur->ids;
        context_switch(&R.sched, &R.cur->ctx);
        if (R.failed)
            return R.code;
    }
    for (size_t i = 0; i < GUARD; i++)
        if (R.dyn[R.dyn_size + i] != (unsigned char)(0x5A + 37 * i)) {
            report_head();
            append("wrote past the end of its %zu bytes of dynamic shared memory", R.dyn_size);
            return CUDA_ERROR_LAUNCH_FAILED;
        }
    return 0;
}

/* ---- a SIGSEGV or SIGBUS inside a kernel names it ---- */
struct sigaction old_segv, old_bus;

void on_fault(int sig, siginfo_t *si, void *)
{
    if (R.in_kernel && R.cur) {
        char b[512];
        uintptr_t a = (uintptr_t)si->si_addr;
        unsigned t = R.cur->ids.linear;
        int overflow = stacks[t] && a >= (uintptr_t)stacks[t] && a < (uintptr_t)stacks[t] + page;
        int len = snprintf(b, sizeof b,
                           "dskit-emu: %s at address %p in kernel %s (%s), block (%u,%u,%u), thread %u%s\n",
                           sig == SIGSEGV ? "segmentation fault" : "bus error", si->si_addr, R.k->symbol,
                           R.k->source, emu_block_idx.x, emu_block_idx.y, emu_block_idx.z, t,
                           overflow ? ": the thread's stack overflowed (DSKIT_EMU_STACK_KB)" : "");
        if (len > 0 && write(2, b, (size_t)len) < 0)
            len = 0;
    }
    sigaction(sig, sig == SIGSEGV ? &old_segv : &old_bus, nullptr); /* the fault repeats under the old handler */
}

void install_fault_handler()
{
    static int done;
    if (done)
        return;
    done = 1;
    static char altstack[1 << 16];
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
}

/* the shared-memory window of a cp.async address: dynamic memory at 0, static at 0x80000000 */
unsigned char *smem_ptr(unsigned a, size_t n)
{
    if (a & 0x80000000u) {
        size_t off = a & 0x7fffffffu, size = (size_t)(R.k->smem_end - R.k->smem_begin);
        if (off + n <= size)
            return R.k->smem_begin + off;
    } else if ((size_t)a + n <= R.dyn_size)
        return R.dyn + a;
    emu_fail("shared-memory address 0x%08x (+%zu bytes) is outside the block's shared memory", a, n);
}

} // namespace

/* ---- the device side's entry points (emu.h) ---- */

void emu_register_kernel(const emu_kernel_def *k)
{
    registry()[k->symbol] = k;
}

const emu_kernel_def *emu_find_kernel(const char *symbol)
{
    auto it = registry().find(symbol);
    return it == registry().end() ? nullptr : it->second;
}

void emu_fail(const char *fmt, ...)
{
    report_head();
    append("thread %u (%u,%u,%u): ", R.cur->ids.linear, R.cur->ids.tid.x, R.cur->ids.tid.y, R.cur->ids.tid.z);
    size_t len = strlen(R.msg);
    va_list ap;
    va_start(ap, fmt);
    if (len + 1 < R.cap)
        vsnprintf(R.msg + len, R.cap - len, fmt, ap);
    va_end(ap);
    stop_in_fiber(CUDA_ERROR_LAUNCH_FAILED);
}

int emu_barrier(int op, int pred, const char *file, int line)
{
    fiber &f = *R.cur;
    f.state = WAIT_BAR;
    f.wfile = file, f.wline = line, f.pred = pred != 0;
    if (++R.bar_arrived < (int)R.nthreads) {
        wait_here();
        return R.bar_result;
    }
    int count = 0;
    for (unsigned t = 0; t < R.nthreads; t++) {
        const fiber &o = R.fibers[t];
        if (o.wline != line || (o.wfile != file && strcmp(o.wfile, file))) {
            report_head();
            append("barrier mismatch, the threads wait at different __syncthreads: ");
            append_groups(0, R.nthreads, "threads");
            stop_in_fiber(CUDA_ERROR_LAUNCH_FAILED);
        }
        count += o.pred;
    }
    R.bar_result = op == EMU_BAR_COUNT ? count : op == EMU_BAR_AND ? count == (int)R.nthreads : op == EMU_BAR_OR ? count > 0 : 0;
    R.bar_arrived = 0;
    for (unsigned t = 0; t < R.nthreads; t++)
        R.fibers[t].state = RUN;
    return R.bar_result;
}

unsigned long long emu_warp_op(int kind, unsigned mask, unsigned long long value, int src, const char *what,
                               const char *file, int line)
{
    return warp_op(kind, mask, value, src, what, file, line);
}

unsigned emu_active_mask()
{
    const warp_state &w = R.warps[R.cur->ids.warp];
    return w.exist & ~w.exited;
}

void emu_yield()
{
    wait_here();
}

unsigned long long emu_clock()
{
    return ++clock_counter;
}

unsigned char *emu_dynamic_smem()
{
    return R.dyn;
}

unsigned emu_smem_addr(const void *p)
{
    const unsigned char *c = (const unsigned char *)p;
    if (c >= R.dyn && c < R.dyn + R.dyn_size)
        return (unsigned)(c - R.dyn);
    if (c >= R.k->smem_begin && c < R.k->smem_end)
        return 0x80000000u | (unsigned)(c - R.k->smem_begin);
    emu_fail("dsk_smem_addr(%p): not a pointer into the block's shared memory", p);
}

void emu_cp_async16(unsigned saddr, const void *g)
{
    if (((uintptr_t)g & 15) || (saddr & 15))
        emu_fail("cp.async of 16 bytes from %p to shared 0x%08x: both must be 16-byte aligned", g, saddr);
    R.cur->open.push_back({smem_ptr(saddr, 16), g});
}

void emu_cp_async_commit()
{
    fiber &f = *R.cur;
    f.groups.push_back(f.open);
    f.open.clear();
}

void emu_cp_async_wait(int n)
{
    fiber &f = *R.cur;
    while ((int)f.groups.size() > n) {
        for (auto &c : f.groups.front())
            memcpy(c.dst, c.src, 16);
        f.groups.erase(f.groups.begin());
    }
}

void emu_mma_16816(int kind, float d[4], const unsigned a[4], unsigned b0, unsigned b1)
{
    fiber &f = *R.cur;
    memcpy(f.mma_a, a, sizeof f.mma_a);
    f.mma_b[0] = b0, f.mma_b[1] = b1;
    memcpy(f.mma_c, d, sizeof f.mma_c);
    f.mma_d = d;
    f.mma_kind = kind;
    warp_op(OP_MMA, 0xffffffffu, 0, 0, kind == EMU_MMA_BF16 ? "mma.sync m16n8k16 bf16" : "mma.sync m16n8k16 f16",
            "kit/src/dsk_mma.cuh", 0);
}

int emu_run_grid(const emu_grid *g, char *msg, size_t cap)
{
    configure();
    install_fault_handler();
    unsigned n = g->block[0] * g->block[1] * g->block[2];
    unsigned long long blocks = (unsigned long long)g->grid[0] * g->grid[1] * g->grid[2];
    memset(&R.warps, 0, sizeof R.warps);
    R.g = g, R.k = g->k, R.nthreads = n, R.fibers = fiber_pool;
    R.failed = 0, R.code = 0, R.msg = msg, R.cap = cap, R.cur = nullptr;
    msg[0] = 0;
    R.dyn_size = g->dyn_smem;
    std::vector<unsigned char> dyn_buf(R.dyn_size + GUARD + 128);
    R.dyn = (unsigned char *)(((uintptr_t)dyn_buf.data() + 127) & ~(uintptr_t)127);
    R.order.resize(n);
    for (unsigned i = 0; i < n; i++)
        R.order[i] = thread_order == 1 ? n - 1 - i : i;
    emu_block_dim = dim3(g->block[0], g->block[1], g->block[2]);
    emu_grid_dim = dim3(g->grid[0], g->grid[1], g->grid[2]);
    /* blocks in a shuffled order: a kernel that relies on the order of its blocks shows */
    std::vector<unsigned> border(blocks);
    for (unsigned long long i = 0; i < blocks; i++)
        border[i] = (unsigned)i;
    for (unsigned long long i = blocks; i > 1; i--)
        std::swap(border[i - 1], border[rnd() % i]);
    int rc = 0;
    R.in_kernel = 1;
    for (unsigned long long i = 0; i < blocks && !rc; i++) {
        unsigned b = border[i];
        emu_block_idx = make_uint3(b % g->grid[0], (b / g->grid[0]) % g->grid[1], b / (g->grid[0] * g->grid[1]));
        rc = run_block();
    }
    R.in_kernel = 0;
    R.cur = nullptr;
    return rc;
}
