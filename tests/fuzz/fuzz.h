/* tests/fuzz/fuzz.h: what the fuzz targets share. Each target defines
 * LLVMFuzzerTestOneInput; built with clang -fsanitize=fuzzer it is a libFuzzer
 * binary (tools/fuzz.sh), built with replay.c it runs every file of a corpus
 * folder once (the ctest fuzz_*_replay tests, in the ASan build). The readers
 * take paths, so an input goes through a file of this process. */
#ifndef PR_FUZZ_H
#define PR_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* a folder for this process's files: $PRISM_FUZZ_TMP (tools/fuzz.sh makes
 * and removes it), else one of its own in /dev/shm or /tmp (made once) */
static inline const char *fuzz_dir(void)
{
    static char dir[256];
    const char *env = getenv("PRISM_FUZZ_TMP");
    if (!dir[0] && env && *env && strlen(env) < sizeof dir) snprintf(dir, sizeof dir, "%s", env);
    if (!dir[0]) {
        struct stat sb;
        const char *base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/prism_fuzz_%d", base, (int)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

/* the path of file `name` in fuzz_dir() (one static buffer per call site's name) */
static inline const char *fuzz_path(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", fuzz_dir(), name);
    return buf;
}

/* writes bytes to path; aborts when it cannot (the fuzzer's machine, not the input) */
static inline void fuzz_write(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* the input as a NUL-terminated string (caller frees) */
static inline char *fuzz_string(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#endif
