/* tests/test_cuda_core.c: the CUDA side of tensor/: the caching allocator,
 * host/device copies, Philox on the GPU against the CPU, checked calls.
 *
 * Philox: the GPU computes the CPU's double arithmetic with explicit
 * round-to-nearest operations; only CUDA's log/cos (<= 2 ulp in double
 * against glibc's < 1) can differ, so f32 normals are expected to be bitwise
 * equal and are required to be within 1 f32 ulp (uniforms: bitwise).
 * Every case skips without a GPU (or in a build without CUDA).
 */
#include "tests/pr_test.h"

#ifdef PRISM_HAVE_CUDA
#include "ops/cuda/ops_cuda.h"

static pr_cuda_alloc_stats stats(void)
{
    pr_cuda_alloc_stats s;
    pr_cuda_alloc_stats_get(&s);
    return s;
}

/* f32 ulps between a and b (same sign assumed; large when not) */
static int64_t ulps(float a, float b)
{
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return a == b ? 0 : INT32_MAX;
    return llabs((long long)ia - (long long)ib);
}
#endif

static void test_device_count(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
#ifdef PRISM_HAVE_CUDA
    assert_true(pr_cuda_device_count() >= 1);
    assert_true(pr_cuda_device_count() == pr_cuda_device_count()); /* cached, no error */
    assert_int_equal(cudaGetLastError(), cudaSuccess);
#endif
}

/* free then allocate the same size: the block comes back without cudaMalloc */
static void test_allocator_reuse(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
#ifdef PRISM_HAVE_CUDA
    size_t bytes = (1u << 20) + 123;
    pr_cuda_alloc_stats s0 = stats();
    void *p = pr_cuda_malloc(bytes);
    pr_cuda_alloc_stats s1 = stats();
    assert_non_null(p);
    assert_true(((uintptr_t)p & 255) == 0);
    assert_int_equal(s1.current, s0.current + bytes);
    assert_true(s1.peak >= s1.current);
    pr_cuda_free(p, bytes);
    pr_cuda_alloc_stats s2 = stats();
    assert_int_equal(s2.current, s0.current);
    assert_true(s2.cached >= s0.cached + bytes);       /* rounded up: at most 1/8 more */
    assert_true(s2.cached <= s0.cached + bytes + bytes / 8 + 512);
    void *q = pr_cuda_malloc(bytes);
    pr_cuda_alloc_stats s3 = stats();
    assert_ptr_equal(q, p);
    assert_int_equal(s3.n_cuda_malloc, s2.n_cuda_malloc); /* no new cudaMalloc */
    assert_int_equal(s3.n_reuse, s2.n_reuse + 1);
    assert_int_equal(s3.cached, s0.cached);
    /* a slightly smaller request of the same size class reuses it too */
    pr_cuda_free(q, bytes);
    void *r = pr_cuda_malloc(bytes - 100);
    assert_ptr_equal(r, p);
    assert_int_equal(stats().n_cuda_malloc, s2.n_cuda_malloc);
    pr_cuda_free(r, bytes - 100);
    /* the public stats agree */
    size_t cur, peak;
    pr_device_mem_stats(PR_CUDA, &cur, &peak);
    assert_int_equal(cur, stats().current);
    assert_true(peak >= s1.current);
    /* misuse is fatal, naming the problem */
    int x = 0;
    PR_EXPECT_FATAL(pr_cuda_free(&x, 4), "not allocated by pr_cuda_malloc");
    void *t = pr_cuda_malloc(4096);
    PR_EXPECT_FATAL(pr_cuda_free(t, 100), "freed as 100");
    pr_cuda_free(t, 4096);
    pr_cuda_empty_cache();
    assert_int_equal(stats().cached, 0);
    printf("  allocator: %lld cudaMalloc, %lld reuses, peak %zu bytes\n", stats().n_cuda_malloc, stats().n_reuse,
           stats().peak);
#endif
}

