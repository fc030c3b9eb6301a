/* Linked into a program that must run on the kernel emulator (gpu_tests_emu, emu_selftest, any test
 * that wants it): before main, load the emulator (the file DSKIT_EMU_LIB names, else the build's
 * DSKIT_EMU_DEFAULT_LIB) and check it is the emulator. It is a library whose soname is libcuda.so.1, so
 * the runtime's dlopen("libcuda.so.1") gets it and fills the `cu` table from it: the program itself
 * does not change. A missing emulator stops the program (exit 2) instead of running on a real GPU. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef DSKIT_EMU_DEFAULT_LIB
#define DSKIT_EMU_DEFAULT_LIB "libcuda.so.1"
#endif

__attribute__((constructor)) static void emu_guard(void)
{
    const char *path = getenv("DSKIT_EMU_LIB");
    if (!path || !*path)
        path = DSKIT_EMU_DEFAULT_LIB;
    void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    const char *(*info)(void) = NULL;
    if (lib)
        *(void **)&info = dlsym(lib, "dskit_emu_info");
    if (!info) {
        fprintf(stderr,
                "this program runs on the kernel emulator, and %s is %s: build it with\n"
                "  cmake --build build --target emu   (or tests/emu/build_emu.py, docs/emulator.md)\n"
                "or point DSKIT_EMU_LIB at one\n",
                path, lib ? "not the emulator" : "missing");
        exit(2);
    }
}
