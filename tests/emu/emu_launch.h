// What a kernel variant registers with the emulator, the generic launch adapter that unpacks a
// driver-style argument array into the kernel's own parameter types, and how the stand-in driver
// (emu_driver.cc) asks the scheduler (emu_sched.cc) to run a grid.
#pragma once
#include <stddef.h>
#include <string.h>

#include <type_traits>
#include <utility>

#define EMU_INTERNAL __attribute__((visibility("hidden")))

// One kernel the emulator can run, registered by its translation unit (emu_kernel.cc).
struct emu_kernel_def {
    const char *symbol; // the kit symbol (DSK_SYMBOL)
    const char *source; // the kit source it was compiled from
    void (*entry)(void **args);
    int nparams;
    const unsigned short *param_size, *param_align; // the kernel's parameter ABI, from its signature
    unsigned char *smem_begin, *smem_end;            // its static __shared__ variables
};

EMU_INTERNAL void emu_register_kernel(const emu_kernel_def *k);
EMU_INTERNAL const emu_kernel_def *emu_find_kernel(const char *symbol);

// Every parameter arrives as a pointer to its value, as cuLaunchKernel's kernelParams: device
// pointers as 8-byte addresses (host addresses here), scalars as themselves. A copy of the bytes
// gives the value for every trivially copyable type, pointers included.
template <class T> static inline T emu_unpack(void *p)
{
    static_assert(std::is_trivially_copyable<T>::value, "kernel parameters must be trivially copyable");
    T v;
    memcpy(&v, p, sizeof v);
    return v;
}

template <class F> struct emu_signature;
template <class... P> struct emu_signature<void (*)(P...)> {
    static constexpr int count = (int)sizeof...(P);
    static constexpr unsigned short size[sizeof...(P) + 1] = {(unsigned short)sizeof(P)..., 0};
    static constexpr unsigned short align[sizeof...(P) + 1] = {(unsigned short)alignof(P)..., 0};
    template <void (*K)(P...), size_t... I> static void call(void **a, std::index_sequence<I...>)
    {
        K(emu_unpack<P>(a[I])...);
        (void)a;
    }
    template <void (*K)(P...)> static void entry(void **a) { call<K>(a, std::index_sequence_for<P...>{}); }
};

// One grid for the scheduler.
struct emu_grid {
    const emu_kernel_def *k;
    unsigned grid[3], block[3];
    unsigned dyn_smem; // dynamic shared memory bytes
    void **args;
};

// Run every block of the grid. Returns 0, or a CUresult with the report (naming the kernel, the block
// and the threads) in msg.
EMU_INTERNAL int emu_run_grid(const emu_grid *g, char *msg, size_t cap);