/* a small training step, three times: after the first, no cudaMalloc at all */
static void test_allocator_steady_step(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
#ifdef PRISM_HAVE_CUDA
    pr_ctx *ctx = pr_ctx_new(3);
    pr_arena *params = pr_arena_new("params", 0);
    pr_rng r = pr_rng_init(1, 0);
    pr_tensor *w = pr_randn(params, PR_F32, PR_CUDA, PR_DIMS(96), &r);
    pr_tensor *b = pr_randn(params, PR_F32, PR_CUDA, PR_DIMS(96), &r);
    w->requires_grad = b->requires_grad = true;
    long long mallocs[3];
    for (int step = 0; step < 3; step++) {
        pr_tensor *x = pr_randn(ctx->step, PR_F32, PR_CUDA, PR_DIMS(64, 96), &r);
        pr_tensor *h = pr_silu(ctx, pr_layernorm(ctx, x, w, b, 1e-5));
        pr_tensor *y = pr_add(ctx, pr_rmsnorm(ctx, h, NULL, 1e-6), b);
        int64_t tg[64];
        for (int i = 0; i < 64; i++) tg[i] = (i * 7) % 96;
        pr_tensor *t = pr_from_host(ctx->step, PR_I64, PR_CUDA, PR_DIMS(64), tg);
        pr_tensor *loss = pr_cross_entropy(ctx, y, t, -100);
        pr_backward(ctx, loss);
        pr_step_reset(ctx);
        mallocs[step] = stats().n_cuda_malloc;
    }
    printf("  cudaMalloc calls after steps 1..3: %lld %lld %lld\n", mallocs[0], mallocs[1], mallocs[2]);
    assert_int_equal(mallocs[2], mallocs[1]);
    pr_arena_free(params);
    pr_ctx_free(ctx);
#endif
}

static void test_round_trip(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
    enum { N = 100003 };
    pr_arena *a = pr_arena_new("t", 0);
    float *h = malloc(sizeof(float) * N), *back = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) h[i] = (float)sin(i * 0.37) * 1e3f;
    pr_tensor *d = pr_from_host(a, PR_F32, PR_CUDA, PR_DIMS(N), h);
    pr_tensor *d2 = pr_clone(a, d);                        /* device to device */
    pr_tensor *c = pr_to(a, d2, PR_F32, PR_CPU);
    assert_memory_equal(c->data, h, sizeof(float) * N);
    pr_device_memcpy(back, PR_CPU, d->data, PR_CUDA, sizeof(float) * N);
    assert_memory_equal(back, h, sizeof(float) * N);
    pr_zero_(d2);
    pr_tensor *z = pr_to(a, d2, PR_F64, PR_CPU);           /* and a dtype change on the way */
    for (int i = 0; i < N; i++) assert_true(pr_get(z, i) == 0.0);
    pr_tensor *f64 = pr_to(a, d, PR_F64, PR_CPU);
    assert_true(pr_get(f64, 12345) == (double)h[12345]);
    free(h);
    free(back);
    pr_arena_free(a);
}

/* the same seed, stream and offset give the same f32 numbers on both devices */
static void test_philox_matches_cpu(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
#ifdef PRISM_HAVE_CUDA
    enum { N = (1 << 20) + 5 };
    pr_arena *a = pr_arena_new("t", 0);
    for (int kind = 0; kind < 2; kind++) {
        pr_rng rc = pr_rng_init(1234567, 9), rg = rc;
        rc.offset = rg.offset = 77; /* a draw that does not start at 0 */
        pr_tensor *tc = pr_empty(a, PR_F32, PR_CPU, PR_DIMS(N)), *tg = pr_empty(a, PR_F32, PR_CUDA, PR_DIMS(N));
        if (kind == 0) {
            pr_rand_uniform_(tc, &rc, -0.3, 2.5);
            pr_rand_uniform_(tg, &rg, -0.3, 2.5);
        } else {
            pr_rand_normal_(tc, &rc, 0.5, 2.0);
            pr_rand_normal_(tg, &rg, 0.5, 2.0);
        }
        assert_int_equal(rc.offset, rg.offset);
        pr_tensor *back = pr_to(a, tg, PR_F32, PR_CPU);
        const float *x = tc->data, *y = back->data;
        int64_t differ = 0, worst = 0;
        for (int64_t i = 0; i < N; i++) {
            int64_t u = ulps(x[i], y[i]);
            differ += u != 0;
            worst = u > worst ? u : worst;
        }
        printf("  philox %s: %lld of %d f32 values differ from the CPU's, max %lld ulp\n",
               kind ? "normal" : "uniform", (long long)differ, N, (long long)worst);
        if (kind == 0) assert_int_equal(differ, 0);
        assert_true(worst <= 1);
    }
    pr_arena_free(a);
#endif
}

