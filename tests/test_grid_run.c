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
 *   --metric naming a metric no cell reports is refused;
 * - a cell whose run was made under another config (a key, or the data
 *   generator's version in manifest.json) is stale: named with its keys,
 *   never reused by default; --stale rerun moves it aside and trains it
 *   afresh; --stale keep reads it, continues it under its own config, and
 *   the table marks it. Keys that change no result do not make it stale.
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
static bool file_holds(const char *dir, const char *name, const char *text)
{
    char path[1300];
    pr_err err;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *all = pr_read_text(path, &err);
    bool found = all && strstr(all, text);
    free(all);
    return found;
}

static void collect(const pr_grid_plan *p, double *value)
{
    pr_grid_results res;
    assert_int_equal(pr_grid_collect(p, value, &res), 0);
    assert_string_equal(res.metric[0], "acc");
    for (int i = 0; i < pr_grid_cells(p->g); i++) assert_true(value[i] >= 0 && value[i] <= 1);
    /* each cell's precision from its config.json: auto on the CPU trains in f32 */
    assert_int_equal(res.precision_cells[PR_PREC_F32], pr_grid_cells(p->g));
    assert_int_equal(res.precision_cells[PR_PREC_TF32] + res.precision_cells[PR_PREC_BF16], 0);
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
    /* where the cell's time went: training and scoring */
    assert_true(file_holds(cell, "result.json", "\"train_s\":") && file_holds(cell, "result.json", "\"eval_s\":"));

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

/* a run file's text without its timings (tokens_per_s, time_s, train_s, eval_s), which differ between runs */
static char *read_untimed(const char *dir, const char *name)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    pr_err err;
    char *text = pr_read_text(path, &err);
    if (!text) fail_msg("%s", err.msg);
    static const char *const timed[] = {"\"tokens_per_s\":", "\"time_s\":", "\"train_s\":", "\"eval_s\":"};
    for (int k = 0; k < 4; k++)
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

/* ---- stale cells ---- */
static const char *const one_cell_grid =
    "{\"name\":\"one\",\"models\":[\"gdn\"],\"tasks\":[\"parity\"],\"seeds\":1,\"steps\":4,"
    "\"set\":{\"d_model\":8,\"seq_len\":16,\"train.batch\":4,\"train.eval_batches\":1}}";

static pr_grid_plan one_cell_plan(const char *name, char *dir, size_t n, const char *json)
{
    pr_err err;
    if (pr_grid_parse(&grid, json, "one", &err)) fail_msg("%s", err.msg);
    snprintf(dir, n, "%s/%s", root, name);
    return (pr_grid_plan){.g = &grid, .root = dir};
}

/* what a table writer (markdown, csv, json) writes of res, in buf */
static void table_text(void (*write)(const pr_grid_results *, FILE *), const pr_grid_results *res, char *buf,
                       size_t n)
{
    FILE *f = fmemopen(buf, n, "w");
    assert_non_null(f);
    write(res, f);
    fclose(f);
}

/* what the dry run prints, in buf */
static void dry_run_text(const pr_grid_plan *p, char *buf, size_t n)
{
    FILE *f = fmemopen(buf, n, "w");
    assert_non_null(f);
    assert_int_equal(pr_grid_dry_run(p, f), 0);
    fclose(f);
}

static void test_a_changed_key_makes_a_cell_stale(void **state)
{
    (void)state;
    char dir[256], cell[1100], what[640], buf[4096], moved[1200];
    pr_grid_plan p = one_cell_plan("stale", dir, sizeof dir, one_cell_grid);
    pr_grid_tally n;
    pr_grid_exec one = {.dev = PR_CPU, .jobs = 1};
    assert_int_equal(pr_grid_run(&p, &one, &n), 0);
    assert_int_equal(n.ran, 1);
    pr_cell_diff d;
    pr_err err;
    assert_int_equal(pr_grid_cell_diff(&p, 0, cell, sizeof cell, &d, &err), 0);
    assert_int_equal(d.n, 0);

    /* keys that change no result: not stale */
    const char *quiet[] = {"train.log_every=2", "train.eval_every=2", "train.ckpt_every=3", "train.cuda_graph=off"};
    p.sets = quiet, p.n_sets = 4;
    assert_int_equal(pr_grid_cell_diff(&p, 0, cell, sizeof cell, &d, &err), 0);
    assert_int_equal(d.n, 0);
    assert_int_equal(pr_grid_cell_state(&p, 0, cell, sizeof cell, what, sizeof what), PR_CELL_DONE);

    /* a key that does: named with both values, by the dry run too */
    const char *lr[] = {"train.lr=0.002", "d_model=12"};
    p.sets = lr, p.n_sets = 2;
    assert_int_equal(pr_grid_cell_diff(&p, 0, cell, sizeof cell, &d, &err), 0);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.text, "d_model 8 -> 12, train.lr 0.003 -> 0.002 (2 keys differ)");
    p.n_sets = 1;
    assert_int_equal(pr_grid_cell_state(&p, 0, cell, sizeof cell, what, sizeof what), PR_CELL_STALE);
    assert_string_equal(what, "stale: train.lr 0.003 -> 0.002 (1 key differs)");
    dry_run_text(&p, buf, sizeof buf);
    assert_non_null(strstr(buf, "gdn parity s1"));
    assert_non_null(strstr(buf, "stale: train.lr 0.003 -> 0.002 (1 key differs)"));
    assert_non_null(strstr(buf, "1 cells: 0 done, 0 to resume, 0 new, 1 stale; nothing was run"));
    assert_int_equal(pr_grid_stale_report(&p, NULL), 1);

    /* by default never reused nor retrained: the cell fails, its run untouched */
    assert_int_equal(pr_grid_run(&p, &one, &n), 0);
    assert_int_equal(n.ran, 0), assert_int_equal(n.reused, 0), assert_int_equal(n.failed, 1);
    assert_true(file_holds(cell, "config.json", "\"lr\":\t0.003"));

    /* keep: read as it is, marked in the table */
    p.stale = PR_STALE_KEEP;
    assert_int_equal(pr_grid_run(&p, &one, &n), 0);
    assert_int_equal(n.reused, 1), assert_int_equal(n.failed, 0);
    double value[1];
    pr_grid_results res;
    assert_int_equal(pr_grid_collect(&p, value, &res), 0);
    assert_int_equal(res.stale[0][0], 1);
    table_text(pr_grid_write_markdown, &res, buf, sizeof buf);
    assert_non_null(strstr(buf, " " PR_GRID_STALE_MARK " |"));
    assert_non_null(strstr(buf, "stale config"));
    table_text(pr_grid_write_csv, &res, buf, sizeof buf); /* the csv and json say it too */
    assert_non_null(strstr(buf, ",stale_runs\n"));
    assert_non_null(strstr(buf, ",1\n"));
    table_text(pr_grid_write_json, &res, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"stale_runs\":\t1"));

    /* rerun: the folder moved aside whole, the cell trained afresh and current */
    p.stale = PR_STALE_RERUN;
    assert_int_equal(pr_grid_run(&p, &one, &n), 0);
    assert_int_equal(n.ran, 1), assert_int_equal(n.failed, 0);
    snprintf(moved, sizeof moved, "%s.stale-1", cell);
    assert_true(file_holds(moved, "config.json", "\"lr\":\t0.003"));
    assert_true(file_holds(moved, "result.json", "\"steps\":\t4"));
    assert_true(file_holds(cell, "config.json", "\"lr\":\t0.002"));
    assert_int_equal(pr_grid_cell_diff(&p, 0, cell, sizeof cell, &d, &err), 0);
    assert_int_equal(d.n, 0);
    assert_int_equal(pr_grid_collect(&p, value, &res), 0);
    assert_int_equal(res.stale[0][0], 0);

    /* keep on an unfinished stale cell: it continues under its own config
     * (lr 0.002) to the grid's budget, and stays stale */
    const char *lr4[] = {"train.lr=0.004"};
    p.sets = lr4, p.stale = PR_STALE_KEEP;
    char path[1300];
    snprintf(path, sizeof path, "%s/result.json", cell);
    assert_int_equal(unlink(path), 0);
    grid.steps = 5;
    assert_int_equal(pr_grid_run(&p, &one, &n), 0);
    assert_int_equal(n.ran, 1), assert_int_equal(n.failed, 0);
    assert_true(file_holds(cell, "config.json", "\"lr\":\t0.002"));
    assert_true(file_holds(cell, "result.json", "\"steps\":\t5"));
    assert_int_equal(pr_grid_cell_state(&p, 0, cell, sizeof cell, what, sizeof what), PR_CELL_STALE);
}

