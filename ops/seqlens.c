/* ops/seqlens.c: reading and checking cu_seqlens (see ops/seqlens.h). */
#include "ops/seqlens.h"

#include <stdlib.h>

static int64_t *seq_alloc(const char *op, int64_t n)
{
    int64_t *s = malloc((size_t)n * sizeof *s);
    PR_CHECK(s, "%s: out of host memory", op);
    return s;
}

int64_t pr_seqlens_read(const char *op, const pr_tensor *cu, int64_t B, int64_t T, int64_t **out)
{
    if (!cu) {
        int64_t *s = seq_alloc(op, B + 1);
        for (int64_t b = 0; b <= B; b++) s[b] = b * T;
        *out = s;
        return B;
    }
    PR_CHECK(cu->dtype == PR_I32 || cu->dtype == PR_I64, "%s: cu_seqlens must be int32 or int64, got %s", op,
             pr_dtype_name(cu->dtype));
    PR_CHECK(cu->ndim == 1 && cu->numel >= 2, "%s: cu_seqlens must be 1-D with N+1 >= 2 offsets", op);
    PR_CHECK(B == 1, "%s: cu_seqlens needs B = 1 (sequences packed along T), got B = %lld", op, (long long)B);
    const int64_t n = cu->numel;
    double *h = malloc((size_t)n * sizeof *h);
    PR_CHECK(h, "%s: out of host memory", op);
    pr_to_host_f64(cu, h);
    int64_t *s = seq_alloc(op, n);
    for (int64_t i = 0; i < n; i++) s[i] = (int64_t)h[i];
    free(h);
    for (int64_t i = 0; i + 1 < n; i++)
        if (s[i + 1] <= s[i]) {
            const long long a = (long long)s[i], b = (long long)s[i + 1];
            free(s);
            pr_fatal("%s: cu_seqlens must be strictly increasing (cu_seqlens[%lld]=%lld, cu_seqlens[%lld]=%lld)",
                     op, (long long)i, a, (long long)i + 1, b);
        }
    if (s[0] != 0 || s[n - 1] != T) {
        const long long a = (long long)s[0], b = (long long)s[n - 1];
        free(s);
        pr_fatal("%s: cu_seqlens must start at 0 and end at T=%lld (got %lld ... %lld)", op, (long long)T, a, b);
    }
    *out = s;
    return n - 1;
}
