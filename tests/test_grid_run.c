/* tests/test_grid_run.c: running a grid (lab/grid_run.c) without the
 * command: a tiny grid of two models x parity x two seeds.
 *
 * - cells in table order, their labels, folders and configs (the grid's set,
 *   then the plan's sets; a checkpoint every fifth of the steps; the seed);
 *   a bad set refused before any cell runs, naming it;
 * - a run trains every cell and writes its result; the next run reuses them;
 *   a cell whose result is lost continues from its checkpoint and gives the
 *   same value; the dry run says which cells are done, to resume or new;
 * - two worker processes, each set up by the caller's hook, give the table
 *   one process gives; two worker threads, training side by side, give
 *   every cell's metrics and per-step losses bit for bit as one job does;
 * - a cell that cannot run is counted as failed, the others still run (with
 *   one job and with worker threads); a fatal error in a worker thread
 *   stops that thread alone;
 *   --metric naming a metric no cell reports is refused.
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lab/lab.h"
#include "tests/pr_test.h"

static pr_grid grid;  /* large: kept off the stack */
static char root[128];

static const char *const tiny_grid =
    "{\"name\":\"tiny\",\"models\":[\"gdn\",\"linattn\"],\"tasks\":[\"parity\"],\"seeds\":2,\"steps\":4,"
    "\"set\":{\"d_model\":8,\"seq_len\":16,\"train.batch\":4,\"train.eval_batches\":1}}";

static pr_grid_plan plan_in(const char *name, char *dir, size_t n)
{
    pr_err err;
    if (pr_grid_parse(&grid, tiny_grid, "tiny", &err)) fail_msg("%s", err.msg);
    snprintf(dir, n, "%s/%s", root, name);
    return (pr_grid_plan){.g = &grid, .root = dir};
}

static void test_cells(void **state)
{
    (void)state;
    char dir[256], cell[1100], label[120];
    pr_grid_plan p = plan_in("cells", dir, sizeof dir);
    assert_int_equal(pr_grid_cells(&grid), 4);
    int v, k, s;
    pr_grid_cell_axes(&grid, 3, &v, &k, &s);
    assert_int_equal(v, 1), assert_int_equal(k, 0), assert_int_equal(s, 1);
    pr_grid_cell_label(&grid, 1, label, sizeof label);
    assert_string_equal(label, "gdn parity s2");

    pr_config c;
    pr_train_opts o;
    pr_err err;
    const char *sets[] = {"train.batch=2"};
    p.sets = sets, p.n_sets = 1;
    assert_int_equal(pr_grid_cell_open(&p, 3, cell, sizeof cell, &c, &o, &err), 0);
    char want[300];
    snprintf(want, sizeof want, "%s/linattn/parity/s2", dir);
    assert_string_equal(cell, want);
    assert_string_equal(c.mixer, "linattn");
    assert_int_equal(c.d_model, 8);    /* the grid's set */
    assert_int_equal(o.batch, 2);      /* the plan's set comes after it */
    assert_int_equal(o.steps, 4);
    assert_int_equal(o.ckpt_every, 1); /* a fifth of 4 steps, at least 1 */
    assert_int_equal(o.seed, 2), assert_int_equal(c.seed, 2);
    assert_int_equal(pr_grid_check_cells(&p, &err), 0);

    sets[0] = "bogus=1";
    assert_int_equal(pr_grid_check_cells(&p, &err), -1);
    assert_non_null(strstr(err.msg, "--set: config: unknown key 'bogus'"));
    char what[640];
    assert_int_equal(pr_grid_cell_state(&p, 0, cell, sizeof cell, what, sizeof what), PR_CELL_BAD);
    assert_non_null(strstr(what, "bad config: --set"));
    assert_int_equal(pr_grid_drop_unavailable(&(pr_grid_plan){.g = &grid, .root = dir}, &grid), 1);
}

/* every cell's value, read back as the tables read it */
static void collect(const pr_grid_plan *p, double *value)
{
    pr_grid_results res;
    assert_int_equal(pr_grid_collect(p, value, &res), 0);
    assert_string_equal(res.metric[0], "acc");
    for (int i = 0; i < pr_grid_cells(p->g); i++) assert_true(value[i] >= 0 && value[i] <= 1);
}

