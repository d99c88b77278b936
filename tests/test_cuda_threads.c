/* tests/test_cuda_threads.c: trainings in threads of one process, each on
 * its own stream and pool (pr_device_thread_begin), as ablate --workers
 * threads runs them.
 *
 * - a thread that begins has a stream of its own, another thread's differs,
 *   and the thread without one keeps the legacy stream; after end the
 *   thread is back on the legacy stream;
 * - a thread's cuBLAS handle is its own while it runs (another thread's
 *   differs) and is taken by the next thread once it ends, not destroyed;
 * - two threads each train two probe-sized runs at once (D=16, 2 blocks,
 *   B=32, T=128 on parity, 8 steps; one with train.cuda_graph=on, one off,
 *   each thread its own seed): every run's per-step losses and final
 *   weights are the bits of the same run trained alone on the legacy
 *   stream, and the graph runs really captured (their note says on) while
 *   the other thread launched; each thread's own pool holds nothing once
 *   its runs are freed, and its peak was its own work;
 * - while a host function holds the legacy stream, a thread with its own
 *   stream runs eager ops (copies both ways, a cuBLAS product, kernels, a
 *   sync) and replays a graph, and gets the values it got unheld: none of its
 *   work went to the legacy stream (it would still be queued there, and the
 *   reads would return what the memory held before) and none of its waits
 *   was device-wide (it would have waited out the hold). Bit-equal results
 *   alone cannot tell streams apart: the legacy stream runs everything too.
 *   Its pool starts empty while the main thread holds a block of the shared one;
 * - a thread whose step fails inside a capture (pr_fatal, its handler
 *   jumping out) lets the driver gate go: another thread then allocates,
 *   captures and replays within a minute (the gate kept: forever).
 * Exits 77 (skipped) without a GPU.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/pr_test.h"
#include "train/train.h"

#ifdef PRISM_HAVE_CUDA
#include "tensor/cuda.h"

static char root[96];

/* ---- streams ------------------------------------------------------------------- */
typedef struct {
    cudaStream_t own, after_end;
} stream_seen;

static void *see_streams(void *arg)
{
    stream_seen *s = arg;
    pr_device_thread_begin(PR_CUDA);
    s->own = pr_cuda_the_stream();
    pr_device_thread_end(PR_CUDA);
    s->after_end = pr_cuda_the_stream();
    return NULL;
}