/* the data generator's version: a run whose manifest records none was made
 * from version 1, stale for a generator at 2 (authors-style palindrome) */
static void test_a_new_data_version_makes_a_cell_stale(void **state)
{
    (void)state;
    char dir[256], cell[1100], path[1300];
    pr_grid_plan p = one_cell_plan(
        "stale-data", dir, sizeof dir,
        "{\"name\":\"one\",\"models\":[\"gdn\"],\"tasks\":[\"palindrome\"],\"seeds\":1,\"steps\":2,"
        "\"set\":{\"probe.style\":\"authors\",\"vocab\":32,\"d_model\":8,\"seq_len\":16,\"train.batch\":4,"
        "\"train.eval_batches\":1}}");
    pr_grid_tally n;
    assert_int_equal(pr_grid_run(&p, &(pr_grid_exec){.dev = PR_CPU, .jobs = 1}, &n), 0);
    assert_int_equal(n.ran, 1);
    pr_cell_diff d;
    pr_err err;
    assert_int_equal(pr_grid_cell_diff(&p, 0, cell, sizeof cell, &d, &err), 0);
    assert_int_equal(d.n, 0);
    assert_true(file_holds(cell, "manifest.json", "\"data_version\":\t2"));
    /* the manifest of a run from before versions were recorded */
    snprintf(path, sizeof path, "%s/manifest.json", cell);
    assert_int_equal(pr_write_file_atomic(path, "{\"git_commit\": \"0\", \"seed\": 1}\n", &err), 0);
    assert_int_equal(pr_grid_cell_diff(&p, 0, cell, sizeof cell, &d, &err), 0);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.text, "data_version 1 -> 2 (1 key differs)");
}

static int make_root(void **state)
{
    (void)state;
    return pr_test_make_root(root, sizeof root, "test_grid_run");
}

static int remove_root(void **state)
{
    (void)state;
    return pr_test_remove_root(root);
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
        cmocka_unit_test(test_a_changed_key_makes_a_cell_stale),
        cmocka_unit_test(test_a_new_data_version_makes_a_cell_stale),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, make_root, remove_root));
}
