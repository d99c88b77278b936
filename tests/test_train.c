/* tests/test_train.c: the trainer's promises, on a tiny probe model.
 *
 * - a run killed in the middle of writing a checkpoint (the crash hook stops
 *   the process after the weights and half the state file) leaves the
 *   previous checkpoint named by `latest` and loadable;
 * - resuming that run reproduces the uninterrupted run bit for bit: the same
 *   weights file and the same optimizer moments (cosine schedule with warmup,
 *   so the learning rate depends on the step);
 * - the NaN trap: a NaN planted in one weight stops training at the next
 *   step, naming the first op that produced it, its layer and the step; no
 *   checkpoint is written after it.
 * - metrics.jsonl stays whole JSON lines: a NaN evaluation is written as
 *   null; a full disk stops the run naming the file and keeping the last
 *   checkpoint; resume cuts it to whole lines and never pads it, whatever the
 *   state's recorded length says;
 * - a state whose step or counts are damaged is refused, not resumed;
 * - one trainer at a time in a folder, and a fresh run refuses a folder that
 *   holds a run unless told to replace it;
 * - train.cuda_graph: its values, the plan's decision and reason for each case
 *   (the CPU, off, auto, a data-parallel run, a task without staging,
 *   dropout, mom, and a run that can be captured), and a CPU run asked for
 *   graphs trains eagerly and says so in its result.
 */
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tasks/tasks.h"
#include "tests/pr_test.h"
#include "train/train.h"

static char root[128];

static void setup_config(pr_config *c, pr_train_opts *o)
{
    pr_err err;
    *c = pr_config_default();
    *o = pr_train_defaults();
    assert_int_equal(pr_config_preset(c, "probe", &err), 0);
    assert_int_equal(pr_config_set(c, "d_model=8", &err), 0);
    assert_int_equal(pr_config_set(c, "seq_len=16", &err), 0);
    assert_int_equal(pr_config_set(c, "chunk=8", &err), 0);
    snprintf(o->task, sizeof o->task, "parity");
    o->steps = 6;
    o->batch = 4;
    o->ckpt_every = 3;
    o->eval_batches = 1;
    o->warmup = 2;
    o->lr = 1e-2;
    snprintf(o->schedule, sizeof o->schedule, "cosine");
}

static char *run_dir(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", root, name);
    return buf;
}

