/* tests/fuzz/fuzz_data.c: the data loaders. The first byte picks the Amazon
 * or Yelp format (or detection) and whether bad lines are skipped; the rest
 * is the file. The same bytes go to the lm text loader. Whatever loads is
 * checked as training would check it, its arrays are walked, and what passes
 * the check is cut into a training and the evaluation batches. */
#include "tasks/rec.h"
#include "tasks/tasks.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    char path[512];
    fuzz_write(fuzz_path("data", path, sizeof path), data + 1, size - 1);
    pr_rec_format fmt = (pr_rec_format)(data[0] % 5);
    pr_rec_load_opts o = {.filter = {.min_item = 1 + (data[0] >> 3 & 1), .min_user = 1 + (data[0] >> 4 & 3),
                                     .iterate = data[0] >> 6 & 1},
                          .skip_bad = data[0] >> 7, .max_line = 4096, .max_bytes = 1 << 20};
    pr_rec_data d;
    pr_err err;
    if (pr_rec_load(path, fmt, o, &d, NULL, &err) == 0) {
        int64_t sum = 0;
        for (int u = 0; u < d.n_users; u++)
            for (int64_t i = d.start[u]; i < d.start[u + 1]; i++) {
                if (d.items[i] < 1 || d.items[i] > d.n_items) abort();   /* ids 1..n_items */
                sum += d.items[i];
            }
        if (d.start[d.n_users] != d.n_interactions) abort();
        if (pr_rec_check_trainable(&d, "fuzz", &err) == 0) {   /* then the batches training builds from it */
            enum { B = 2, T = 4 };
            int64_t users[B] = {0, d.n_users - 1}, in[B * T], out[B * T], target[B];
            pr_rec_train_batch(&d, users, B, T, in, out);
            pr_rec_eval_batch(&d, PR_REC_VALID, users, B, T, in, target);
            pr_rec_eval_batch(&d, PR_REC_TEST, users, B, T, in, target);
        }
        pr_rec_data_free(&d);
        (void)sum;
    }
    pr_text t;
    if (pr_text_load_max(&t, path, 1 + data[0] % 8, 1, 1 << 20, &err) == 0) {
        int32_t ids[8], next[8];
        pr_text_window(&t, 0, 3, ids, next);
        pr_text_window(&t, 1, 5, ids, next);
        pr_text_free(&t);
    }
    return 0;
}
