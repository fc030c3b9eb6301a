// Programmatic dependent launch for families marked "pdl" in kit/variants.json: wait until the grid
// before this one on the stream has finished and its writes are visible; let the grid after this one
// start its own prologue. Without the launch attribute both return at once. DSK_EMU (the CPU emulator)
// supplies twins: it runs launches one after another, so both are no-ops there.
#pragma once

#ifndef DSK_EMU
__device__ __forceinline__ void dsk_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void dsk_pdl_launch_dependents()
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#endif