static unsigned char *slurp(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    assert_int_equal(fread(b, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return b;
}

static void expect_same_file(const char *a, const char *b)
{
    long na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    assert_int_equal(na, nb);
    if (memcmp(x, y, (size_t)na) != 0) fail_msg("%s and %s differ", a, b);
    free(x);
    free(y);
}

/* every tensor of two safetensors files equal byte for byte (metadata may differ) */
static void expect_same_tensors(const char *a, const char *b)
{
    pr_arena *ar = pr_arena_new("files", 0);
    pr_safetensors x, y;
    pr_err err;
    assert_int_equal(pr_safetensors_read(a, ar, &x, &err), 0);
    assert_int_equal(pr_safetensors_read(b, ar, &y, &err), 0);
    assert_int_equal(x.n, y.n);
    for (int i = 0; i < x.n; i++) {
        const pr_tensor *t = pr_safetensors_get(&y, x.names[i]);
        assert_non_null(t);
        if (memcmp(t->data, x.tensors[i]->data, pr_nbytes(t)) != 0) fail_msg("%s differs in %s", x.names[i], b);
    }
    pr_arena_free(ar);
}

/* task names fall into one family each: every probe name is a probe, and
 * lm and rec are their own */
static void test_task_families(void **state)
{
    (void)state;
    for (int i = 0; i < PR_PROBE_COUNT; i++) assert_int_equal(pr_task_family_of(pr_probe_names[i]), PR_TASK_PROBE);
    assert_int_equal(pr_task_family_of("lm"), PR_TASK_LM);
    assert_int_equal(pr_task_family_of("rec"), PR_TASK_REC);
    assert_int_equal(pr_task_family_of("LM"), PR_TASK_UNKNOWN);
    assert_int_equal(pr_task_family_of("sasrec"), PR_TASK_UNKNOWN);
    assert_false(pr_task_known(""));
}

static void expect_plan(const pr_config *c, const pr_train_opts *o, pr_device dev, bool stages, bool want,
                        const char *note)
{
    char got[320];
    assert_int_equal(pr_train_graph_plan(c, o, dev, stages, got, sizeof got), want);
    if (!strstr(got, note)) fail_msg("graph plan: '%s' does not say '%s'", got, note);
}

static void test_cuda_graph_plan(void **state)
{
    (void)state;
    pr_config c;
    pr_train_opts o;
    pr_err err;
    setup_config(&c, &o);
    assert_string_equal(o.cuda_graph, "auto");
    assert_int_equal(pr_train_set(&o, "train.cuda_graph=yes", &err), -1);
    assert_non_null(strstr(err.msg, "train.cuda_graph: 'yes' is not allowed (allowed: auto|on|off)"));
    expect_plan(&c, &o, PR_CUDA, true, true, "on (captured after 2 eager steps");   /* auto: on where it fits */
    pr_config automom = c;
    assert_int_equal(pr_config_set(&automom, "mixer=mom", &err), 0);
    expect_plan(&automom, &o, PR_CUDA, true, true, "on (captured");   /* mom.route=auto: padded on CUDA */
    expect_plan(&automom, &o, PR_CPU, true, false, "the CPU runs every step eagerly");
    assert_int_equal(pr_train_set(&o, "cuda_graph=off", &err), 0);
    expect_plan(&c, &o, PR_CUDA, true, false, "off (train.cuda_graph=off)");
    assert_int_equal(pr_train_set(&o, "train.cuda_graph=on", &err), 0);
    expect_plan(&c, &o, PR_CPU, true, false, "off (the CPU runs every step eagerly)");
    expect_plan(&c, &o, PR_CUDA, true, true, "on (captured after 2 eager steps");
    expect_plan(&c, &o, PR_CUDA, false, false, "off (this task builds its batch inside the step)");
    pr_train_opts dp = o;
    dp.comm = (pr_comm *)&dp;   /* only tested for being set */
    expect_plan(&c, &dp, PR_CUDA, true, false, "NCCL");
    pr_config drop = c;
    assert_int_equal(pr_config_set(&drop, "dropout=0.1", &err), 0);
    expect_plan(&drop, &o, PR_CUDA, true, false, "dropout draws its masks");
    pr_config mom = c;
    assert_int_equal(pr_config_set(&mom, "mixer=mom", &err), 0);
    assert_int_equal(pr_config_set(&mom, "mom.route=packed", &err), 0);
    expect_plan(&mom, &o, PR_CUDA, true, false, "mom routes tokens");
    /* asked on the CPU: the run trains eagerly and its result says why */
    char dir[256];
    pr_train_result res;
    o.steps = 3;
    if (pr_train(&c, &o, run_dir(dir, sizeof dir, "graph-cpu"), false, PR_CPU, &res, &err)) fail_msg("%s", err.msg);
    assert_int_equal(res.steps, 3);
    assert_non_null(strstr(res.graph_note, "off (the CPU"));
}

/* the crash hook: at step 6, half a state file written, then the process ends
 * as a power cut would end it */
static void crash_at_step_6(void *user, const char *state_path, int64_t step)
{
    (void)user;
    if (step != 6) return;
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", state_path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (f) {
        fputs("\x10\x00\x00\x00\x00\x00\x00\x00{\"half", f);   /* a torn write */
        fclose(f);
    }
    _exit(86);
}

static void test_crash_then_resume_is_bit_identical(void **state)
{
    (void)state;
    pr_config c;
    pr_train_opts o;
    setup_config(&c, &o);
    pr_train_result res;
    pr_err err;
    char whole[256], cut[256], a[300], b[300];
    assert_int_equal(pr_train(&c, &o, run_dir(whole, sizeof whole, "whole"), false, PR_CPU, &res, &err), 0);
    assert_int_equal(res.steps, 6);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {  /* the run to interrupt: dies while saving step 6 */
        pr_train_opts crashing = o;
        crashing.hooks.mid_checkpoint = crash_at_step_6;
        pr_train(&c, &crashing, run_dir(cut, sizeof cut, "cut"), false, PR_CPU, &res, &err);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 86);
    run_dir(cut, sizeof cut, "cut");

    /* the previous checkpoint is still the one named, and it loads */
    int64_t step = -1;
    assert_int_equal(pr_checkpoint_latest(cut, &step, &err), 0);
    assert_int_equal(step, 3);
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    pr_optim_opts oo = pr_optim_adamw_defaults();
    pr_optim *opt = pr_optim_new(m->params, &oo);
    pr_train_state st;
    if (pr_checkpoint_load(cut, 3, m->params, opt, &st, &err)) fail_msg("%s", err.msg);
    assert_int_equal(st.step, 3);
    assert_int_equal(opt->t, 3);
    pr_optim_free(opt);
    pr_model_free(m);

    assert_int_equal(pr_train(&c, &o, cut, true, PR_CPU, &res, &err), 0);
    assert_int_equal(res.steps, 6);
    snprintf(a, sizeof a, "%s/ckpt-00000006.weights.safetensors", whole);
    snprintf(b, sizeof b, "%s/ckpt-00000006.weights.safetensors", cut);
    expect_same_file(a, b);
    snprintf(a, sizeof a, "%s/ckpt-00000006.state.safetensors", whole);
    snprintf(b, sizeof b, "%s/ckpt-00000006.state.safetensors", cut);
    expect_same_tensors(a, b);
    /* the older pair was removed once `latest` moved on */
    snprintf(b, sizeof b, "%s/ckpt-00000003.weights.safetensors", cut);
    assert_int_equal(access(b, F_OK), -1);
}

static void test_nan_trap_names_the_op(void **state)
{
    (void)state;
    pr_config c;
    pr_train_opts o;
    setup_config(&c, &o);
    o.steps = 3;
    pr_train_result res;
    pr_err err;
    char dir[256], path[300];
    assert_int_equal(pr_train(&c, &o, run_dir(dir, sizeof dir, "nan"), false, PR_CPU, &res, &err), 0);

    /* plant a NaN in one weight of the second block's MLP */
    pr_model *m = pr_model_new(&c, PR_F32, PR_CPU);
    snprintf(path, sizeof path, "%s/ckpt-00000003.weights.safetensors", dir);
    assert_int_equal(pr_params_load(m->params, path, &err), 0);
    pr_set(pr_params_find(m->params, "layers.1.mlp.w_up")->t, 5, NAN);
    assert_int_equal(pr_params_save(m->params, path, &err), 0);
    pr_model_free(m);

    o.steps = 6;
    assert_int_equal(pr_train(&c, &o, dir, true, PR_CPU, &res, &err), -1);
    if (!strstr(err.msg, "non-finite value at step 4: matmul forward in layers.1.mlp"))
        fail_msg("trap message: %s", err.msg);
    assert_non_null(strstr(err.msg, "the last good checkpoint is step 3"));
    assert_non_null(strstr(res.nonfinite, "step 4: matmul forward in layers.1.mlp"));
    int64_t step = -1;
    assert_int_equal(pr_checkpoint_latest(dir, &step, &err), 0);
    assert_int_equal(step, 3);
}

/* every line of a metrics file is a JSON object; returns the last one (caller frees) */
static cJSON *check_jsonl(const char *path)
{
    long n;
    unsigned char *b = slurp(path, &n);
    b[n] = 0;
    assert_true(n > 0);
    assert_int_equal(b[n - 1], '\n');
    assert_null(memchr(b, 0, (size_t)n));   /* never padded */
    cJSON *last = NULL;
    for (char *line = (char *)b, *end; *line; line = end + 1) {
        end = strchr(line, '\n');
        *end = 0;
        cJSON_Delete(last);
        last = cJSON_Parse(line);
        if (!cJSON_IsObject(last)) fail_msg("%s: not a JSON line: %s", path, line);
    }
    free(b);
    return last;
}

static void plant_nan(const pr_config *c, const char *dir, int step)
{
    pr_err err;
    char path[300];
    pr_model *m = pr_model_new(c, PR_F32, PR_CPU);
    snprintf(path, sizeof path, "%s/ckpt-%08d.weights.safetensors", dir, step);
    assert_int_equal(pr_params_load(m->params, path, &err), 0);
    pr_set(pr_params_find(m->params, "layers.1.mlp.w_up")->t, 5, NAN);
    assert_int_equal(pr_params_save(m->params, path, &err), 0);
    pr_model_free(m);
}

static void test_nan_evaluation_is_json_null(void **state)
{
    (void)state;
    pr_config c;
    pr_train_opts o;
    setup_config(&c, &o);
    o.steps = 3;
    pr_train_result res;
    pr_err err;
    char dir[256], path[300];
    assert_int_equal(pr_train(&c, &o, run_dir(dir, sizeof dir, "naneval"), false, PR_CPU, &res, &err), 0);
    plant_nan(&c, dir, 3);
    /* at its total: nothing to train, the evaluation of the NaN weights is logged */
    if (pr_train(&c, &o, dir, true, PR_CPU, &res, &err)) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    cJSON *last = check_jsonl(path);
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(last, "eval"), "loss");
    assert_true(cJSON_IsNull(loss));
    /* the seconds the evaluation took, beside its metrics */
    const cJSON *secs = cJSON_GetObjectItemCaseSensitive(last, "eval_s");
    assert_true(cJSON_IsNumber(secs) && secs->valuedouble >= 0);
    cJSON_Delete(last);
}

