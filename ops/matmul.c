/* ops/matmul.c: op(a) @ op(b) on the CPU, 2-D and batched.
 *
 * Every product goes through one row-major gemm, pr_gemm_cpu: cblas (OpenBLAS)
 * when the build defines PRISM_HAVE_BLAS, else a plain blocked loop that is
 * correct for any sizes. pr_matmul_set_blas(false) forces the loop even in a
 * BLAS build, so tests can check one against the other.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "ops/ops.h"

#ifdef PRISM_HAVE_BLAS
#include <cblas.h>
#endif

/* internal: used by the tests and by other CPU ops that need a gemm */
bool pr_matmul_set_blas(bool on);
void pr_gemm_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                 const void *B, void *C, double beta);
void pr_gemm_fallback_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          const void *A, const void *B, void *C, double beta);
/* pr_gemm_cpu with row strides (lda, ldb, ldc as BLAS takes them) */
void pr_gemm_ld_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                    const void *B, int64_t ldb, void *C, int64_t ldc, double beta);

/* a test's switch; atomic, as worker threads read it while they train */
static atomic_bool use_blas = true;

/* OpenBLAS's threads for the products worth them; the rest on the calling
 * thread. Its own cut (a few million multiply-adds) lets the products of a
 * small model, each well under a millisecond, start its pool, whose threads
 * then spin in sched_yield for a while after every product, taking a core
 * from the OpenMP team and from the single-threaded ops in between: on two
 * cores the D = 16 parity probe trained at 0.6x the speed it reaches with
 * products on one thread. (Inside the recurrence's OpenMP team every product
 * runs on one thread anyway: pr_blas_serial_enter below.) The cut, 2^30
 * multiply-adds (about 20 ms on one core), is where a second thread paid
 * (2x) on the shared 2-core machine; below it the pool's spinning after
 * each product cost more than the split gained (the D = 128 mqar probe,
 * whose MLP products are 2^27 to 2^28, on the machine loaded by others:
 * 5.7-7.1k tok/s with the cut at 2^27, 6.5-7.4k at 2^30, 7.3-7.6k with no
 * product threaded). */
static atomic_int blas_threads;   /* 0: not read yet; else the configured count */
static atomic_int serial_depth;   /* callers inside pr_blas_serial_enter .. _leave: one thread meanwhile */

#ifdef PRISM_HAVE_BLAS
static int configured_threads(void)
{
    int n = atomic_load(&blas_threads);
    if (n == 0) {   /* OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, else the cores, as OpenBLAS read them */
        int expected = 0;
        atomic_compare_exchange_strong(&blas_threads, &expected, openblas_get_num_threads());
        n = atomic_load(&blas_threads);
    }
    return n;
}

#define PR_BLAS_THREADED_MACS ((double)(1 << 30))

static void pick_threads(int64_t M, int64_t N, int64_t K)
{
    int want = configured_threads();
    if (atomic_load(&serial_depth) > 0 || (double)M * (double)N * (double)K < PR_BLAS_THREADED_MACS) want = 1;
    if (openblas_get_num_threads() != want) openblas_set_num_threads(want);
}
#endif

void pr_blas_set_threads(int n)
{
#ifdef PRISM_HAVE_BLAS
    atomic_store(&blas_threads, n);
    openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

/* While any caller is between pr_blas_serial_enter and _leave (the
 * recurrence's OpenMP loop over (sequence, head) pairs, whose every thread
 * calls the gemm), OpenBLAS runs on one thread: its pthreads build does not
 * know it is called from OpenMP threads and would start its own on top of
 * them (measured 20-25% slower on 2 cores, 2 x 2 threads). Counted, so
 * concurrent callers (ablate's in-process workers) nest; the last one out
 * restores the thread count. */
static pthread_mutex_t serial_lock = PTHREAD_MUTEX_INITIALIZER;
static int serial_saved;

void pr_blas_serial_enter(void)
{
#ifdef PRISM_HAVE_BLAS
    configured_threads();   /* read before the count is lowered here */
    pthread_mutex_lock(&serial_lock);
    if (atomic_fetch_add(&serial_depth, 1) == 0) {
        serial_saved = openblas_get_num_threads();
        if (serial_saved > 1) openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&serial_lock);
#endif
}

void pr_blas_serial_leave(void)
{
#ifdef PRISM_HAVE_BLAS
    pthread_mutex_lock(&serial_lock);
    if (atomic_fetch_sub(&serial_depth, 1) == 1 && serial_saved > 1) openblas_set_num_threads(serial_saved);
    pthread_mutex_unlock(&serial_lock);
#endif
}

/* returns the previous setting; a build without BLAS always uses the loop */
bool pr_matmul_set_blas(bool on)
{
    return atomic_exchange(&use_blas, on);
}

/* C[M,N] = op(A) op(B) + beta C with row strides: A is stored [M,K] ([K,M]
 * when ta) with rows lda apart, B [K,N] ([N,K] when tb) with rows ldb apart,
 * C's rows ldc apart (the BLAS convention). beta is 0 (overwrite, C may hold
 * garbage) or 1. The plain blocked loop. */
static void gemm_loop(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                      const void *B, int64_t ldb, void *C, int64_t ldc, double beta)
{
    enum { BS = 64 };
    /* op(A)[m,k] = a[m*sam + k*sak], op(B)[k,n] = b[k*sbk + n*sbn] */
    int64_t sam = ta ? 1 : lda, sak = ta ? lda : 1;
    int64_t sbk = tb ? 1 : ldb, sbn = tb ? ldb : 1;
    PR_FLOAT_SWITCH(dt, T, {
        const T *a = A;
        const T *b = B;
        T *c = C;
        for (int64_t i = 0; i < M; i++)
            if (beta == 0)
                memset(c + i * ldc, 0, (size_t)N * sizeof(T));
            else if (beta != 1)
                for (int64_t j = 0; j < N; j++) c[i * ldc + j] *= (T)beta;
        for (int64_t i0 = 0; i0 < M; i0 += BS)
            for (int64_t k0 = 0; k0 < K; k0 += BS)
                for (int64_t j0 = 0; j0 < N; j0 += BS) {
                    int64_t i1 = i0 + BS < M ? i0 + BS : M;
                    int64_t k1 = k0 + BS < K ? k0 + BS : K;
                    int64_t j1 = j0 + BS < N ? j0 + BS : N;
                    for (int64_t i = i0; i < i1; i++)
                        for (int64_t k = k0; k < k1; k++) {
                            T aik = a[i * sam + k * sak];
                            const T *bk = b + k * sbk;
                            T *ci = c + i * ldc;
                            for (int64_t j = j0; j < j1; j++) ci[j] += aik * bk[j * sbn];
                        }
                }
    });
}

/* the same, all contiguous */
void pr_gemm_fallback_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          const void *A, const void *B, void *C, double beta)
{
    gemm_loop(dt, ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, C, N, beta);
}

