/* tests/fuzz/replay.c: runs a fuzz target once on every file of the folders
 * (or files) named on the command line: the seed corpus and the regression
 * inputs of tests/fuzz/corpus/TARGET, in the ordinary (gcc, ASan + UBSan)
 * test build. A crash is the sanitizer's report and a non-zero exit; an
 * empty folder fails, since a replay of nothing checks nothing. */
#include <dirent.h>

#include "tests/fuzz/fuzz.h"

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return perror(path), -1;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;)
        if ((n += got) == cap) buf = realloc(buf, cap *= 2);
    fclose(f);
    if (!buf) return fprintf(stderr, "%s: out of memory\n", path), -1;
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) {
            if (replay_file(argv[i])) return 1;
            files++;
            continue;
        }
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (replay_file(path)) return 1;
            files++;
        }
        closedir(d);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir());
    if (!getenv("PRISM_FUZZ_TMP") && system(cmd) != 0) return 1;
    printf("replayed %d inputs\n", files);
    return files ? 0 : 1;
}
