/* tests/test_dist.c: the data-parallel pieces, on the CPU.
 *
 * - the shm communicator between two processes (a fork): all-reduce of
 *   tensors larger than one slot, host averages, broadcast; a missing rank
 *   times out naming itself and the rank it waited for; a rank that gives
 *   up makes the other's wait fail naming it;
 * - NCCL's search: the library named (PRISM_NCCL_LIB's value) a missing
 *   file and a library that is not NCCL, and the default search, each
 *   listing where it looked; NCCL_NVLS_ENABLE is forced to 0;
 * - where a process stands: the launchers' variables, as the command hands
 *   their values in, in order, each bad value named;
 * - sharding of a global batch; ZeRO-1 ownership (every parameter owned
 *   once, shares balanced);
 * - rank 1 of a run trains and checkpoints without writing a file;
 * - gradient buckets: on a small model with a tiny bucket size, every grad
 *   handed to the communicator during the backward is already final, every
 *   parameter is sent exactly once, and buckets go out before the backward
 *   ends (the overlap).
 */
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/pr_test.h"
#include "train/train.h"

static char dist_file[128];

static pr_dist_env env_of(int rank, int world)
{
    pr_dist_env e = {.rank = rank, .world = world, .local_rank = rank};
    snprintf(e.file, sizeof e.file, "%s", dist_file);
    return e;
}

/* ---- shm, two processes ------------------------------------------------------------ */
#define BIG 300000   /* over two slot-sized chunks */

/* rank r's part: checks what it gets back; returns 0 when all is right */
static int shm_rank(int rank)
{
    pr_dist_env e = env_of(rank, 2);
    pr_comm *c;
    pr_err err;
    if (pr_comm_shm_open(&c, &e, 20, &err)) return fprintf(stderr, "%s\n", err.msg), 10;
    pr_arena *a = pr_arena_new("t", 0);
    pr_tensor *big = pr_empty(a, PR_F32, PR_CPU, PR_DIMS(BIG));
    pr_tensor *small = pr_full(a, PR_F32, PR_CPU, PR_DIMS(3), rank ? 3.0 : 1.0);
    float *b = big->data;
    for (int64_t i = 0; i < BIG; i++) b[i] = (float)((rank + 1) * (i % 1000));
    pr_tensor *ts[2] = {big, small};
    int bad = c->allreduce_avg(c, ts, 2, &err) ? 11 : 0;
    for (int64_t i = 0; i < BIG && !bad; i++)
        if (b[i] != 1.5f * (float)(i % 1000)) bad = 12;   /* mean of 1x and 2x */
    if (!bad && ((float *)small->data)[2] != 2.0f) bad = 13;
    double host[2] = {rank, 10.0 * rank};
    if (!bad && (c->avg_host(c, host, 2, &err) || host[0] != 0.5 || host[1] != 5.0)) bad = 14;
    pr_fill_(small, rank == 1 ? 7.0 : 0.0);
    if (!bad && (c->broadcast(c, &small, 1, 1, &err) || ((float *)small->data)[0] != 7.0f)) bad = 15;
    if (!bad && c->barrier(c, &err)) bad = 16;
    if (bad) fprintf(stderr, "rank %d: check %d failed %s\n", rank, bad, err.msg);
    pr_arena_free(a);
    pr_comm_free(c);
    return bad;
}

