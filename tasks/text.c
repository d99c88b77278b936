/* tasks/text.c: byte-level language modelling data from any file.
 * The last tenth of the bytes validates; training windows start at drawn
 * offsets (Philox stream 0, counter = window index), so window j is the same
 * whatever came before it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tasks/tasks.h"

int pr_text_load(pr_text *t, const char *path, int seq_len, uint64_t seed, pr_err *err)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
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
