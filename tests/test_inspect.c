/* tests/test_inspect.c: what `prism inspect` measures (lab/lab.h), run
 * without the command on a small model: the gradient norms of one step as a
 * table, a CSV file and a plot, and the write rank of every token (gdn: at
 * most 1 per token), with the errors for a file that cannot be written; a
 * fresh session's steps lowering the loss of its one batch, a batch of
 * text and a text too short, a step dumped and read back, and a training
 * run continued from its checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab/lab.h"
#include "models/models.h"
#include "tests/pr_test.h"

enum { B = 2, T = 8 };

typedef struct {
    pr_config cfg;
    pr_model *m;
    pr_ctx *ctx;
    pr_arena *a;
    double loss;
} step;

/* one forward and backward of mixer on random tokens; the tape stays recorded */
static void take_step(step *s, const char *mixer)
{
    s->cfg = pr_config_default();
    pr_err err;
    char kv[64];
    snprintf(kv, sizeof kv, "mixer=%s", mixer);
    assert_int_equal(pr_config_preset(&s->cfg, "probe", &err), 0);
    assert_int_equal(pr_config_set(&s->cfg, kv, &err), 0);
    assert_int_equal(pr_config_check(&s->cfg, &err), 0);
    s->m = pr_model_new(&s->cfg, PR_F32, PR_CPU);
    pr_model_init(s->m);
    s->ctx = pr_ctx_new(1);
    s->a = pr_arena_new("test_inspect", 0);
    pr_tensor *ids = pr_empty(s->a, PR_I64, PR_CPU, PR_DIMS(B, T)), *tg = pr_empty(s->a, PR_I64, PR_CPU, PR_DIMS(B, T));
    int64_t *pi = ids->data, *pt = tg->data;
    for (int i = 0; i < B * T; i++) pi[i] = (7 * i + 3) % s->cfg.vocab, pt[i] = (5 * i + 1) % s->cfg.vocab;
    pr_tensor *loss = pr_lm_loss(s->ctx, s->m, ids, tg);
    pr_backward(s->ctx, loss);
    s->loss = pr_item(loss);
}

static void drop_step(step *s)
{
    pr_params_release_grads(s->m->params);
    pr_ctx_free(s->ctx);
    pr_model_free(s->m);
    pr_arena_free(s->a);
}

static long file_text(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = 0;
    fclose(f);
    return (long)got;
}

/* every parameter has a finite norm, some nonzero; the table, CSV and plot show them */
static void test_grad_norms(void **state)
{
    (void)state;
    step s;
    take_step(&s, "gdn");
    const pr_params *r = s.m->params;
    double *norms = calloc((size_t)r->n, sizeof(double));
    pr_inspect_grad_norms(r, norms);
    int nonzero = 0;
    for (int i = 0; i < r->n; i++) {
        assert_true(isfinite(norms[i]) && norms[i] >= 0);
        nonzero += norms[i] > 0;
    }
    assert_true(nonzero > 0);

    char dir[] = "/tmp/prism_test_inspect_XXXXXX", path[128], text[1 << 16];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/table.txt", dir);
    FILE *f = fopen(path, "w");
    pr_inspect_print_norms(f, r, norms, &s.loss, 1, 40);
    fclose(f);
    file_text(path, text, sizeof text);
    assert_non_null(strstr(text, "gradient norm by step"));
    assert_non_null(strstr(text, "40"));
    assert_non_null(strstr(text, r->p[0].path));

    pr_err err;
    snprintf(path, sizeof path, "%s/norms.csv", dir);
    assert_int_equal(pr_inspect_write_norm_csv(path, r, norms, &s.loss, 1, 40, &err), 0);
    file_text(path, text, sizeof text);
    assert_int_equal(strncmp(text, "step,loss,", 10), 0);
    assert_non_null(strstr(text, "\n40,"));
    unlink(path);

    snprintf(path, sizeof path, "%s/norms.svg", dir);
    assert_int_equal(pr_inspect_write_norm_plot(path, "gdn", r, norms, 1, 40, &err), 0);
    file_text(path, text, sizeof text);
    assert_non_null(strstr(text, "<svg"));
    assert_non_null(strstr(text, "gdn: gradient norm by step"));
    assert_non_null(strstr(text, "layers.*"));   /* the layers' copies are one series */
    unlink(path);
    snprintf(path, sizeof path, "%s/table.txt", dir);
    unlink(path);

    snprintf(path, sizeof path, "%s/no/dir/norms.csv", dir);
    assert_int_not_equal(pr_inspect_write_norm_csv(path, r, norms, &s.loss, 1, 0, &err), 0);
    assert_non_null(strstr(err.msg, "cannot write"));
    rmdir(dir);
    free(norms);
    drop_step(&s);
}