static void test_shm_collectives_between_two_processes(void **state)
{
    (void)state;
    unlink(dist_file);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(shm_rank(1));
    assert_int_equal(shm_rank(0), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_shm_missing_rank_times_out(void **state)
{
    (void)state;
    unlink(dist_file);
    pr_dist_env e = env_of(0, 2);
    pr_comm *c;
    pr_err err;
    assert_int_equal(pr_comm_shm_open(&c, &e, 0.2, &err), 0);
    assert_int_equal(c->barrier(c, &err), -1);
    assert_non_null(strstr(err.msg, "rank 0: shm barrier: timed out"));
    assert_non_null(strstr(err.msg, "waiting for rank 1"));
    pr_comm_free(c);
}

static void test_shm_abort_names_the_rank(void **state)
{
    (void)state;
    unlink(dist_file);
    pr_dist_env e = env_of(0, 2);
    pr_comm *c;
    pr_err err;
    assert_int_equal(pr_comm_shm_open(&c, &e, 20, &err), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        pr_dist_env e1 = env_of(1, 2);
        pr_comm *c1;
        if (pr_comm_shm_open(&c1, &e1, 20, &err)) _exit(1);
        c1->abort(c1);
        _exit(0);
    }
    assert_int_equal(c->barrier(c, &err), -1);
    assert_non_null(strstr(err.msg, "rank 1 gave up"));
    waitpid(pid, NULL, 0);
    pr_comm_free(c);
}

/* ---- NCCL's search ------------------------------------------------------------------ */
static void test_nccl_search_errors(void **state)
{
    (void)state;
    void *h;
    char found[1024];
    pr_err err;
    setenv("NCCL_NVLS_ENABLE", "1", 1);
    pr_nccl_search where = {.lib = "/nonexistent/libnccl.so.2"};
    assert_int_equal(pr_nccl_load(&where, &h, found, sizeof found, &err), -1);
    assert_string_equal(getenv("NCCL_NVLS_ENABLE"), "0");
    assert_non_null(strstr(err.msg, "PRISM_NCCL_LIB=/nonexistent/libnccl.so.2"));
    assert_non_null(strstr(err.msg, "/nonexistent/libnccl.so.2: "));

    where.lib = "libm.so.6";   /* loads, but is not NCCL */
    assert_int_equal(pr_nccl_load(&where, &h, found, sizeof found, &err), -1);
    assert_non_null(strstr(err.msg, "libm.so.6: loads, but is not NCCL"));

    where = (pr_nccl_search){.venv = "/nonexistent-venv", .home = "/nonexistent-home"};
    if (pr_nccl_load(&where, &h, found, sizeof found, &err) == 0) {
        printf("(NCCL found at %s: the default search's failure is not checked here)\n", found);
        return;
    }
    printf("%s\n", err.msg);
    assert_non_null(strstr(err.msg, "\n  libnccl.so.2: "));
    assert_non_null(strstr(err.msg, "for nvidia/nccl/lib/libnccl.so.2 under"));
    assert_non_null(strstr(err.msg, "\n  /usr/local/lib/python3*/dist-packages: none"));
    assert_non_null(strstr(err.msg, "\n  /usr/local/lib/python3*/site-packages: none"));
    assert_non_null(strstr(err.msg, "\n  /usr/lib/python3*/dist-packages: none"));
    assert_non_null(strstr(err.msg, "\n  /nonexistent-home/.local/lib/python3*/site-packages: none"));
    assert_non_null(strstr(err.msg, "\n  /nonexistent-venv/lib/python3*/site-packages: none"));
}

/* ---- where a process stands ---------------------------------------------------------- */
/* the values of launcher `family` (its index in pr_dist_var_names): rank, world, local rank */
static void set_launcher(pr_dist_vars *v, int family, const char *rank, const char *world, const char *local)
{
    v->value[family][0] = rank, v->value[family][1] = world, v->value[family][2] = local;
}

static void test_env_from_launchers(void **state)
{
    (void)state;
    pr_dist_env e;
    pr_err err;
    pr_dist_vars v = {.nccl = {.lib = "/my/libnccl.so.2"}};
    assert_int_equal(pr_dist_env_parse(&e, &v, NULL, &err), 0);   /* nothing set: one process */
    assert_int_equal(e.world, 1);
    assert_string_equal(e.nccl.lib, "/my/libnccl.so.2");   /* handed on to the nccl backend */
    assert_string_equal(pr_dist_var_names[1][0], "OMPI_COMM_WORLD_RANK");
    set_launcher(&v, 1, "5", "8", "1");
    assert_int_equal(pr_dist_env_parse(&e, &v, NULL, &err), -1);   /* several ranks need a rendezvous file */
    assert_non_null(strstr(err.msg, "rank 5 of 8: no rendezvous file: give --dist-file PATH"));
    v.dist_file = "/from/env";
    assert_int_equal(pr_dist_env_parse(&e, &v, NULL, &err), 0);
    assert_string_equal(e.file, "/from/env");
    assert_int_equal(pr_dist_env_parse(&e, &v, "/shared/id", &err), 0);   /* --dist-file wins */
    assert_int_equal(e.rank, 5);
    assert_int_equal(e.world, 8);
    assert_int_equal(e.local_rank, 1);
    assert_string_equal(e.file, "/shared/id");
    set_launcher(&v, 3, "3", "4", NULL);   /* Slurm's comes after Open MPI's */
    assert_int_equal(pr_dist_env_parse(&e, &v, "/x", &err), 0);
    assert_int_equal(e.rank, 5);
    set_launcher(&v, 1, NULL, NULL, NULL);
    assert_int_equal(pr_dist_env_parse(&e, &v, "/x", &err), 0);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.local_rank, 3);   /* no local rank: the rank */
    set_launcher(&v, 0, "2", "2", NULL);   /* prism's own launcher comes first */
    assert_int_equal(pr_dist_env_parse(&e, &v, "/x", &err), -1);
    assert_non_null(strstr(err.msg, "PRISM_RANK=2 is not below PRISM_WORLD_SIZE=2"));
    set_launcher(&v, 0, "x", "2", NULL);
    assert_int_equal(pr_dist_env_parse(&e, &v, "/x", &err), -1);
    assert_non_null(strstr(err.msg, "PRISM_RANK=x is not a number"));
    set_launcher(&v, 0, "1", "2", "-1");
    assert_int_equal(pr_dist_env_parse(&e, &v, "/x", &err), -1);
    assert_non_null(strstr(err.msg, "PRISM_LOCAL_RANK=-1 is not a number >= 0"));
}

/* ---- shards and owners --------------------------------------------------------------- */
static void test_shards_cover_the_batch(void **state)
{
    (void)state;
    pr_err err;
    int first, count, next = 0;
    for (int r = 0; r < 4; r++) {
        assert_int_equal(pr_dist_shard(12, r, 4, &first, &count, &err), 0);
        assert_int_equal(first, next);
        assert_int_equal(count, 3);
        next = first + count;
    }
    assert_int_equal(next, 12);
    assert_int_equal(pr_dist_shard(8, 0, 3, &first, &count, &err), -1);
    assert_non_null(strstr(err.msg, "train.batch=8 does not split evenly over 3 ranks"));
}

static pr_model *tiny_model(void)
{
    pr_config c = pr_config_default();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "probe", &err), 0);
    assert_int_equal(pr_config_set(&c, "d_model=8", &err), 0);
    assert_int_equal(pr_config_set(&c, "seq_len=8", &err), 0);
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    pr_model_init(m);
    return m;
}

