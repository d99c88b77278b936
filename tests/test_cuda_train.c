/* tests/test_cuda_train.c: the optimizer and the trainer on the GPU.
 *
 * - AdamW (with decay) and SGD with momentum, three steps each, on CUDA
 *   against the CPU on the same f32 parameters and grads (the kernel works
 *   in double as the CPU loop does: agreement to f32 rounding);
 * - the multi-tensor update (one launch for every parameter) against the
 *   one-launch-per-parameter kernel, AdamW and SGD, bit for bit, with sizes
 *   across the 4096-element chunks, a parameter with no grad and one without
 *   decay; the multi-tensor grad norm against the CPU's sum to 1e-12;
 * - a tiny probe run stopped at step 3 and resumed to 6 ends with the same
 *   weights, bit for bit, as a run straight to 6 on the GPU.
 * - CUDA graphs: a probe-sized model (D=16, 2 blocks, B=32, T=128) on parity
 *   and a tiny byte-level lm model, 8 steps with train.cuda_graph=on against
 *   8 eager steps: the same loss at every step and the same weights, bit for
 *   bit; the graph really ran (the result's note says on), and a graph run
 *   stopped at step 4 and resumed to 8 ends the same too; the probe again
 *   under bf16 autocast (the weights' casts are redone at every replay);
 *   mom on its padded route too; the final evaluation (3 batches) by its
 *   own captured forward gives the eager evaluation's metrics, bit for bit;
 * - a model the plan refuses (mom) trains eagerly with the note saying so.
 * Exits 77 (skipped) without a GPU.
 */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/pr_test.h"
#include "train/train.h"

static void check_optimizer(pr_optim_opts opts)
{
    pr_params *cpu = pr_params_new(PR_F32, PR_CPU);
    pr_param_new(cpu, "w", (pr_init){PR_INIT_NORMAL, 1, 0}, true, 2, (int64_t[]){33, 65});
    pr_param_new(cpu, "norm.w", (pr_init){PR_INIT_NORMAL, 1, 0}, false, 1, (int64_t[]){1000});
    pr_params_init(cpu, 5);
    pr_params *gpu = pr_params_copy(cpu, PR_F32, PR_CUDA);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_optim *oc = pr_optim_new(cpu, &opts), *og = pr_optim_new(gpu, &opts);
    pr_rng r = pr_rng_init(9, 0);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < cpu->n; i++) {
            pr_tensor *g = pr_grad_of(ctx, cpu->p[i].t);
            pr_rand_normal_(g, &r, 0, 1);
            pr_copy_(pr_grad_of(ctx, gpu->p[i].t), g);
        }
        pr_optim_step(ctx, oc, 1e-2, 0.5);
        pr_optim_step(ctx, og, 1e-2, 0.5);
    }
    for (int i = 0; i < cpu->n; i++) {
        pr_assert_tensors_close(cpu->p[i].path, gpu->p[i].t, cpu->p[i].t, 1e-6, 1e-6);
        pr_assert_tensors_close("first moment", og->m[i], oc->m[i], 1e-6, 1e-6);
    }
    pr_optim_free(oc);
    pr_optim_free(og);
    pr_params_release_grads(cpu);
    pr_params_release_grads(gpu);
    pr_params_free(cpu);
    pr_params_free(gpu);
    pr_ctx_free(ctx);
}

static void test_cuda_optimizers(void **state)
{
    (void)state;
    pr_optim_opts adamw = pr_optim_adamw_defaults();
    adamw.weight_decay = 0.1;
    check_optimizer(adamw);
    check_optimizer((pr_optim_opts){.kind = PR_OPTIM_SGD, .momentum = 0.9, .weight_decay = 0.1});
}

static void assert_same_bits(const char *what, const char *path, const pr_tensor *a, const pr_tensor *b)
{
    pr_arena *ar = pr_arena_new("bits", 0);
    pr_tensor *x = pr_to(ar, a, a->dtype, PR_CPU), *y = pr_to(ar, b, b->dtype, PR_CPU);
    if (memcmp(x->data, y->data, pr_nbytes(x))) fail_msg("%s of %s: the multi-tensor update differs", what, path);
    pr_arena_free(ar);
}

