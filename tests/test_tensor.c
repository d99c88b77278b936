/* tests/test_tensor.c: creation, copies, views, printing, Philox, arenas. */
#include "tests/pr_test.h"

#include <sys/wait.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

static void test_create_and_fill(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("t", 0);
    pr_tensor *z = pr_zeros(a, PR_F32, PR_CPU, PR_DIMS(3, 5));
    assert_int_equal(z->ndim, 2);
    assert_int_equal(z->numel, 15);
    for (int i = 0; i < 15; i++) assert_true(pr_get(z, i) == 0.0);
    pr_tensor *o = pr_full(a, PR_F64, PR_CPU, PR_DIMS(2, 1, 3), 2.5);
    for (int i = 0; i < 6; i++) assert_true(pr_get(o, i) == 2.5);
    pr_tensor *r = pr_arange(a, PR_I64, PR_CPU, 7);
    assert_true(pr_get(r, 6) == 6.0);
    pr_tensor *s = pr_zeros(a, PR_F64, PR_CPU, 0, NULL); /* 0-dim scalar */
    assert_int_equal(s->numel, 1);
    pr_arena_free(a);
}

static void test_dtype_copies(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("t", 0);
    pr_tensor *x = pr_from_host(a, PR_F64, PR_CPU, PR_DIMS(4), (double[]){1.5, -2.25, 3.0, 1e-3});
    pr_tensor *f = pr_to(a, x, PR_F32, PR_CPU);
    pr_tensor *b = pr_to(a, x, PR_BF16, PR_CPU);
    pr_tensor *i = pr_to(a, x, PR_I32, PR_CPU);
    assert_true(pr_get(f, 1) == -2.25);
    assert_true(pr_get(b, 0) == 1.5);                     /* exact in bf16 */
    assert_true(fabs(pr_get(b, 3) - 1e-3) < 1e-5);        /* 8 bits of mantissa */
    assert_true(pr_get(i, 2) == 3.0);
    pr_tensor *back = pr_to(a, f, PR_F64, PR_CPU);
    pr_assert_tensors_close("back", back, x, 1e-9, 0);
    pr_arena_free(a);
}

static void test_views(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("t", 0);
    pr_tensor *x = pr_arange(a, PR_F32, PR_CPU, 24);
    pr_tensor *v = pr_view(a, x, PR_DIMS(2, -1, 4));
    assert_int_equal(v->shape[1], 3);
    assert_ptr_equal(v->data, x->data);
    pr_tensor *rows = pr_view_rows(a, v, 1, 1);
    assert_true(pr_get(rows, 0) == 12.0);
    PR_EXPECT_FATAL(pr_view(a, x, PR_DIMS(5, 5)), "cannot be viewed");
    PR_EXPECT_FATAL(pr_view_rows(a, v, 1, 2), "out of range");
    pr_arena_free(a);
}

static void test_print(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("t", 0);
    pr_tensor *x = pr_arange(a, PR_F64, PR_CPU, 3);
    char buf[256] = {0};
    FILE *f = fmemopen(buf, sizeof buf, "w");
    pr_print(f, x, "x", 0);
    fclose(f);
    assert_non_null(strstr(buf, "x: [3] f64 cpu [0, 1, 2]"));
    pr_arena_free(a);
}