static void test_each_thread_has_its_own_stream(void **state)
{
    (void)state;
    stream_seen s[2] = {{0}};
    pthread_t t[2];
    pr_device_thread_begin(PR_CUDA);   /* both threads begin while this one holds a stream too */
    cudaStream_t mine = pr_cuda_the_stream();
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, see_streams, &s[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pr_device_thread_end(PR_CUDA);
    assert_non_null(mine);
    assert_non_null(s[0].own), assert_non_null(s[1].own);
    assert_ptr_not_equal(s[0].own, s[1].own);
    assert_ptr_not_equal(s[0].own, mine), assert_ptr_not_equal(s[1].own, mine);
    assert_null(s[0].after_end), assert_null(s[1].after_end);
    assert_null(pr_cuda_the_stream());   /* this thread: the legacy stream again */
}

/* ---- cuBLAS handles ------------------------------------------------------------------ */
static void *take_handle(void *arg)
{
    cublasHandle_t *h = arg;
    pr_device_thread_begin(PR_CUDA);
    pr_cuda_state *st = pr_cuda_state_new();
    *h = pr_cuda_state_cublas(st, false);
    pr_cuda_ctx_release(st);
    pr_device_thread_end(PR_CUDA);
    return NULL;
}

/* a thread's handle is its own while it runs and is left to the next thread
 * when it ends, never destroyed (cublasDestroy synchronizes the whole device) */
static void test_blas_handles_outlive_their_threads(void **state)
{
    (void)state;
    cublasHandle_t other = NULL, later = NULL;
    pthread_t t;
    pr_device_thread_begin(PR_CUDA);
    pr_cuda_state *st = pr_cuda_state_new();
    cublasHandle_t mine = pr_cuda_state_cublas(st, false);
    assert_int_equal(pthread_create(&t, NULL, take_handle, &other), 0);
    pthread_join(t, NULL);
    pr_cuda_ctx_release(st);
    pr_device_thread_end(PR_CUDA);
    assert_int_equal(pthread_create(&t, NULL, take_handle, &later), 0);
    pthread_join(t, NULL);
    assert_non_null(mine), assert_non_null(other);
    assert_ptr_not_equal(mine, other);   /* two threads at once: two handles */
    assert_ptr_equal(later, mine);       /* the last one left, not a new one */
}

/* ---- trainings side by side ------------------------------------------------------- */
enum { STEPS = 8 };

static void probe_config(pr_config *c, pr_train_opts *o, int seed, bool graph)
{
    pr_err err;
    *c = pr_config_default();
    *o = pr_train_defaults();
    if (pr_task_preset_as(c, o, "parity", "probe", &err)) fail_msg("%s", err.msg);
    const char *probe[] = {"d_model=16", "n_layers=2", "seq_len=128"};
    for (int i = 0; i < 3; i++)
        if (pr_config_set(c, probe[i], &err)) fail_msg("%s", err.msg);
    o->batch = 32;
    o->steps = STEPS;
    o->log_every = 1;
    o->eval_batches = 1;
    o->seed = seed, c->seed = seed;
    snprintf(o->cuda_graph, sizeof o->cuda_graph, "%s", graph ? "on" : "off");
}

static void run_dir(char *out, size_t n, const char *who, int seed, bool graph)
{
    snprintf(out, n, "%s/%s-s%d-%s", root, who, seed, graph ? "graph" : "eager");
}

/* what a thread did: no cmocka assertion runs off the main thread */
typedef struct {
    int seed;
    bool failed;
    char msg[600];
    char note[2][320];     /* the runs' graph notes: graph on, then off */
    size_t current, peak;  /* the thread's pool after its runs */
    jmp_buf on_fatal;
} trainer;

static _Thread_local trainer *this_trainer;
static void fatal_in_trainer(const char *msg)
{
    (void)msg;
    longjmp(this_trainer->on_fatal, 1);
}

static void *train_two(void *arg)
{
    trainer *t = arg;
    this_trainer = t;
    pr_set_error_handler(fatal_in_trainer);
    if (setjmp(t->on_fatal)) {
        t->failed = true;
        snprintf(t->msg, sizeof t->msg, "fatal: %s", pr_last_error());
        pr_set_error_handler(NULL);
        return NULL;
    }
    pr_device_thread_begin(PR_CUDA);
    for (int g = 0; g < 2 && !t->failed; g++) {
        pr_config c;
        pr_train_opts o;
        pr_train_result res;
        pr_err err;
        char dir[200];
        probe_config(&c, &o, t->seed, g == 0);
        run_dir(dir, sizeof dir, "thread", t->seed, g == 0);
        if (pr_train(&c, &o, dir, false, PR_CUDA, &res, &err))
            t->failed = true, snprintf(t->msg, sizeof t->msg, "%s", err.msg);
        else snprintf(t->note[g], sizeof t->note[g], "%s", res.graph_note);
    }
    pr_cuda_mem_stats(&t->current, &t->peak, NULL);
    pr_device_thread_end(PR_CUDA);
    pr_set_error_handler(NULL);
    return NULL;
}

static void expect_same_run(const char *alone, const char *threaded)
{
    double a[STEPS], b[STEPS];
    assert_int_equal(pr_test_read_losses(alone, a, STEPS), STEPS);
    assert_int_equal(pr_test_read_losses(threaded, b, STEPS), STEPS);
    for (int i = 0; i < STEPS; i++)
        if (a[i] != b[i]) fail_msg("%s: step %d's loss %.17g, alone %.17g", threaded, i + 1, b[i], a[i]);
    char x_path[300], y_path[300];
    pr_err err;
    snprintf(x_path, sizeof x_path, "%s/ckpt-%08d.weights.safetensors", alone, STEPS);
    snprintf(y_path, sizeof y_path, "%s/ckpt-%08d.weights.safetensors", threaded, STEPS);
    pr_arena *ar = pr_arena_new("files", 0);
    pr_safetensors x, y;
    if (pr_safetensors_read(x_path, ar, &x, &err) || pr_safetensors_read(y_path, ar, &y, &err))
        fail_msg("%s", err.msg);
    assert_true(x.n > 0);
    for (int i = 0; i < x.n; i++)
        if (memcmp(pr_safetensors_get(&y, x.names[i])->data, x.tensors[i]->data, pr_nbytes(x.tensors[i])))
            fail_msg("%s: %s differs from the run alone", threaded, x.names[i]);
    pr_arena_free(ar);
}

static void test_threads_train_as_alone(void **state)
{
    (void)state;
    /* alone: one after another on the legacy stream, the default path */
    for (int seed = 1; seed <= 2; seed++)
        for (int g = 0; g < 2; g++) {
            pr_config c;
            pr_train_opts o;
            pr_train_result res;
            pr_err err;
            char dir[200];
            probe_config(&c, &o, seed, g == 0);
            run_dir(dir, sizeof dir, "alone", seed, g == 0);
            if (pr_train(&c, &o, dir, false, PR_CUDA, &res, &err)) fail_msg("%s", err.msg);
        }
    static trainer t[2];   /* jmp_bufs: off the stack */
    pthread_t tid[2];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)64 << 20);
    for (int i = 0; i < 2; i++) {
        t[i] = (trainer){.seed = i + 1};
        assert_int_equal(pthread_create(&tid[i], &attr, train_two, &t[i]), 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(tid[i], NULL);
    pthread_attr_destroy(&attr);
    for (int i = 0; i < 2; i++) {
        if (t[i].failed) fail_msg("thread %d: %s", i, t[i].msg);
        if (strncmp(t[i].note[0], "on", 2)) fail_msg("thread %d: the graph did not run: %s", i, t[i].note[0]);
        assert_int_equal(t[i].current, 0);   /* the thread's pool: its runs freed all they took */
        assert_true(t[i].peak > 0);
        for (int g = 0; g < 2; g++) {
            char alone[200], threaded[200];
            run_dir(alone, sizeof alone, "alone", t[i].seed, g == 0);
            run_dir(threaded, sizeof threaded, "thread", t[i].seed, g == 0);
            expect_same_run(alone, threaded);
        }
    }
}

/* ---- the legacy stream held ---------------------------------------------------------- */
enum { HN = 64, HOLD_S = 20 };

/* a host function on the legacy stream that blocks it until released (or HOLD_S
 * seconds pass, so a thread that does wait for it costs the test HOLD_S, not a hang) */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool holding, released;
} legacy_hold;

