/* tasks/text.c: byte-level language modelling data from any file.
 * The last tenth of the bytes validates; training windows start at drawn
 * offsets (Philox stream 0, counter = window index), so window j is the same
 * whatever came before it. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tasks/tasks.h"

int pr_text_load(pr_text *t, const char *path, int seq_len, uint64_t seed, pr_err *err)
{
    return pr_text_load_max(t, path, seq_len, seed, PR_TEXT_MAX_BYTES, err);
}

int pr_text_load_max(pr_text *t, const char *path, int seq_len, uint64_t seed, int64_t max_bytes, pr_err *err)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > max_bytes) {   /* known before reading */
        fclose(f);
        return pr_errf(err, "%s: %lld bytes, over the limit of %lld for lm data", path, (long long)sb.st_size,
                       (long long)max_bytes);
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    bool over = false;   /* a device or a pipe (/dev/zero) stops at the limit */
    for (size_t got; b && !over && (got = fread(b + n, 1, cap - n, f)) > 0;) {
        n += got;
        over = (int64_t)n > max_bytes;
        if (n == cap && !over) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    if (over) {
        fclose(f);
        free(b);
        return pr_errf(err, "%s: more than %lld bytes, the limit for lm data", path, (long long)max_bytes);
    }
    int bad = ferror(f);
    fclose(f);
    if (!b) return pr_errf(err, "%s: out of memory reading it", path);
    if (bad) {
        free(b);
        return pr_errf(err, "%s: read error", path);
    }
    int64_t val = (int64_t)n / 10, need = seq_len + 1;
    if (val < need || (int64_t)n - val < need) {
        free(b);
        return pr_errf(err, "%s: %zu bytes is too short for seq_len %d (needs %lld: a tenth of it validates and "
                            "each split must hold one window of seq_len + 1)",
                       path, n, seq_len, (long long)(10 * need));
    }
    *t = (pr_text){.bytes = b, .n = (int64_t)n, .n_train = (int64_t)n - val, .seq_len = seq_len, .seed = seed};
    return 0;
}

void pr_text_free(pr_text *t)
{
    free(t->bytes);
    t->bytes = NULL;
}

int64_t pr_text_val_windows(const pr_text *t) { return (t->n - t->n_train - 1) / t->seq_len; }

void pr_text_window(const pr_text *t, int split, int64_t index, int32_t *ids, int32_t *targets)
{
    int64_t start;
    if (split == 0) {
        int64_t span = t->n_train - t->seq_len;   /* starts whose window and next byte stay in training */
        start = (int64_t)(pr_philox_uniform(t->seed, 0, (uint64_t)index) * (double)span);
        if (start >= span) start = span - 1;
    } else {
        start = t->n_train + (index % pr_text_val_windows(t)) * t->seq_len;
    }
    for (int i = 0; i < t->seq_len; i++) {
        ids[i] = t->bytes[start + i];
        targets[i] = t->bytes[start + i + 1];
    }
}