/* Philox4x32-10 known-answer vectors (Random123's kat_vectors) */
static void test_philox_known_answers(void **state)
{
    (void)state;
    uint32_t out[4];
    pr_philox4x32(0, (uint32_t[]){0, 0, 0, 0}, out);
    assert_true(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
    pr_philox4x32(0xffffffffffffffffull, (uint32_t[]){0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, out);
    assert_true(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u && out[3] == 0x6d5451fdu);
}

static void test_rng_deterministic(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("t", 0);
    pr_rng r1 = pr_rng_init(42, 3), r2 = pr_rng_init(42, 3), r3 = pr_rng_init(42, 4);
    pr_tensor *x = pr_randn(a, PR_F64, PR_CPU, PR_DIMS(1000), &r1);
    pr_tensor *y = pr_randn(a, PR_F64, PR_CPU, PR_DIMS(600), &r2);   /* same stream in two draws */
    pr_tensor *y2 = pr_randn(a, PR_F64, PR_CPU, PR_DIMS(400), &r2);
    pr_tensor *z = pr_randn(a, PR_F64, PR_CPU, PR_DIMS(1000), &r3);
    double mean = 0, var = 0, same_z = 0;
    for (int i = 0; i < 1000; i++) {
        double xi = pr_get(x, i), yi = i < 600 ? pr_get(y, i) : pr_get(y2, i - 600);
        assert_true(xi == yi);
        same_z += xi == pr_get(z, i);
        mean += xi / 1000;
        var += xi * xi / 1000;
    }
    assert_true(same_z == 0);                   /* another stream, other numbers */
    assert_true(fabs(mean) < 0.1 && fabs(var - 1) < 0.15);
    pr_tensor *u = pr_randu(a, PR_F32, PR_CPU, PR_DIMS(999), &r1, -2, 3);
    for (int i = 0; i < 999; i++) assert_true(pr_get(u, i) >= -2 && pr_get(u, i) < 3);
    pr_arena_free(a);
}

static void test_arena(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("small", 4096);
    void *p = pr_arena_alloc(a, 1000);
    assert_int_equal((uintptr_t)p % 64, 0);
    assert_true(pr_arena_used(a) >= 1000);
    PR_EXPECT_FATAL(pr_arena_alloc(a, 5000), "out of space");
    pr_arena_reset(a);
    assert_int_equal(pr_arena_used(a), 0);
    assert_true(pr_arena_peak(a) >= 1000);
    pr_arena_free(a);
    pr_arena *big = pr_arena_new("grow", 0); /* grows across many blocks; LSan checks the release */
    for (int i = 0; i < 100; i++) pr_zeros(big, PR_F64, PR_CPU, PR_DIMS(1000, 30));
    pr_arena_reset(big);
    for (int i = 0; i < 10; i++) pr_zeros(big, PR_F64, PR_CPU, PR_DIMS(1000, 30));
    pr_arena_free(big);
}

/* A reset keeps one block that holds the whole round: a second round of the
 * same allocations (the next training step) makes no new block, so a step
 * does not map and fault in fresh memory every time. */
static void test_arena_reset_keeps_the_peak(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("steps", 0);
    for (int step = 0; step < 3; step++) {
        size_t before = pr_arena_blocks_made(a);
        for (int i = 0; i < 40; i++) pr_empty(a, PR_F32, PR_CPU, PR_DIMS(1000, 100 + i));
        if (step == 0) assert_true(pr_arena_blocks_made(a) > 1);   /* it spilled over blocks */
        if (step > 0) assert_int_equal(pr_arena_blocks_made(a), before);
        pr_arena_reset(a);
    }
    pr_arena_free(a);
}

/* pr_zeros is zeroed even in a block that held other data; pr_empty is not,
 * and debug builds fill it with NaN so that a reader counting on zeros fails */
static void test_empty_and_zeros_contents(void **state)
{
    (void)state;
    pr_arena *a = pr_arena_new("contents", 0);
    pr_fill_(pr_empty(a, PR_F64, PR_CPU, PR_DIMS(64)), 3.0);
    pr_arena_reset(a);
    pr_tensor *z = pr_zeros(a, PR_F64, PR_CPU, PR_DIMS(64));
    for (int64_t i = 0; i < z->numel; i++) assert_true(pr_get(z, i) == 0.0);
    pr_tensor *e = pr_empty(a, PR_F32, PR_CPU, PR_DIMS(5));
#ifndef NDEBUG
    for (int64_t i = 0; i < e->numel; i++) assert_true(isnan(pr_get(e, i)));
#else
    (void)e;
#endif
    pr_arena_free(a);
}

/* Issue 45: under ASan, the bytes after an arena allocation (its padding and
 * the block's unused space) are poisoned, so a write past it is caught; a
 * reset poisons everything again. A child process writing one byte past an
 * allocation must die with ASan's report. */
static void test_arena_poisoned_under_asan(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__)
    pr_arena *a = pr_arena_new("poison", 0);
    char *p = pr_arena_alloc(a, 10), *q = pr_arena_alloc(a, 64);
    assert_false(__asan_address_is_poisoned(p));
    assert_false(__asan_address_is_poisoned(p + 9));
    assert_true(__asan_address_is_poisoned(p + 10));     /* the padding up to 64 */
    assert_true(__asan_address_is_poisoned(p + 63));
    assert_false(__asan_address_is_poisoned(q + 63));
    assert_true(__asan_address_is_poisoned(q + 64));     /* the block's unused space */
    assert_true(__asan_address_is_poisoned(q + 100000));
    char *z = pr_arena_alloc(a, 0);
    assert_true(__asan_address_is_poisoned(z));          /* a zero-byte allocation holds nothing */
    pr_arena_reset(a);
    assert_true(__asan_address_is_poisoned(p));          /* reset: nothing is handed out */
    pr_tensor *t = pr_zeros(a, PR_F32, PR_CPU, PR_DIMS(3));
    assert_false(__asan_address_is_poisoned((char *)t->data + 11));
    assert_true(__asan_address_is_poisoned((char *)t->data + 12));
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {   /* the child writes past its 12 bytes */
        if (!freopen("/dev/null", "w", stderr)) _exit(0);   /* no quiet stderr: fail the check below */
        volatile char *data = t->data;
        data[12] = 1;
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    pr_arena_free(a);
#else
    skip();   /* a build without ASan has no poison to check */
#endif
}

static void test_cpu_only_errors(void **state)
{
    (void)state;
    if (pr_cuda_available()) skip();
    pr_arena *a = pr_arena_new("t", 0);
#ifndef PRISM_HAVE_CUDA
    PR_EXPECT_FATAL(pr_zeros(a, PR_F32, PR_CUDA, PR_DIMS(3)), "built without CUDA");
#endif
    pr_arena_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_and_fill), cmocka_unit_test(test_dtype_copies),
        cmocka_unit_test(test_views),           cmocka_unit_test(test_print),
        cmocka_unit_test(test_philox_known_answers), cmocka_unit_test(test_rng_deterministic),
        cmocka_unit_test(test_arena),           cmocka_unit_test(test_cpu_only_errors),
        cmocka_unit_test(test_arena_poisoned_under_asan),
        cmocka_unit_test(test_arena_reset_keeps_the_peak),
        cmocka_unit_test(test_empty_and_zeros_contents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
