/* CPU reference operations: filled in by the kit issue. */
typedef int dsk_ref_placeholder;