static void test_run_resume_and_reuse(void **state)
{
    (void)state;
    char dir[256], cell[1100], what[640], path[1200];
    pr_grid_plan p = plan_in("one", dir, sizeof dir);
    assert_int_equal(pr_grid_cell_state(&p, 0, cell, sizeof cell, what, sizeof what), PR_CELL_NEW);
    assert_string_equal(what, "new, 4 steps");

    pr_grid_tally n;
    pr_grid_exec one = {.dev = PR_CPU, .jobs = 1};
    assert_int_equal(pr_grid_run(&p, &one, &n), 0);
    assert_int_equal(n.ran, 4), assert_int_equal(n.reused, 0), assert_int_equal(n.failed, 0);
    double first[4], again[4];
    collect(&p, first);
    assert_int_equal(pr_grid_cell_state(&p, 2, cell, sizeof cell, what, sizeof what), PR_CELL_DONE);
    assert_non_null(strstr(what, "done, acc "));

    /* a lost result: the cell continues from its last checkpoint (step 4) */
    snprintf(path, sizeof path, "%s/result.json", cell);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(pr_grid_cell_state(&p, 2, cell, sizeof cell, what, sizeof what), PR_CELL_RESUME);
    assert_string_equal(what, "resumes from step 4 of 4");
    assert_int_equal(pr_grid_dry_run(&p, stdout), 0);
    assert_int_equal(pr_grid_run(&p, &one, &n), 0);
    assert_int_equal(n.ran, 1), assert_int_equal(n.reused, 3), assert_int_equal(n.failed, 0);
    collect(&p, again);
    assert_memory_equal(first, again, sizeof first);

    /* a metric that no cell reports is an error, not a table of dashes */
    p.metric = "bogus";
    double value[4];
    pr_grid_results res;
    assert_int_equal(pr_grid_collect(&p, value, &res), -1);
    p.metric = "loss";   /* one that they do */
    assert_int_equal(pr_grid_collect(&p, value, &res), 0);
    assert_string_equal(res.metric[0], "loss");
    assert_true(isfinite(value[0]) && value[0] > 0);
}

/* the caller's hook, in each worker process: leaves a file naming the worker */
static void mark_worker(void *user, int worker, int jobs)
{
    char path[300];
    snprintf(path, sizeof path, "%s/worker-%d-of-%d", (const char *)user, worker, jobs);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
}

/* the hook of worker threads: marks, then waits (10 s at most) until every
 * worker has, so the threads train their first cells at the same time */
static pthread_mutex_t met_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t met_cv = PTHREAD_COND_INITIALIZER;
static int met;

static void meet_worker(void *user, int worker, int jobs)
{
    mark_worker(user, worker, jobs);
    struct timespec until;
    timespec_get(&until, TIME_UTC);
    until.tv_sec += 10;
    pthread_mutex_lock(&met_lock);
    met++;
    pthread_cond_broadcast(&met_cv);
    while (met < jobs && pthread_cond_timedwait(&met_cv, &met_lock, &until) == 0) continue;
    pthread_mutex_unlock(&met_lock);
}

static void test_workers_give_the_same_table(void **state)
{
    (void)state;
    char dir1[256], dir2[256], path[400];
    pr_grid_plan p1 = plan_in("one-job", dir1, sizeof dir1), p2 = plan_in("two-jobs", dir2, sizeof dir2);
    assert_int_equal(pr_make_dirs(dir2, &(pr_err){0}), 0);
    pr_grid_tally n;
    assert_int_equal(pr_grid_run(&p1, &(pr_grid_exec){.dev = PR_CPU, .jobs = 1}, &n), 0);
    pr_grid_exec two = {.dev = PR_CPU, .jobs = 2, .worker_setup = mark_worker, .user = dir2};
    assert_int_equal(pr_grid_run(&p2, &two, &n), 0);
    assert_int_equal(n.ran, 4), assert_int_equal(n.failed, 0);
    for (int j = 0; j < 2; j++) {
        snprintf(path, sizeof path, "%s/worker-%d-of-2", dir2, j);
        assert_int_equal(access(path, F_OK), 0);
    }
    double a[4], b[4];
    collect(&p1, a);
    collect(&p2, b);
    assert_memory_equal(a, b, sizeof a);
}

/* a run file's text without its timings (tokens_per_s, time_s), which differ between runs */
static char *read_untimed(const char *dir, const char *name)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    pr_err err;
    char *text = pr_read_text(path, &err);
    if (!text) fail_msg("%s", err.msg);
    static const char *const timed[] = {"\"tokens_per_s\":", "\"time_s\":"};
    for (int k = 0; k < 2; k++)
        for (char *at; (at = strstr(text, timed[k]));) {
            size_t keep = strcspn(at + strlen(timed[k]), ",}\n") + strlen(timed[k]);
            memmove(at, at + keep, strlen(at + keep) + 1);
        }
    return text;
}