static void test_full_disk_stops_the_run(void **state)
{
    (void)state;
    pr_config c;
    pr_train_opts o;
    setup_config(&c, &o);
    o.ckpt_every = 1;
    o.log_every = 2;
    pr_train_result res;
    pr_err err;
    char dir[256];
    o.hooks.metrics_path = "/dev/full";
    int rc = pr_train(&c, &o, run_dir(dir, sizeof dir, "full"), false, PR_CPU, &res, &err);
    assert_int_equal(rc, -1);
    if (!strstr(err.msg, "metrics.jsonl: cannot write: No space left on device; the run stops at step 2 (the last "
                         "checkpoint, step 1, is kept)"))
        fail_msg("message: %s", err.msg);
    int64_t step = -1;
    assert_int_equal(pr_checkpoint_latest(dir, &step, &err), 0);
    assert_int_equal(step, 1);
}

/* rewrites the state of checkpoint `step` with s (weights and moments as they are) */
static void rewrite_state(const pr_config *c, const pr_train_opts *o, const char *dir, int64_t step,
                          void (*edit)(pr_train_state *))
{
    pr_err err;
    pr_model *m = pr_model_new(c, PR_F32, PR_CPU);
    pr_optim_opts oo = pr_train_optim_opts(o);
    pr_optim *opt = pr_optim_new(m->params, &oo);
    pr_train_state s;
    if (pr_checkpoint_load(dir, step, m->params, opt, &s, &err)) fail_msg("%s", err.msg);
    edit(&s);
    assert_int_equal(pr_checkpoint_save(dir, m->params, opt, &s, NULL, &err), 0);
    pr_optim_free(opt);
    pr_model_free(m);
}