/* gdn writes rank 1 (or 0) per token; every token of every layer and head is counted once */
static void test_write_ranks(void **state)
{
    (void)state;
    step s;
    take_step(&s, "gdn");
    pr_rank_summary sum;
    FILE *out = tmpfile();
    pr_inspect_ranks(out, s.ctx, &sum);
    assert_int_equal(sum.layers, s.cfg.n_layers);
    assert_int_equal(sum.max_possible, 1);
    int64_t total = 0;
    for (int v = 0; v <= sum.max_possible; v++) total += sum.hist[v];
    assert_int_equal(total, (int64_t)sum.layers * B * T * s.cfg.n_heads);
    assert_true(sum.hist[1] > 0);
    pr_inspect_rank_histogram(out, "gdn", &sum);
    char text[1 << 14];
    rewind(out);
    text[fread(text, 1, sizeof text - 1, out)] = 0;
    fclose(out);
    assert_non_null(strstr(text, "layer 0 head 0 (gdn, at most 1)"));
    assert_non_null(strstr(text, "write rank histogram, gdn"));

    pr_rank_summary none = {0};
    out = tmpfile();
    pr_inspect_rank_histogram(out, "attn", &none);
    rewind(out);
    text[fread(text, 1, sizeof text - 1, out)] = 0;
    fclose(out);
    assert_non_null(strstr(text, "attn has no linear recurrence"));
    drop_step(&s);
}

static pr_config probe(const char *mixer)
{
    pr_config c = pr_config_default();
    pr_err err;
    char kv[64];
    snprintf(kv, sizeof kv, "mixer=%s", mixer);
    if (pr_config_preset(&c, "probe", &err) || pr_config_set(&c, kv, &err) || pr_config_check(&c, &err))
        fail_msg("%s", err.msg);
    return c;
}

/* plain SGD on one batch: the loss of that batch falls; the step's tensors go to a file */
static void test_fresh_session(void **state)
{
    (void)state;
    pr_config c = probe("gdn");
    pr_inspect_session s;
    pr_err err;
    pr_ctx *ctx = pr_ctx_new(1);
    assert_int_equal(pr_inspect_open_fresh(&s, &c, 0.5, 4, B, T, NULL, &err), 0);
    assert_int_equal(s.b.ids->shape[0], B), assert_int_equal(s.b.ids->shape[1], T);
    double *norms = calloc((size_t)s.m->params->n, sizeof(double)), first = 0, loss = 0;
    char path[] = "/tmp/prism_test_inspect_dump_XXXXXX";
    int fd = mkstemp(path), n = 0;
    assert_true(fd >= 0);
    close(fd);
    for (int i = 0; i < 4; i++) {
        loss = pr_inspect_forward_backward(ctx, &s, i, norms);
        if (i == 0) first = loss;
        if (i == 0) assert_int_equal(pr_inspect_dump(path, ctx, s.m, &s.b, 0, &n, &err), 0);
        pr_inspect_update(ctx, &s, i);
    }
    assert_true(isfinite(loss) && loss < first);
    pr_arena *a = pr_arena_new("dump", 0);
    pr_safetensors st;
    assert_int_equal(pr_safetensors_read(path, a, &st, &err), 0);
    assert_int_equal(st.n, n);
    int params = 0, grads = 0, acts = 0;
    for (int i = 0; i < st.n; i++) {
        params += !strncmp(st.names[i], "param.", 6), grads += !strncmp(st.names[i], "grad.", 5);
        acts += !strncmp(st.names[i], "act.", 4);
    }
    assert_int_equal(params, s.m->params->n);
    assert_true(grads > 0 && acts > 0);
    assert_int_equal(unlink(path), 0);
    pr_arena_free(a);
    free(norms);
    pr_inspect_session_free(&s);
    pr_ctx_free(ctx);
}