static void test_threads_give_the_same_bits(void **state)
{
    (void)state;
    char dir1[256], dir2[256], path[400], cell1[1100], cell2[1100];
    pr_grid_plan p1 = plan_in("one-job-t", dir1, sizeof dir1), p2 = plan_in("two-threads", dir2, sizeof dir2);
    assert_int_equal(pr_make_dirs(dir2, &(pr_err){0}), 0);
    pr_grid_tally n;
    assert_int_equal(pr_grid_run(&p1, &(pr_grid_exec){.dev = PR_CPU, .jobs = 1}, &n), 0);
    pr_grid_exec two = {.dev = PR_CPU, .jobs = 2, .threads = true, .worker_setup = meet_worker, .user = dir2};
    assert_int_equal(pr_grid_run(&p2, &two, &n), 0);
    assert_int_equal(n.ran, 4), assert_int_equal(n.failed, 0);
    assert_int_equal(met, 2);   /* both threads met, so two cells trained at once */
    for (int j = 0; j < 2; j++) {
        snprintf(path, sizeof path, "%s/worker-%d-of-2", dir2, j);
        assert_int_equal(access(path, F_OK), 0);
    }
    for (int i = 0; i < pr_grid_cells(&grid); i++) {
        pr_config c;
        pr_train_opts o;
        pr_err err;
        assert_int_equal(pr_grid_cell_open(&p1, i, cell1, sizeof cell1, &c, &o, &err), 0);
        assert_int_equal(pr_grid_cell_open(&p2, i, cell2, sizeof cell2, &c, &o, &err), 0);
        const char *files[] = {"result.json", "metrics.jsonl"};
        for (int f = 0; f < 2; f++) {
            char *a = read_untimed(cell1, files[f]), *b = read_untimed(cell2, files[f]);
            assert_non_null(strstr(a, "\"loss\""));   /* what is compared holds the losses */
            assert_string_equal(a, b);
            free(a), free(b);
        }
    }
}

/* a cell that cannot run fails alone, whether one job or worker threads run the grid */
static void failed_cell_is_counted(const char *name, pr_grid_exec x)
{
    char dir[256], cell[1100], parent[1100];
    pr_grid_plan p = plan_in(name, dir, sizeof dir);
    pr_config c;
    pr_train_opts o;
    pr_err err;
    assert_int_equal(pr_grid_cell_open(&p, 0, cell, sizeof cell, &c, &o, &err), 0);
    snprintf(parent, sizeof parent, "%s", cell);
    *strrchr(parent, '/') = '\0';
    assert_int_equal(pr_make_dirs(parent, &err), 0);
    FILE *f = fopen(cell, "w");   /* a file where the cell's folder should be */
    assert_non_null(f);
    fclose(f);
    pr_grid_tally n;
    assert_int_equal(pr_grid_run(&p, &x, &n), 0);
    assert_int_equal(n.ran, 3), assert_int_equal(n.failed, 1);
    double value[4];
    pr_grid_results res;
    assert_int_equal(pr_grid_collect(&p, value, &res), 0);
    assert_true(isnan(value[0]) && isfinite(value[1]));
}

static void test_a_failed_cell_is_counted(void **state)
{
    (void)state;
    failed_cell_is_counted("failing", (pr_grid_exec){.dev = PR_CPU, .jobs = 1});
    failed_cell_is_counted("failing-threads", (pr_grid_exec){.dev = PR_CPU, .jobs = 2, .threads = true});
}

/* worker 1's setup fails as a fatal error would inside a cell */
static void fail_worker_1(void *user, int worker, int jobs)
{
    (void)user, (void)jobs;
    if (worker == 1) pr_fatal("worker 1 cannot start (on purpose)");
}

/* a fatal error in a worker thread stops that thread only: the process goes
 * on and the other thread runs every cell */
static void test_a_fatal_error_stops_one_thread(void **state)
{
    (void)state;
    char dir[256];
    pr_grid_plan p = plan_in("fatal-thread", dir, sizeof dir);
    pr_grid_tally n;
    pr_grid_exec x = {.dev = PR_CPU, .jobs = 2, .threads = true, .worker_setup = fail_worker_1};
    assert_int_equal(pr_grid_run(&p, &x, &n), 0);
    assert_int_equal(n.ran, 4), assert_int_equal(n.failed, 0);
    double value[4];
    collect(&p, value);
}

static int make_root(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/prism_test_grid_run_%d", (int)getpid());
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cells),
        cmocka_unit_test(test_run_resume_and_reuse),
        cmocka_unit_test(test_workers_give_the_same_table),
        cmocka_unit_test(test_threads_give_the_same_bits),
        cmocka_unit_test(test_a_failed_cell_is_counted),
        cmocka_unit_test(test_a_fatal_error_stops_one_thread),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, make_root, remove_root));
}
