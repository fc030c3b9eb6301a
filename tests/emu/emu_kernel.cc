// One kernel variant for the emulator: this file is compiled once per variant with the -D definitions
// the builder gives NVRTC (dskit-build --list-defines) plus DSK_EMU_SOURCE, the kit source to include.
// It registers the variant under its kit symbol with a launch adapter deduced from the kernel's own
// signature, its parameter ABI and its static shared memory (docs/emulator.md).
#include "tests/emu/emu.h"
#include "tests/emu/emu_launch.h"

#if !defined(DSK_SYMBOL) || !defined(DSK_EMU_SOURCE)
#error "compile with the variant's -D definitions and -DDSK_EMU_SOURCE=\"kit/src/FILE.cu\""
#endif

#define EMU_STR2(x) #x
#define EMU_STR(x) EMU_STR2(x)
#define EMU_CAT2(a, b) a##b
#define EMU_CAT(a, b) EMU_CAT2(a, b)

// Static shared memory: the variant's own section, so the scheduler can poison it before each block.
#define EMU_SMEM_SECTION "emush_" EMU_STR(DSK_SYMBOL)
#define __shared__ static __attribute__((section(EMU_SMEM_SECTION)))
static unsigned char emu_smem_anchor __attribute__((section(EMU_SMEM_SECTION), used));
extern "C" unsigned char EMU_CAT(__start_emush_, DSK_SYMBOL)[] __attribute__((visibility("hidden")));
extern "C" unsigned char EMU_CAT(__stop_emush_, DSK_SYMBOL)[] __attribute__((visibility("hidden")));

// Inline asm cannot run here: a kernel reaches such instructions through kit helpers with an emulator
// twin (dskit_kernel.cuh, dsk_mma.cuh).
#define asm DSK_EMU_inline_asm_needs_a_kit_helper_with_an_emulator_twin_see_docs_emulator_md
#define __asm__ DSK_EMU_inline_asm_needs_a_kit_helper_with_an_emulator_twin_see_docs_emulator_md

namespace { // each variant keeps its own copy of the family's helpers
#include DSK_EMU_SOURCE
}

#undef asm
#undef __asm__

namespace {
typedef emu_signature<decltype(&DSK_SYMBOL)> sig;
const emu_kernel_def def = {EMU_STR(DSK_SYMBOL),
                            DSK_EMU_SOURCE,
                            &sig::entry<&DSK_SYMBOL>,
                            sig::count,
                            sig::size,
                            sig::align,
                            EMU_CAT(__start_emush_, DSK_SYMBOL),
                            EMU_CAT(__stop_emush_, DSK_SYMBOL)};
struct registrar {
    registrar() { emu_register_kernel(&def); }
} reg;
} // namespace