static void huge_metrics_bytes(pr_train_state *s) { s->metrics_bytes = (int64_t)1 << 40; }
static void negative_data_pos(pr_train_state *s) { s->data_pos = -5; }

static void test_resume_trims_metrics_whole_lines(void **state)
{
    (void)state;
    pr_config c;
    pr_train_opts o;
    setup_config(&c, &o);
    o.log_every = 1;
    pr_train_result res;
    pr_err err;
    char dir[256], path[300];
    assert_int_equal(pr_train(&c, &o, run_dir(dir, sizeof dir, "trim"), false, PR_CPU, &res, &err), 0);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    /* shorter than the checkpoint says, cut inside a line: resumed after its last whole line */
    assert_int_equal(truncate(path, st.st_size - 60), 0);
    if (pr_train(&c, &o, dir, true, PR_CPU, &res, &err)) fail_msg("%s", err.msg);
    cJSON_Delete(check_jsonl(path));
    /* a damaged length: the file is never extended to it */
    rewrite_state(&c, &o, dir, 6, huge_metrics_bytes);
    if (pr_train(&c, &o, dir, true, PR_CPU, &res, &err)) fail_msg("%s", err.msg);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size < 4096);
    cJSON_Delete(check_jsonl(path));
}

static void test_damaged_state_is_refused(void **state)
{
    (void)state;
    pr_config c;
    pr_train_opts o;
    setup_config(&c, &o);
    pr_train_result res;
    pr_err err;
    char dir[256], a[300], b[300];
    assert_int_equal(pr_train(&c, &o, run_dir(dir, sizeof dir, "damaged"), false, PR_CPU, &res, &err), 0);
    /* a total below the checkpoint's step */
    o.steps = 3;
    assert_int_equal(pr_train(&c, &o, dir, true, PR_CPU, &res, &err), -1);
    assert_non_null(strstr(err.msg, "its checkpoint is at step 6, past the run's 3 steps"));
    o.steps = 6;
    /* `latest` naming a step the state does not hold */
    const char *what[] = {"weights", "state"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/ckpt-00000006.%s.safetensors", dir, what[i]);
        snprintf(b, sizeof b, "%s/ckpt-00000004.%s.safetensors", dir, what[i]);
        assert_int_equal(link(a, b), 0);
    }
    snprintf(a, sizeof a, "%s/latest", dir);
    assert_int_equal(pr_write_file_atomic(a, "4\n", &err), 0);
    assert_int_equal(pr_train(&c, &o, dir, true, PR_CPU, &res, &err), -1);
    assert_non_null(strstr(err.msg, "metadata train.step 6 and train.data_pos 6, but `latest` names step 4"));
    assert_int_equal(pr_write_file_atomic(a, "6\n", &err), 0);
    /* a negative count */
    rewrite_state(&c, &o, dir, 6, negative_data_pos);
    assert_int_equal(pr_train(&c, &o, dir, true, PR_CPU, &res, &err), -1);
    assert_non_null(strstr(err.msg, "metadata train.data_pos: '-5' is not a count"));
}