static legacy_hold the_hold = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};

static struct timespec seconds_from_now(int s)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);   /* the clock pthread_cond_timedwait measures by default */
    t.tv_sec += s;
    return t;
}

static void CUDART_CB hold_legacy(void *arg)
{
    legacy_hold *h = arg;
    struct timespec until = seconds_from_now(HOLD_S);
    pthread_mutex_lock(&h->mu);
    h->holding = true;
    pthread_cond_broadcast(&h->cv);
    while (!h->released && pthread_cond_timedwait(&h->cv, &h->mu, &until) != ETIMEDOUT) continue;
    pthread_mutex_unlock(&h->mu);
}

/* whether the hold has begun (the legacy stream reached it) within 10 s */
static bool hold_begun(legacy_hold *h)
{
    struct timespec until = seconds_from_now(10);
    pthread_mutex_lock(&h->mu);
    while (!h->holding && pthread_cond_timedwait(&h->cv, &h->mu, &until) != ETIMEDOUT) continue;
    bool on = h->holding;
    pthread_mutex_unlock(&h->mu);
    return on;
}

static void hold_release(legacy_hold *h)
{
    pthread_mutex_lock(&h->mu);
    h->released = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* eager: tanh(x x^T) and its sum, read back, the step's memory freed */
static void held_eager(pr_ctx *ctx, const float *x_host, double *z, double *sum)
{
    const int64_t shape[2] = {HN, HN};
    pr_tensor *x = pr_from_host(ctx->step, PR_F32, PR_CUDA, 2, shape, x_host);
    pr_tensor *y = pr_tanh(ctx, pr_matmul(ctx, x, x, false, true));
    pr_tensor *s = pr_sum_all(ctx, y);
    pr_device_sync(PR_CUDA);
    pr_to_host_f64(y, z);
    *sum = pr_item(s);
    pr_step_reset(ctx);
}

/* the same product as a graph: x staged into a tensor the graph reads, y where it writes */
typedef struct {
    pr_ctx *ctx;
    pr_arena *keep;
    pr_tensor *x, *y;
    pr_cuda_graph *g;
} held_graph;

static void held_replay(held_graph *hg, const float *x_host, double *y)
{
    pr_device_memcpy(hg->x->data, PR_CUDA, x_host, PR_CPU, sizeof(float) * HN * HN);
    pr_cuda_graph_replay(hg->g);
    pr_to_host_f64(hg->y, y);
}

/* what the thread saw: unheld with x1 (want), unheld with x0 (other: what the
 * memory holds before the held run), held with x1 (got) */
typedef struct {
    bool failed, legacy_busy;
    char msg[600];
    double seconds;
    double want[HN * HN], other[HN * HN], got[HN * HN], want_g[HN * HN], other_g[HN * HN], got_g[HN * HN];
    double want_sum, other_sum, got_sum;
    size_t current, current_at_begin;
    jmp_buf on_fatal;
} held_worker;

static _Thread_local held_worker *this_held;
static void fatal_in_held(const char *msg)
{
    (void)msg;
    longjmp(this_held->on_fatal, 1);
}

static void *run_held(void *arg)
{
    held_worker *w = arg;
    static float x0[HN * HN], x1[HN * HN];
    for (int i = 0; i < HN * HN; i++) {
        x0[i] = (float)(i * 37 % 101 - 50) / 256.0f;
        x1[i] = (float)(i * 53 % 97 - 48) / 256.0f;
    }
    this_held = w;
    pr_set_error_handler(fatal_in_held);
    if (setjmp(w->on_fatal)) {
        hold_release(&the_hold);
        w->failed = true;
        snprintf(w->msg, sizeof w->msg, "fatal: %s", pr_last_error());
        pr_set_error_handler(NULL);
        return NULL;
    }
    pr_device_thread_begin(PR_CUDA);
    pr_cuda_mem_stats(&w->current_at_begin, NULL, NULL);   /* its own pool: not the caller's block */
    pr_ctx *ctx = pr_ctx_new(0);
    /* unheld: every kernel loaded and every block cached, so the held run needs no
     * cudaMalloc or module load (either may wait for the whole device); eager first,
     * as the trainer does, so the capture finds the thread's cuBLAS handle made; x0 last */
    held_eager(ctx, x1, w->want, &w->want_sum);
    const int64_t shape[2] = {HN, HN};
    held_graph hg = {.ctx = pr_ctx_new(0), .keep = pr_arena_new("held", 0)};
    hg.x = pr_zeros(hg.keep, PR_F32, PR_CUDA, 2, shape);
    pr_cuda_graph_begin();
    hg.y = pr_tanh(hg.ctx, pr_matmul(hg.ctx, hg.x, hg.x, false, true));
    char why[256];
    if (pr_cuda_graph_end(&hg.g, why, sizeof why)) pr_fatal("the graph was not captured: %s", why);
    held_replay(&hg, x1, w->want_g);
    held_eager(ctx, x0, w->other, &w->other_sum);
    held_replay(&hg, x0, w->other_g);
    PR_CUDA_CHECK(cudaLaunchHostFunc(cudaStreamLegacy, hold_legacy, &the_hold));
    if (!hold_begun(&the_hold)) pr_fatal("the host function never began holding the legacy stream");
    double t0 = pr_now_s();
    held_eager(ctx, x1, w->got, &w->got_sum);
    held_replay(&hg, x1, w->got_g);
    pr_device_sync(PR_CUDA);
    w->seconds = pr_now_s() - t0;
    w->legacy_busy = cudaStreamQuery(cudaStreamLegacy) == cudaErrorNotReady;
    (void)cudaGetLastError();   /* "not ready" is an answer, not an error for the next check to find */
    hold_release(&the_hold);
    PR_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    pr_cuda_graph_free(hg.g);
    pr_ctx_free(hg.ctx);
    pr_arena_free(hg.keep);
    pr_ctx_free(ctx);
    pr_cuda_mem_stats(&w->current, NULL, NULL);
    pr_device_thread_end(PR_CUDA);
    pr_set_error_handler(NULL);
    return NULL;
}

static void test_own_stream_never_waits_for_the_legacy_one(void **state)
{
    (void)state;
    static held_worker w;   /* large, and a jmp_buf: off the stack */
    pthread_t tid;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)64 << 20);
    const size_t mine = (size_t)1 << 20;
    void *held_here = pr_cuda_malloc(mine);   /* in the shared pool, live while the thread runs */
    assert_int_equal(pthread_create(&tid, &attr, run_held, &w), 0);
    pthread_join(tid, NULL);
    pthread_attr_destroy(&attr);
    PR_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));   /* the hold is over before the_hold goes */
    size_t here = 0;
    pr_cuda_mem_stats(&here, NULL, NULL);
    pr_cuda_free(held_here, mine);
    if (w.failed) fail_msg("%s", w.msg);
    assert_true(here >= mine);
    assert_int_equal(w.current_at_begin, 0);   /* the thread's pool is not the shared one */
    /* the inputs give results the stale memory cannot pass for */
    assert_memory_not_equal(w.want, w.other, sizeof w.want);
    assert_memory_not_equal(w.want_g, w.other_g, sizeof w.want_g);
    if (!w.legacy_busy || w.seconds > HOLD_S / 2)
        fail_msg("the thread's work took %.1f s and the legacy stream was %s at its end: it waited for the legacy "
                 "stream (a device-wide sync, or work queued there)", w.seconds, w.legacy_busy ? "held" : "free");
    if (memcmp(w.got, w.want, sizeof w.want) || w.got_sum != w.want_sum)
        fail_msg("eager ops under the hold read back other values (sum %.9g, unheld %.9g, stale %.9g): some of "
                 "them ran on the legacy stream", w.got_sum, w.want_sum, w.other_sum);
    if (memcmp(w.got_g, w.want_g, sizeof w.want_g))
        fail_msg("the graph replayed under the hold read back other values: it ran on the legacy stream");
    assert_int_equal(w.current, 0);
}