static void check_multi_tensor(pr_optim_opts opts)
{
    pr_params *base = pr_params_new(PR_F32, PR_CUDA);
    pr_init init = {PR_INIT_NORMAL, 1, 0};
    pr_param_new(base, "w", init, true, 2, (int64_t[]){33, 65});
    pr_param_new(base, "norm.w", init, false, 1, (int64_t[]){1000});
    pr_param_new(base, "big", init, true, 2, (int64_t[]){3, 4099});
    pr_param_new(base, "one", init, true, 1, (int64_t[]){1});
    pr_param_new(base, "unused", init, true, 1, (int64_t[]){77});   /* never gets a grad */
    pr_params_init(base, 5);
    pr_params *pm = pr_params_copy(base, PR_F32, PR_CUDA), *pp = pr_params_copy(base, PR_F32, PR_CUDA);
    pr_ctx *ctx = pr_ctx_new(1);
    pr_optim *om = pr_optim_new(pm, &opts), *op = pr_optim_new(pp, &opts);
    op->per_param_cuda = true;
    pr_rng r = pr_rng_init(9, 0);
    for (int step = 0; step < 3; step++) {
        for (int i = 0; i + 1 < base->n; i++) {
            pr_tensor *g = pr_grad_of(ctx, pm->p[i].t);
            pr_rand_normal_(g, &r, 0, 1);
            pr_copy_(pr_grad_of(ctx, pp->p[i].t), g);
        }
        double nm = pr_optim_grad_norm(ctx, om), ref = pr_params_grad_norm(pp);
        assert_true(fabs(nm - ref) <= 1e-12 * ref);
        double scale = pr_clip_scale(nm, 1.0);
        pr_optim_step(ctx, om, 1e-2 * (step + 1), scale);
        pr_optim_step(ctx, op, 1e-2 * (step + 1), scale);
    }
    for (int i = 0; i < base->n; i++) {
        assert_same_bits("weights", base->p[i].path, pm->p[i].t, pp->p[i].t);
        assert_same_bits("first moment", base->p[i].path, om->m[i], op->m[i]);
        if (om->v[i]) assert_same_bits("second moment", base->p[i].path, om->v[i], op->v[i]);
    }
    assert_same_bits("untouched weights", "unused", pm->p[base->n - 1].t, base->p[base->n - 1].t);
    pr_optim_free(om);
    pr_optim_free(op);
    pr_params_release_grads(pm);
    pr_params_release_grads(pp);
    pr_params_free(base);
    pr_params_free(pm);
    pr_params_free(pp);
    pr_ctx_free(ctx);
}

static void test_cuda_multi_tensor_update(void **state)
{
    (void)state;
    pr_optim_opts adamw = pr_optim_adamw_defaults();
    adamw.weight_decay = 0.1;
    check_multi_tensor(adamw);
    check_multi_tensor((pr_optim_opts){.kind = PR_OPTIM_SGD, .momentum = 0.9, .weight_decay = 0.1});
}