static void test_text_batch(void **state)
{
    (void)state;
    pr_config c = probe("linattn");
    c.vocab = 256;
    char path[] = "/tmp/prism_test_inspect_text_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "abcdefghijklmnopqrstuvwxyz";
    assert_int_equal(write(fd, text, 26), 26);
    close(fd);
    pr_arena *a = pr_arena_new("text", 0);
    pr_inspect_batch b;
    pr_err err;
    assert_int_equal(pr_inspect_make_batch(&b, &c, 2, 3, path, a, &err), 0);
    const int64_t *ids = b.ids->data, *tg = b.targets->data;
    assert_int_equal(ids[0], 'a'), assert_int_equal(tg[0], 'b');
    assert_int_equal(ids[3], 'e'), assert_int_equal(tg[5], 'h');   /* a row takes T + 1 = 4 bytes */
    assert_int_equal(pr_inspect_make_batch(&b, &c, 4, 7, path, a, &err), -1);
    assert_non_null(strstr(err.msg, ": 26 bytes, the batch needs B*(T+1) = 32"));
    assert_int_equal(unlink(path), 0);
    pr_arena_free(a);
}

/* a run trained 2 steps: its steps go on from step 2 with its own task and optimizer */
static void test_run_session(void **state)
{
    (void)state;
    pr_config c = probe("gdn");
    pr_err err;
    pr_train_opts o = pr_train_defaults();
    assert_int_equal(pr_task_preset(&c, &o, "parity", &err), 0);
    const char *sets[] = {"d_model=8", "seq_len=16", "train.batch=4", "train.eval_batches=1", "train.steps=2"};
    for (int i = 0; i < 5; i++) assert_int_equal(pr_grid_set(&c, &o, sets[i], &err), 0);
    char dir[] = "/tmp/prism_test_inspect_run_XXXXXX";
    assert_non_null(mkdtemp(dir));
    pr_train_result res;
    o.overwrite = true;
    if (pr_train(&c, &o, dir, false, PR_CPU, &res, &err)) fail_msg("%s", err.msg);
    pr_inspect_session s;
    pr_ctx *ctx = pr_ctx_new(1);
    assert_int_equal(pr_inspect_open_run(&s, dir, ctx, &err), 0);
    assert_int_equal(s.first_step, 2);
    assert_non_null(s.task);
    assert_string_equal(s.train.task, "parity");
    double *norms = calloc((size_t)s.m->params->n, sizeof(double));
    assert_true(isfinite(pr_inspect_forward_backward(ctx, &s, 0, norms)));
    pr_inspect_update(ctx, &s, 0);
    free(norms);
    pr_inspect_session_free(&s);
    pr_ctx_free(ctx);
    assert_int_equal(pr_inspect_open_run(&s, "/nonexistent/run", ctx = pr_ctx_new(1), &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/run/config.json"));
    pr_inspect_session_free(&s);
    pr_ctx_free(ctx);
    assert_int_equal(pr_test_remove_root(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_norms),
        cmocka_unit_test(test_write_ranks),
        cmocka_unit_test(test_fresh_session),
        cmocka_unit_test(test_text_batch),
        cmocka_unit_test(test_run_session),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