/* a failing checked call names the file, the line and the call */
static void test_checked_call_message(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
#ifdef PRISM_HAVE_CUDA
    char line[32];
    snprintf(line, sizeof line, ":%d:", __LINE__ + 1);
    PR_EXPECT_FATAL(PR_CUDA_CHECK(cudaSetDevice(9999)), "cudaSetDevice(9999) failed");
    assert_non_null(strstr(pr_last_error(), "test_cuda_core.c"));
    assert_non_null(strstr(pr_last_error(), line));
    printf("  message: %s\n", pr_last_error());
    (void)cudaGetLastError(); /* not sticky: clear it for the next checks */
    PR_EXPECT_FATAL(PR_CUBLAS_CHECK(cublasSetStream(NULL, 0)), "cublasSetStream(NULL, 0) failed: cuBLAS status");
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    /* a context's handles work after that */
    pr_ctx *ctx = pr_ctx_new(1);
    assert_non_null(pr_cublas(ctx));
    pr_ctx_free(ctx);
#endif
}

/* One queue: prism's kernels, cuBLAS, copies, memsets and the random fill
 * all run on the legacy default stream, so a block handed out again right
 * after the host freed it is only written once its earlier uses are done. */
static void test_one_stream(void **state)
{
    (void)state;
    PR_SKIP_WITHOUT_CUDA();
#ifdef PRISM_HAVE_CUDA
    pr_ctx *ctx = pr_ctx_new(1);
    assert_null(pr_cuda_stream(ctx));
    cudaStream_t blas_stream = (cudaStream_t)&blas_stream; /* anything but 0 */
    PR_CUBLAS_CHECK(cublasGetStream(pr_cublas(ctx), &blas_stream));
    assert_null(blas_stream);
    pr_ctx_free(ctx);

    enum { N = 1 << 20 };
    pr_arena *a = pr_arena_new("one_stream", 0);
    double *got = malloc(sizeof(double) * N), *want = malloc(sizeof(double) * N);
    long long reused = stats().n_reuse;
    for (int round = 0; round < 4; round++) {
        pr_arena_reset(a); /* the last round's blocks go back to the cache, queued work may still use them */
        pr_rng rg = pr_rng_init(11, (uint32_t)round), rc = rg;
        pr_tensor *x = pr_randu(a, PR_F32, PR_CUDA, PR_DIMS(N), &rg, -1.0, 1.0);
        pr_tensor *z = pr_zeros(a, PR_F32, PR_CUDA, PR_DIMS(N));
        pr_tensor *ref = pr_randu(a, PR_F32, PR_CPU, PR_DIMS(N), &rc, -1.0, 1.0);
        pr_to_host_f64(x, got);
        pr_to_host_f64(ref, want);
        assert_memory_equal(got, want, sizeof(double) * N);
        pr_to_host_f64(z, got);
        for (int i = 0; i < N; i++) assert_true(got[i] == 0.0);
    }
    assert_true(stats().n_reuse > reused); /* the later rounds ran on reused blocks */
    free(got);
    free(want);
    pr_arena_free(a);
#endif
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_count),
        cmocka_unit_test(test_allocator_reuse),
        cmocka_unit_test(test_allocator_steady_step),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_philox_matches_cpu),
        cmocka_unit_test(test_checked_call_message),
        cmocka_unit_test(test_one_stream),
    };
    return pr_test_exit_status(cmocka_run_group_tests_name("cuda_core", tests, NULL, NULL));
}