static void test_zero_owners_are_balanced(void **state)
{
    (void)state;
    pr_model *m = tiny_model();
    const pr_params *p = m->params;
    int owner[512];
    assert_true(p->n < 512);
    int64_t load[3] = {0}, biggest = 0;
    pr_zero_owners(p, 3, owner);
    for (int i = 0; i < p->n; i++) {
        assert_true(owner[i] >= 0 && owner[i] < 3);
        load[owner[i]] += p->p[i].t->numel;
        if (p->p[i].t->numel > biggest) biggest = p->p[i].t->numel;
    }
    for (int r = 0; r < 3; r++)
        for (int q = 0; q < 3; q++) assert_true(load[r] - load[q] <= biggest);   /* greedy's bound */
    pr_model_free(m);
}

/* ---- buckets: a one-rank communicator that records what it is given ---------------------- */
typedef struct {
    pr_ctx *ctx;
    int calls, during_backward, n_seen;
    const pr_tensor *seen[512];
    double *snapshot[512];
} recorder;

static int record_allreduce(pr_comm *c, pr_tensor *const *ts, int n, pr_err *err)
{
    (void)err;
    recorder *r = c->impl;
    r->calls++;
    r->during_backward += r->ctx->on_node_backward != NULL;
    for (int i = 0; i < n; i++) {
        r->seen[r->n_seen] = ts[i];
        r->snapshot[r->n_seen] = malloc(sizeof(double) * (size_t)ts[i]->numel);
        pr_to_host_f64(ts[i], r->snapshot[r->n_seen++]);
    }
    return 0;
}

static int record_wait(pr_comm *c, pr_err *err) { (void)c, (void)err; return 0; }

