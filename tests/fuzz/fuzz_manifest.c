/* manifest.json on any bytes: a bad manifest is an error, never a crash; a good one serialises to
 * canonical JSON that parses back to the same bytes again; and the verifier's manifest checks run on it
 * (as a kit of manifest.json alone, its root made right). */
#include "manifest/archive.h"
#include "manifest/manifest.h"
#include "tests/fuzz/fuzz_common.h"
#include "manifest/kitcheck.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    manifest m;
    if (manifest_parse((const char *)data, size, &m) == 0) {
        char *text = manifest_serialize(&m);
        FUZZ_CHECK(text);
        manifest again;
        FUZZ_CHECK(manifest_parse(text, strlen(text), &again) == 0);
        char *text2 = manifest_serialize(&again);
        FUZZ_CHECK(text2 && !strcmp(text, text2));
        free(text2);
        manifest_free(&again);
        free(text);
        manifest_free(&m);
    }
    kit_entries a = {0};
    char root[33];
    dsk_xxh128_hex(data, size, root);
    FUZZ_CHECK(kit_entries_add(&a, "manifest.json", data, size) == 0);
    FUZZ_CHECK(kit_entries_add(&a, "manifest.xxh128", root, 32) == 0);
    verify_report r;
    FUZZ_CHECK(kit_verify_entries(&a, root, NULL, &r) == 0);
    verify_report_free(&r);
    kit_entries_free(&a);
    return 0;
}