static void test_one_trainer_per_folder(void **state)
{
    (void)state;
    pr_config c;
    pr_train_opts o;
    setup_config(&c, &o);
    o.steps = 2;
    pr_train_result res;
    pr_err err;
    char dir[256], path[300], who[64];
    run_dir(dir, sizeof dir, "locked");
    assert_int_equal(pr_train(&c, &o, dir, false, PR_CPU, &res, &err), 0);
    /* a fresh run into it: refused, then replaced when asked */
    assert_int_equal(pr_train(&c, &o, dir, false, PR_CPU, &res, &err), -1);
    assert_non_null(strstr(err.msg, "holds a run: give --resume to continue it, --overwrite to replace it"));
    o.overwrite = true;
    assert_int_equal(pr_train(&c, &o, dir, false, PR_CPU, &res, &err), 0);
    /* while another holds the folder, no trainer starts in it */
    int fd = -1;
    assert_int_equal(pr_dir_lock(dir, ".train.lock", "prism train", &fd, &err), 0);
    assert_int_equal(pr_train(&c, &o, dir, false, PR_CPU, &res, &err), -1);
    snprintf(who, sizeof who, "is in use by another prism train (pid %d)", (int)getpid());
    if (!strstr(err.msg, who)) fail_msg("message: %s", err.msg);
    pr_dir_unlock(fd, dir, ".train.lock");
    /* a lock file left by a process that died: taken over */
    snprintf(path, sizeof path, "%s/.train.lock", dir);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    assert_int_equal(waitpid(dead, NULL, 0), dead);
    FILE *f = fopen(path, "w");
    fprintf(f, "%d\n", (int)dead);
    fclose(f);
    assert_int_equal(pr_train(&c, &o, dir, false, PR_CPU, &res, &err), 0);
}

static int make_root(void **state)
{
    (void)state;
    return pr_test_make_root(root, sizeof root, "test_train");
}

static int remove_root(void **state)
{
    (void)state;
    return pr_test_remove_root(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_families),
        cmocka_unit_test(test_crash_then_resume_is_bit_identical),
        cmocka_unit_test(test_nan_trap_names_the_op),
        cmocka_unit_test(test_nan_evaluation_is_json_null),
        cmocka_unit_test(test_full_disk_stops_the_run),
        cmocka_unit_test(test_resume_trims_metrics_whole_lines),
        cmocka_unit_test(test_damaged_state_is_refused),
        cmocka_unit_test(test_one_trainer_per_folder),
        cmocka_unit_test(test_cuda_graph_plan),
    };
    return cmocka_run_group_tests(tests, make_root, remove_root);
}