static void test_buckets_hold_final_grads_once_each(void **state)
{
    (void)state;
    pr_model *m = tiny_model();
    pr_ctx *ctx = pr_ctx_new(1);
    recorder rec = {.ctx = ctx};
    pr_comm comm = {.rank = 0, .world = 1, .allreduce_avg = record_allreduce, .wait = record_wait, .impl = &rec};
    pr_ddp *d = pr_ddp_new(&comm, m->params, 2048);
    int32_t ids[2 * 8];
    for (int i = 0; i < 16; i++) ids[i] = i % m->cfg.vocab;
    pr_tensor *x = pr_from_host(ctx->step, PR_I32, PR_CPU, PR_DIMS(2, 8), ids);
    pr_tensor *loss = pr_lm_loss(ctx, m, x, x);
    pr_ddp_begin(d, ctx);
    pr_backward(ctx, loss);
    pr_err err;
    assert_int_equal(pr_ddp_end(d, ctx, &err), 0);
    const pr_params *p = m->params;
    assert_int_equal(rec.n_seen, p->n);
    const int *bucket_of;
    int n_buckets = pr_ddp_buckets(d, &bucket_of);
    assert_int_equal(n_buckets, rec.calls);
    assert_true(n_buckets > 2);
    assert_true(rec.during_backward >= 1);   /* at least one bucket left before the backward ended */
    for (int i = 0; i < p->n; i++) {
        int hits = 0;
        for (int k = 0; k < rec.n_seen; k++) {
            if (rec.seen[k] != p->p[i].t->grad) continue;
            hits++;
            double *now = malloc(sizeof(double) * (size_t)p->p[i].t->numel);
            pr_to_host_f64(p->p[i].t->grad, now);
            pr_assert_allclose(p->p[i].path, rec.snapshot[k], now, p->p[i].t->numel, 0, 0);   /* already final */
            free(now);
        }
        assert_int_equal(hits, 1);
        assert_true(bucket_of[i] >= 0 && bucket_of[i] < n_buckets);
    }
    for (int k = 0; k < rec.n_seen; k++) free(rec.snapshot[k]);
    pr_ddp_free(d);
    pr_params_release_grads(m->params);
    pr_ctx_free(ctx);
    pr_model_free(m);
}

/* ---- rank 0 alone writes the run directory ------------------------------------------------ */
static int same_allreduce(pr_comm *c, pr_tensor *const *ts, int n, pr_err *err)
{
    (void)c, (void)ts, (void)n, (void)err;
    return 0;
}

static int same_host(pr_comm *c, double *v, int n, pr_err *err)
{
    (void)c, (void)v, (void)n, (void)err;
    return 0;
}

static void test_rank1_writes_nothing(void **state)
{
    (void)state;
    /* rank 1 of 2 whose partner always holds the same values: the collectives change nothing */
    pr_comm comm = {.rank = 1, .world = 2, .backend = "test", .allreduce_avg = same_allreduce,
                    .avg_host = same_host, .wait = record_wait, .barrier = record_wait};
    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    pr_err err;
    assert_int_equal(pr_config_preset(&c, "probe", &err), 0);
    assert_int_equal(pr_config_set(&c, "d_model=8", &err), 0);
    assert_int_equal(pr_config_set(&c, "seq_len=8", &err), 0);
    o.steps = 2, o.batch = 4, o.ckpt_every = 1, o.eval_batches = 1, o.comm = &comm;
    char dir[160];
    snprintf(dir, sizeof dir, "%s.run", dist_file);
    pr_train_result res;
    if (pr_train(&c, &o, dir, false, PR_CPU, &res, &err)) fail_msg("%s", err.msg);
    assert_int_equal(res.steps, 2);
    assert_int_equal(access(dir, F_OK), -1);   /* no directory, no checkpoint, no metrics */
}

int main(void)
{
    snprintf(dist_file, sizeof dist_file, "/tmp/prism-test-dist-%ld", (long)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_collectives_between_two_processes),
        cmocka_unit_test(test_shm_missing_rank_times_out),
        cmocka_unit_test(test_shm_abort_names_the_rank),
        cmocka_unit_test(test_nccl_search_errors),
        cmocka_unit_test(test_env_from_launchers),
        cmocka_unit_test(test_shards_cover_the_batch),
        cmocka_unit_test(test_zero_owners_are_balanced),
        cmocka_unit_test(test_buckets_hold_final_grads_once_each),
        cmocka_unit_test(test_rank1_writes_nothing),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(dist_file);
    return rc;
}
