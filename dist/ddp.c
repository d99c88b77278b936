/* dist/ddp.c: gradient buckets all-reduced during the backward.
 *
 * Before the backward, each parameter's "last node" is found: the earliest
 * tape node that takes it as an input. The tape runs in reverse, so once that
 * node's backward has run (the autograd hook ctx->on_node_backward), the
 * parameter's grad is final and joins the open bucket. A bucket of at least
 * bucket_bytes goes to the communicator at once; with NCCL that starts an
 * all-reduce on NCCL's own stream, after an event on stream 0, while the
 * backward goes on. pr_ddp_end sends what is left: the parameters whose last
 * node did not run in this pass, in registry order, with zero grads when the
 * pass never reached them, so every rank issues the same collectives.
 */
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

typedef struct { const pr_tensor *t; int index; } param_key;

struct pr_ddp {
    pr_comm *comm;
    const pr_params *params;
    size_t bucket_bytes;
    param_key *keys;          /* the parameters' tensors, sorted by address */
    int *last_node;           /* per parameter: the earliest tape node reading it; -1 none */
    int *bucket_of;           /* per parameter: its bucket in the last step */
    bool *sent;
    pr_tensor **open;         /* the bucket being filled */
    int n_open, n_buckets;
    size_t open_bytes;
    bool failed;
    pr_err err;               /* the first failure inside the hook */
};

static int cmp_key(const void *a, const void *b)
{
    const pr_tensor *x = ((const param_key *)a)->t, *y = ((const param_key *)b)->t;
    return (x > y) - (x < y);
}

static int param_index(const pr_ddp *d, const pr_tensor *t)
{
    param_key k = {.t = t}, *hit = bsearch(&k, d->keys, (size_t)d->params->n, sizeof k, cmp_key);
    return hit ? hit->index : -1;
}

pr_ddp *pr_ddp_new(pr_comm *c, const pr_params *p, size_t bucket_bytes)
{
    pr_ddp *d = calloc(1, sizeof *d);
    size_t n = (size_t)p->n + 1;
    PR_CHECK(d, "ddp: out of host memory");
    *d = (pr_ddp){.comm = c, .params = p, .bucket_bytes = bucket_bytes, .keys = calloc(n, sizeof *d->keys),
                  .last_node = calloc(n, sizeof(int)), .bucket_of = calloc(n, sizeof(int)),
                  .sent = calloc(n, sizeof(bool)), .open = calloc(n, sizeof(pr_tensor *))};
    PR_CHECK(d->keys && d->last_node && d->bucket_of && d->sent && d->open, "ddp: out of host memory");
    for (int i = 0; i < p->n; i++) d->keys[i] = (param_key){.t = p->p[i].t, .index = i};
    qsort(d->keys, (size_t)p->n, sizeof *d->keys, cmp_key);
    return d;
}

void pr_ddp_free(pr_ddp *d)
{
    if (!d) return;
    free(d->keys), free(d->last_node), free(d->bucket_of), free(d->sent), free(d->open);
    free(d);
}

static void flush(pr_ddp *d)
{
    if (!d->n_open) return;
    if (!d->failed && d->comm->allreduce_avg(d->comm, d->open, d->n_open, &d->err)) d->failed = true;
    d->n_open = 0;
    d->open_bytes = 0;
    d->n_buckets++;
}

static void add(pr_ddp *d, pr_ctx *ctx, int i)
{
    pr_tensor *t = d->params->p[i].t;
    d->sent[i] = true;
    d->bucket_of[i] = d->n_buckets;
    d->open[d->n_open++] = pr_grad_of(ctx, t);
    d->open_bytes += pr_nbytes(t);
    if (d->open_bytes >= d->bucket_bytes) flush(d);
}

static void on_node(void *user, pr_ctx *ctx, int pos)
{
    pr_ddp *d = user;
    const pr_node *n = &ctx->tape[pos];
    for (int k = 0; k < n->n_in; k++) {
        int i = n->in[k] ? param_index(d, n->in[k]) : -1;
        if (i >= 0 && d->last_node[i] == pos && !d->sent[i]) add(d, ctx, i);
    }
}

void pr_ddp_begin(pr_ddp *d, pr_ctx *ctx)
{
    int n = d->params->n;
    for (int i = 0; i < n; i++) d->last_node[i] = -1, d->sent[i] = false, d->bucket_of[i] = -1;
    for (int pos = ctx->n_tape - 1; pos >= 0; pos--) {   /* downwards: the earliest reader is written last */
        const pr_node *node = &ctx->tape[pos];
        for (int k = 0; k < node->n_in; k++) {
            int i = node->in[k] ? param_index(d, node->in[k]) : -1;
            if (i >= 0) d->last_node[i] = pos;
        }
    }
    d->n_open = 0, d->open_bytes = 0, d->n_buckets = 0, d->failed = false;
    ctx->on_node_backward = on_node;
    ctx->on_node_backward_user = d;
}

int pr_ddp_end(pr_ddp *d, pr_ctx *ctx, pr_err *err)
{
    ctx->on_node_backward = NULL;
    ctx->on_node_backward_user = NULL;
    for (int i = 0; i < d->params->n; i++)
        if (!d->sent[i]) add(d, ctx, i);   /* unreached: pr_grad_of gives zeros */
    flush(d);
    if (d->failed) return *err = d->err, -1;
    return d->comm->wait(d->comm, err);
}

int pr_ddp_buckets(const pr_ddp *d, const int **bucket_of_param)
{
    *bucket_of_param = d->bucket_of;
    return d->n_buckets;
}
