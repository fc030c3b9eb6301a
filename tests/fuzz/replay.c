/* Replays files through a fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so normal builds (and
 * CI) run every committed corpus: `replay_<target> FILE_OR_FOLDER...`. A target that finds a problem
 * aborts, which fails the test. */
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    char *data;
    size_t len;
    if (dsk_read_file(path, &data, &len)) {
        fprintf(stderr, "replay: %s\n", dsk_err_msg());
        return -1;
    }
    /* a copy of exactly len bytes: ASan sees a read past the input as libFuzzer would */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(data);
        return -1;
    }
    memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: cannot stat %s\n", argv[i]);
            return 2;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i]))
                return 2;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "replay: cannot open folder %s\n", argv[i]);
            return 2;
        }
        char **names = NULL;
        size_t n = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                char **grown = realloc(names, cap * sizeof *names);
                if (!grown)
                    return 2;
                names = grown;
            }
            size_t l = strlen(argv[i]) + strlen(e->d_name) + 2;
            if (!(names[n] = malloc(l)))
                return 2;
            snprintf(names[n++], l, "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp_str); /* the same order on every machine */
        for (size_t k = 0; k < n; k++) {
            if (replay_file(names[k]))
                return 2;
            free(names[k]);
            files++;
        }
        free(names);
    }
    printf("replayed %d inputs\n", files);
    return files ? 0 : 2;
}