static void test_cuda_resume_bit_identical(void **state)
{
    (void)state;
    char root[96], whole[128], cut[128], a[200], b[200];
    snprintf(root, sizeof root, "/tmp/prism_test_cuda_train_%d", (int)getpid());
    mkdir(root, 0755);
    snprintf(whole, sizeof whole, "%s/whole", root);
    snprintf(cut, sizeof cut, "%s/cut", root);
    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    pr_err err;
    assert_int_equal(pr_task_preset(&c, &o, "parity", &err), 0);
    assert_int_equal(pr_config_set(&c, "d_model=8", &err), 0);
    o.steps = 6;
    o.batch = 4;
    o.eval_batches = 1;
    pr_train_result res;
    if (pr_train(&c, &o, whole, false, PR_CUDA, &res, &err)) fail_msg("%s", err.msg);
    o.steps = 3;  /* a constant schedule: stopping early changes no learning rate */
    if (pr_train(&c, &o, cut, false, PR_CUDA, &res, &err)) fail_msg("%s", err.msg);
    o.steps = 6;
    if (pr_train(&c, &o, cut, true, PR_CUDA, &res, &err)) fail_msg("%s", err.msg);
    snprintf(a, sizeof a, "%s/ckpt-00000006.weights.safetensors", whole);
    snprintf(b, sizeof b, "%s/ckpt-00000006.weights.safetensors", cut);
    pr_arena *ar = pr_arena_new("files", 0);
    pr_safetensors x, y;
    assert_int_equal(pr_safetensors_read(a, ar, &x, &err), 0);
    assert_int_equal(pr_safetensors_read(b, ar, &y, &err), 0);
    for (int i = 0; i < x.n; i++)
        if (memcmp(pr_safetensors_get(&y, x.names[i])->data, x.tensors[i]->data, pr_nbytes(x.tensors[i])))
            fail_msg("%s differs after resuming on the GPU", x.names[i]);
    pr_arena_free(ar);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

static void expect_same_weights(const char *a_dir, const char *b_dir, int64_t step)
{
    char a[300], b[300];
    pr_err err;
    snprintf(a, sizeof a, "%s/ckpt-%08lld.weights.safetensors", a_dir, (long long)step);
    snprintf(b, sizeof b, "%s/ckpt-%08lld.weights.safetensors", b_dir, (long long)step);
    pr_arena *ar = pr_arena_new("files", 0);
    pr_safetensors x, y;
    assert_int_equal(pr_safetensors_read(a, ar, &x, &err), 0);
    assert_int_equal(pr_safetensors_read(b, ar, &y, &err), 0);
    for (int i = 0; i < x.n; i++)
        if (memcmp(pr_safetensors_get(&y, x.names[i])->data, x.tensors[i]->data, pr_nbytes(x.tensors[i])))
            fail_msg("%s differs between the graph run %s and the eager one", x.names[i], b_dir);
    pr_arena_free(ar);
}

/* 8 steps eager, 8 with the graph, and 4 + 4 resumed with the graph: same losses and weights */
static void check_graph_against_eager(pr_config c, pr_train_opts o, const char *root, const char *name)
{
    char eager[200], graph[200], cut[200];
    snprintf(eager, sizeof eager, "%s/%s-eager", root, name);
    snprintf(graph, sizeof graph, "%s/%s-graph", root, name);
    snprintf(cut, sizeof cut, "%s/%s-cut", root, name);
    o.steps = 8;
    o.log_every = 1;
    o.eval_batches = 3;   /* the evaluation's graph is captured at the first and replayed twice */
    o.warmup = 0;   /* a constant schedule: the run cut at 4 has the same rates */
    snprintf(o.schedule, sizeof o.schedule, "constant");
    pr_err err;
    pr_train_result res, res_eager;
    snprintf(o.cuda_graph, sizeof o.cuda_graph, "off");
    if (pr_train(&c, &o, eager, false, PR_CUDA, &res_eager, &err)) fail_msg("%s", err.msg);
    assert_false(res_eager.eval_graph);
    snprintf(o.cuda_graph, sizeof o.cuda_graph, "on");
    if (pr_train(&c, &o, graph, false, PR_CUDA, &res, &err)) fail_msg("%s", err.msg);
    if (strncmp(res.graph_note, "on", 2)) fail_msg("%s: the graph did not run: %s", name, res.graph_note);
    if (!res.eval_graph) fail_msg("%s: the evaluation's graph did not run", name);
    assert_int_equal(res.metrics.n, res_eager.metrics.n);
    for (int i = 0; i < res.metrics.n; i++)
        if (res.metrics.value[i] != res_eager.metrics.value[i])
            fail_msg("%s: eval %s: eager %.17g, graph %.17g", name, res.metrics.name[i], res_eager.metrics.value[i],
                     res.metrics.value[i]);
    double le[8], lg[8];
    assert_int_equal(pr_test_read_losses(eager, le, 8), 8);
    assert_int_equal(pr_test_read_losses(graph, lg, 8), 8);
    for (int i = 0; i < 8; i++)
        if (le[i] != lg[i]) fail_msg("%s: step %d's loss: eager %.17g, graph %.17g", name, i + 1, le[i], lg[i]);
    expect_same_weights(eager, graph, 8);
    o.steps = 4;
    if (pr_train(&c, &o, cut, false, PR_CUDA, &res, &err)) fail_msg("%s", err.msg);
    o.steps = 8;
    if (pr_train(&c, &o, cut, true, PR_CUDA, &res, &err)) fail_msg("%s", err.msg);
    expect_same_weights(eager, cut, 8);
}

static void test_cuda_graph_matches_eager(void **state)
{
    (void)state;
    char root[96], text[200];
    snprintf(root, sizeof root, "/tmp/prism_test_cuda_graph_%d", (int)getpid());
    mkdir(root, 0755);
    pr_err err;
    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    assert_int_equal(pr_task_preset_as(&c, &o, "parity", "probe", &err), 0);
    const char *probe[] = {"d_model=16", "n_layers=2", "seq_len=128"};
    for (int i = 0; i < 3; i++) assert_int_equal(pr_config_set(&c, probe[i], &err), 0);
    o.batch = 32;
    check_graph_against_eager(c, o, root, "probe");
    /* mom's padded routing runs on the device, so its steps and its evaluation are captured */
    assert_int_equal(pr_config_set(&c, "mixer=mom", &err), 0);
    assert_int_equal(pr_config_set(&c, "mom.route=padded", &err), 0);
    check_graph_against_eager(c, o, root, "probe-mom");
    /* a tiny byte-level LM on a text of its own */
    snprintf(text, sizeof text, "%s/text.txt", root);
    FILE *f = fopen(text, "w");
    assert_non_null(f);
    for (int i = 0; i < 400; i++) fprintf(f, "the %d quick brown foxes jump over %d lazy dogs. ", i, i * 7 % 13);
    fclose(f);
    c = pr_config_default();
    o = pr_train_defaults();
    assert_int_equal(pr_task_preset(&c, &o, "lm", &err), 0);
    const char *lm[] = {"d_model=16", "n_layers=2", "seq_len=32"};
    for (int i = 0; i < 3; i++) assert_int_equal(pr_config_set(&c, lm[i], &err), 0);
    snprintf(o.data, sizeof o.data, "%s", text);
    o.batch = 4;
    check_graph_against_eager(c, o, root, "lm");
    /* mom's packed routing is read on the host: eager, and the note says why */
    assert_int_equal(pr_config_set(&c, "mixer=mom", &err), 0);
    assert_int_equal(pr_config_set(&c, "mom.route=packed", &err), 0);
    snprintf(o.cuda_graph, sizeof o.cuda_graph, "on");
    o.steps = 3;
    char dir[200];
    pr_train_result res;
    snprintf(dir, sizeof dir, "%s/mom", root);
    if (pr_train(&c, &o, dir, false, PR_CUDA, &res, &err)) fail_msg("%s", err.msg);
    assert_non_null(strstr(res.graph_note, "off (mom routes tokens"));
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* the same under bf16 autocast: the graph must cast the weights again at every replay (a cast
 * cached before the capture would be read by every replay, the weights never moving) */
static void test_cuda_graph_bf16_matches_eager(void **state)
{
    (void)state;
    char root[96];
    snprintf(root, sizeof root, "/tmp/prism_test_cuda_graph_bf16_%d", (int)getpid());
    mkdir(root, 0755);
    pr_err err;
    pr_config c = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    assert_int_equal(pr_task_preset_as(&c, &o, "parity", "probe", &err), 0);
    const char *probe[] = {"d_model=16", "n_layers=2", "seq_len=128"};
    for (int i = 0; i < 3; i++) assert_int_equal(pr_config_set(&c, probe[i], &err), 0);
    o.batch = 32;
    snprintf(o.precision, sizeof o.precision, "bf16");
    check_graph_against_eager(c, o, root, "probe-bf16");
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    PR_EXIT_SKIPPED_WITHOUT_CUDA();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_optimizers),
        cmocka_unit_test(test_cuda_multi_tensor_update),
        cmocka_unit_test(test_cuda_resume_bit_identical),
        cmocka_unit_test(test_cuda_graph_matches_eager),
        cmocka_unit_test(test_cuda_graph_bf16_matches_eager),
    };
    return pr_test_exit_status(cmocka_run_group_tests(tests, NULL, NULL));
}