void pr_gemm_ld_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                    const void *B, int64_t ldb, void *C, int64_t ldc, double beta)
{
#ifdef PRISM_HAVE_BLAS
    if (use_blas && M > 0 && N > 0) {
        PR_ASSERT(M < INT32_MAX && N < INT32_MAX && K < INT32_MAX);
        PR_ASSERT(lda < INT32_MAX && ldb < INT32_MAX && ldc < INT32_MAX);
        pick_threads(M, N, K);
        enum CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
        /* a row no shorter than its stride; BLAS wants ld >= 1 even for rows of 0 (K == 0) */
        const int64_t ra = ta ? M : K, rb = tb ? K : N;
        PR_ASSERT(lda >= ra && ldb >= rb && ldc >= N);
        int la = (int)(lda > 1 ? lda : 1), lb = (int)(ldb > 1 ? ldb : 1);
        if (dt == PR_F32)
            cblas_sgemm(CblasRowMajor, oa, ob, (int)M, (int)N, (int)K, 1.0f, A, la, B, lb, (float)beta, C,
                        (int)ldc);
        else if (dt == PR_F64)
            cblas_dgemm(CblasRowMajor, oa, ob, (int)M, (int)N, (int)K, 1.0, A, la, B, lb, beta, C, (int)ldc);
        else
            pr_fatal("matmul: dtype %s not supported", pr_dtype_name(dt));
        if (K > 0 || beta != 0) return;   /* K == 0: BLAS may leave C untouched */
    }
#endif
    gemm_loop(dt, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta);
}

void pr_gemm_cpu(pr_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                 const void *B, void *C, double beta)
{
    pr_gemm_ld_cpu(dt, ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, C, N, beta);
}

/* sizes of a node: batch count, M, N, K, and whether b is shared by the batch */
typedef struct { int64_t batch, M, N, K; bool ta, tb, shared; } mm_dims;

static mm_dims mm_dims_of(const pr_tensor *a, const pr_tensor *b, bool ta, bool tb)
{
    mm_dims d = {.ta = ta, .tb = tb, .shared = b->ndim == 2};
    int64_t r = a->shape[a->ndim - 2], c = a->shape[a->ndim - 1];
    d.M = ta ? c : r;
    d.K = ta ? r : c;
    d.N = tb ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    d.batch = r > 0 && c > 0 ? a->numel / (r * c) : 0;
    return d;
}

