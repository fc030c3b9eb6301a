// One kernel variant for the emulator: compiled once per (family, parameters) with the same -D values the
// builder gives NVRTC, registered under its kit symbol.
#include "tests/emu/emu.h"

#define PTR(T, i) ((T)(uintptr_t)(*(unsigned long long *)a[i]))
#define I32(i) (*(int *)a[i])
#define I64(i) (*(long long *)a[i])

#if defined(EMU_FAMILY_MM)
namespace { /* each variant keeps its own copy of the kernel's helpers */
#include "kit/src/exl3_mm.cu"
}
static void adapter(void **a)
{
    DSK_SYMBOL(PTR(const exl3_desc *, 0), PTR(const exl3_desc *, 1), PTR(const exl3_desc *, 2),
               PTR(const exl3_desc *, 3), PTR(const u16 *, 4), PTR(void *, 5), PTR(float *, 6), PTR(u32 *, 7),
               PTR(u32 *, 8), PTR(const int *, 9), PTR(u16 *, 10), PTR(const float *, 11), I32(12), I32(13), I32(14),
               I32(15), I32(16), I32(17), I32(18), I32(19), I64(20));
}
#elif defined(EMU_FAMILY_HAD)
namespace { /* each variant keeps its own copy of the kernel's helpers */
#include "kit/src/exl3_had.cu"
}
static void adapter(void **a)
{
    DSK_SYMBOL(PTR(const exl3_desc *, 0), PTR(const exl3_desc *, 1), PTR(const exl3_desc *, 2),
               PTR(const exl3_desc *, 3), PTR(const u16 *, 4), I32(5), I32(6), PTR(u32 *, 7), I64(8));
}
#elif defined(EMU_FAMILY_PLAN)
namespace { /* each variant keeps its own copy of the kernel's helpers */
#include "kit/src/exl3_plan.cu"
}
static void adapter(void **a)
{
    DSK_SYMBOL(PTR(const int *, 0), I32(1), I32(2), I32(3), I32(4), I32(5), I32(6), PTR(int *, 7), PTR(float *, 8),
               I32(9), I32(10));
}
#elif defined(EMU_FAMILY_RECON)
namespace { /* each variant keeps its own copy of the kernel's helpers */
#include "kit/src/exl3_recon.cu"
}
static void adapter(void **a)
{
    DSK_SYMBOL(PTR(const exl3_desc *, 0), PTR(void *, 1), I32(2));
}
#else
#error "define EMU_FAMILY_MM, _HAD, _PLAN or _RECON"
#endif

#define EMU_STR2(x) #x
#define EMU_STR(x) EMU_STR2(x)
static emu_reg reg(EMU_STR(DSK_SYMBOL), adapter);