/* ---- a capture that fails lets the driver gate go ------------------------------------ */
/* tensor/cuda.cu's gate: a capture holds it from begin to end, so a thread
 * whose step fails inside one (pr_fatal, its handler jumping out, as a
 * grid's worker's does) must let it go, or every other thread's next
 * allocation, capture or replay waits forever */
static jmp_buf capture_failed;
static void fatal_in_capture(const char *msg)
{
    (void)msg;
    longjmp(capture_failed, 1);
}

static void *fail_inside_capture(void *arg)
{
    bool *failed = arg;
    pr_set_error_handler(fatal_in_capture);
    if (setjmp(capture_failed) == 0) {
        pr_device_thread_begin(PR_CUDA);
        pr_cuda_graph_begin();
        pr_fatal("a step's error while it is captured");
    }
    *failed = true;   /* its stream and capture are left as a grid's failed worker leaves them */
    pr_set_error_handler(NULL);
    return NULL;
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, captured;
} after_failure;

static void *capture_after_failure(void *arg)
{
    after_failure *a = arg;
    const size_t n = (size_t)1 << 20;
    pr_device_thread_begin(PR_CUDA);
    void *p = pr_cuda_malloc(n);   /* a new pool's first block: a cudaMalloc, through the gate */
    pr_cuda_graph *g = NULL;
    char why[256];
    pr_cuda_graph_begin();
    pr_cuda_memset0(p, n);
    bool captured = pr_cuda_graph_end(&g, why, sizeof why) == 0;
    if (g) {
        pr_cuda_graph_replay(g);
        pr_cuda_sync();
        pr_cuda_graph_free(g);
    }
    pr_cuda_free(p, n);
    pr_device_thread_end(PR_CUDA);
    pthread_mutex_lock(&a->mu);
    a->done = true, a->captured = captured;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void test_failed_capture_lets_the_gate_go(void **state)
{
    (void)state;
    bool failed = false;
    pthread_t tid;
    assert_int_equal(pthread_create(&tid, NULL, fail_inside_capture, &failed), 0);
    pthread_join(tid, NULL);
    assert_true(failed);
    static after_failure a = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false};
    assert_int_equal(pthread_create(&tid, NULL, capture_after_failure, &a), 0);
    struct timespec until = seconds_from_now(60);
    pthread_mutex_lock(&a.mu);
    while (!a.done && pthread_cond_timedwait(&a.cv, &a.mu, &until) != ETIMEDOUT) continue;
    bool done = a.done, captured = a.captured;
    pthread_mutex_unlock(&a.mu);
    if (!done) fail_msg("another thread's allocation and capture waited 60 s: the failed capture kept the driver gate");
    pthread_join(tid, NULL);
    assert_true(captured);
}

static int make_root(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/prism_test_cuda_threads_%d", (int)getpid());
    return mkdir(root, 0755);
}

static int remove_root(void **state)
{
    (void)state;
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_thread_has_its_own_stream),
        cmocka_unit_test(test_blas_handles_outlive_their_threads),
        cmocka_unit_test(test_threads_train_as_alone),
        cmocka_unit_test(test_own_stream_never_waits_for_the_legacy_one),
        cmocka_unit_test(test_failed_capture_lets_the_gate_go),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, make_root, remove_root));
}
#else
int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    return 1;   /* not reached: a build without CUDA has no GPU to use */
}
#endif