pr_tensor *pr_matmul(pr_ctx *ctx, pr_tensor *a, pr_tensor *b, bool trans_a, bool trans_b)
{
    char sa[64], sb[64];
    a = pr_autocast(ctx, a, PR_BF16), b = pr_autocast(ctx, b, PR_BF16);   /* products in bf16 */
    pr_check_float("matmul", a, "a");
    pr_check_same_kind("matmul", a, b);
    pr_shape_str(a, sa, sizeof sa);
    pr_shape_str(b, sb, sizeof sb);
    PR_CHECK(a->ndim >= 2 && b->ndim >= 2, "matmul: a %s and b %s must have at least 2 dims", sa, sb);
    PR_CHECK(b->ndim == 2 || b->ndim == a->ndim,
             "matmul: b %s must be 2-D or have a's %d dims (a %s)", sb, a->ndim, sa);
    for (int i = 0; b->ndim > 2 && i < a->ndim - 2; i++)
        PR_CHECK(a->shape[i] == b->shape[i], "matmul: leading dims of a %s and b %s differ", sa, sb);
    mm_dims d = mm_dims_of(a, b, trans_a, trans_b);
    int64_t kb = trans_b ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    PR_CHECK(d.K == kb, "matmul: inner dims differ: a %s%s and b %s%s (K %lld vs %lld)", sa,
             trans_a ? "^T" : "", sb, trans_b ? "^T" : "", (long long)d.K, (long long)kb);

    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[a->ndim - 2] = d.M;
    shape[a->ndim - 1] = d.N;
    pr_node n = pr_node_init(PR_OP_matmul, 2, (pr_tensor *[]){a, b});
    n.iarg[0] = trans_a;
    n.iarg[1] = trans_b;
    n.out[0] = pr_op_output(ctx, a->dtype, a->device, a->ndim, shape);
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

/* byte offset of batch i in a tensor of dt with `per` elements per batch */
#define MM_AT(p, dt, i, per) ((char *)(p) + (size_t)((i) * (per)) * pr_dtype_size(dt))

void pr_matmul_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *a = n->in[0], *b = n->in[1], *c = n->out[0];
    mm_dims d = mm_dims_of(a, b, n->iarg[0], n->iarg[1]);
    pr_dtype dt = a->dtype;
    if (d.shared && !d.ta) {   /* rows of every batch stacked: one [batch*M, K] product */
        pr_gemm_cpu(dt, false, d.tb, d.batch * d.M, d.N, d.K, a->data, b->data, c->data, 0);
        return;
    }
    for (int64_t i = 0; i < d.batch; i++)
        pr_gemm_cpu(dt, d.ta, d.tb, d.M, d.N, d.K, MM_AT(a->data, dt, i, d.M * d.K),
                    MM_AT(b->data, dt, d.shared ? 0 : i, d.K * d.N), MM_AT(c->data, dt, i, d.M * d.N), 0);
}

/* C = op(A) op(B), per batch:
 *   d op(A) = dC op(B)^T  ->  dA = dC op(B)^T        (!ta)   or  op(B) dC^T  (ta)
 *   d op(B) = op(A)^T dC  ->  dB = op(A)^T dC        (!tb)   or  dC^T op(A)  (tb)
 * where op(B)^T = B^T when !tb and B when tb (likewise for A). A shared b sums
 * its grad over the batch; with !ta the batch folds into one product. */
void pr_matmul_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    pr_tensor *a = n->in[0], *b = n->in[1], *dc = n->out[0]->grad;
    pr_tensor *da = pr_in_grad(n, 0), *db = pr_in_grad(n, 1);
    mm_dims d = mm_dims_of(a, b, n->iarg[0], n->iarg[1]);
    pr_dtype dt = a->dtype;
    int64_t sa = d.M * d.K, sb = d.shared ? 0 : d.K * d.N, sc = d.M * d.N;
    if (da) {   /* an unwritten grad (pr_grad_claim) is written: beta 0 */
        double beta = d.batch > 0 && pr_grad_claim(da) ? 0 : 1;
        for (int64_t i = 0; i < d.batch; i++) {
            void *dai = MM_AT(da->data, dt, i, sa), *dci = MM_AT(dc->data, dt, i, sc);
            const void *bi = MM_AT(b->data, dt, i, sb);
            if (!d.ta)
                pr_gemm_cpu(dt, false, !d.tb, d.M, d.K, d.N, dci, bi, dai, beta);
            else
                pr_gemm_cpu(dt, d.tb, true, d.K, d.M, d.N, bi, dci, dai, beta);
        }
    }
    if (db) {   /* after da: when a and b are one tensor, db adds */
        bool fold = d.shared && !d.ta;
        int64_t nb = fold ? 1 : d.batch, m = fold ? d.batch * d.M : d.M;
        bool write = nb > 0 && pr_grad_claim(db);
        for (int64_t i = 0; i < nb; i++) {
            const void *ai = MM_AT(a->data, dt, i, sa), *dci = MM_AT(dc->data, dt, i, sc);
            void *dbi = MM_AT(db->data, dt, i, sb);
            double beta = write && (i == 0 || !d.shared) ? 0 : 1;   /* a shared b sums the batches */
            if (!d.tb)
                pr_gemm_cpu(dt, !d.ta, false, d.K, d.N, m, ai, dci, dbi, beta);
            else
                pr_gemm_cpu(dt, true, d.ta, d.N, d.K, m, dci, ai, dbi, beta);
        }
    }
}

static pr_tensor *matmul_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    return pr_matmul(ctx, in[0], in[1], ex->iarg[0], ex->iarg[1]);
}

/* a^T [3, 7, 5] (batched, transposed) @ b [6, 7]^T shared */
void pr_matmul_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 2;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(3, 7, 5), -1, 1);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(6, 7), -1, 1);
    ex->iarg[0] = 1;
    ex->iarg[1] = 1;
    ex->in[0]->name = "a";
    ex->in[1]->name = "b";
    ex->apply = matmul_apply;
}
