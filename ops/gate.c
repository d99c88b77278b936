/* ops/gate.c: the log-decay gate of Gated DeltaNet and MoM's memories (fla's
 * g = -exp(A_log) * softplus(a + dt_bias)) in one op, where five ops (an add,
 * a softplus, an exp, a neg and a mul) and their backwards ran before:
 *   a [..., H], A_log [H], dt_bias [H] -> g [..., H], per head h
 *   z = a + dt_bias[h],  sp = softplus(z) (z itself past 20),  g = -exp(A_log[h]) sp
 * Backward, over the rows r:
 *   da = dg (-exp(A_log[h])) sigmoid(z) (1 past 20),
 *   d dt_bias[h] += sum_r da,  d A_log[h] += sum_r dg g.
 * f32 (bf16 a is widened first: the gate is a log-decay, which bf16 would
 * round away) or f64; each value computed in double, stored rounded once.
 */
#include "ops/cpu_kit.h"

pr_tensor *pr_decay_gate(pr_ctx *ctx, pr_tensor *a, pr_tensor *A_log, pr_tensor *dt_bias)
{
    char sa[64], sl[64], sb[64];
    a = pr_autocast(ctx, a, PR_F32), A_log = pr_autocast(ctx, A_log, PR_F32);
    dt_bias = pr_autocast(ctx, dt_bias, PR_F32);
    pr_check_float("decay_gate", a, "a");
    pr_check_same_kind("decay_gate", a, A_log);
    pr_check_same_kind("decay_gate", a, dt_bias);
    pr_shape_str(a, sa, sizeof sa), pr_shape_str(A_log, sl, sizeof sl), pr_shape_str(dt_bias, sb, sizeof sb);
    PR_CHECK(a->ndim >= 1 && a->shape[a->ndim - 1] > 0, "decay_gate: a %s needs a last dim of H heads", sa);
    const int64_t H = a->shape[a->ndim - 1];
    PR_CHECK(A_log->ndim == 1 && A_log->shape[0] == H && dt_bias->ndim == 1 && dt_bias->shape[0] == H,
             "decay_gate: A_log %s and dt_bias %s must be [H] with H = %lld (a %s)", sl, sb, (long long)H, sa);
    pr_node n = pr_node_init(PR_OP_decay_gate, 3, (pr_tensor *[]){a, A_log, dt_bias});
    n.out[0] = pr_op_output(ctx, a->dtype, a->device, a->ndim, a->shape);
    n.n_out = 1;
    return pr_op_apply(ctx, &n);
}

void pr_decay_gate_forward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    const pr_tensor *a = n->in[0], *A_log = n->in[1], *dt_bias = n->in[2];
    const int64_t H = a->shape[a->ndim - 1], N = a->numel;
    PR_FLOAT_SWITCH(a->dtype, F, {
        const F *ap = a->data, *lp = A_log->data, *bp = dt_bias->data;
        F *g = n->out[0]->data;
        for (int64_t i = 0; i < N; i++) {
            const int64_t h = i % H;
            g[i] = (F)(-exp((double)lp[h]) * kit_softplus((double)ap[i] + bp[h]));
        }
    });
}

void pr_decay_gate_backward_cpu(pr_ctx *ctx, pr_node *n)
{
    (void)ctx;
    const pr_tensor *a = n->in[0], *A_log = n->in[1], *dt_bias = n->in[2];
    pr_tensor *da = pr_in_grad(n, 0), *dl = pr_in_grad(n, 1), *db = pr_in_grad(n, 2);
    const int64_t H = a->shape[a->ndim - 1], N = a->numel;
    double *sum_l = kit_zalloc(H), *sum_b = kit_zalloc(H);
    PR_FLOAT_SWITCH(a->dtype, F, {
        const F *ap = a->data, *lp = A_log->data, *bp = dt_bias->data, *dg = n->out[0]->grad->data;
        F *dap = da ? da->data : NULL;
        for (int64_t i = 0; i < N; i++) {
            const int64_t h = i % H;
            const double z = (double)ap[i] + bp[h], e = exp((double)lp[h]);
            const double d = (double)dg[i] * -e * kit_softplus_grad(z);
            if (dap) dap[i] = (F)(dap[i] + d);
            sum_b[h] += d;
            sum_l[h] += (double)dg[i] * -e * kit_softplus(z);
        }
        if (dl)
            for (int64_t h = 0; h < H; h++) ((F *)dl->data)[h] = (F)(((F *)dl->data)[h] + sum_l[h]);
        if (db)
            for (int64_t h = 0; h < H; h++) ((F *)db->data)[h] = (F)(((F *)db->data)[h] + sum_b[h]);
    });
    free(sum_l);
    free(sum_b);
}

static pr_tensor *decay_gate_apply(pr_ctx *ctx, pr_tensor *const *in, const pr_example *ex)
{
    (void)ex;
    return pr_decay_gate(ctx, in[0], in[1], in[2]);
}

/* a [2, 9, 5] (H = 5 heads), A_log and dt_bias [5] */
void pr_decay_gate_example(pr_ctx *ctx, pr_rng *r, pr_dtype dt, pr_example *ex)
{
    ex->n_in = 3;
    ex->in[0] = pr_example_input(ctx, r, dt, PR_DIMS(2, 9, 5), -3, 3);
    ex->in[1] = pr_example_input(ctx, r, dt, PR_DIMS(5), -1, 1.5);
    ex->in[2] = pr_example_input(ctx, r, dt, PR_DIMS(5), -1, 1);
    ex->in[0]->name = "a";
    ex->in[1]->name = "A_log";
    ex->in[2]->name = "dt_bias";
    ex->apply = decay_gate_apply;
}
