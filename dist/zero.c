/* dist/zero.c: ZeRO stage 1. Each parameter has one owner rank, which alone
 * keeps its optimizer state and updates it; after the optimizer step every
 * owner broadcasts the parameters it updated, and for a checkpoint the
 * moments are gathered on rank 0, so a checkpoint always holds the whole
 * optimizer state. */
#include <stdlib.h>

#include "dist/dist.h"

struct pr_zero {
    pr_comm *comm;
    const pr_params *params;
    int *owner;   /* per parameter: the rank that updates it */
};

void pr_zero_owners(const pr_params *p, int world, int *owner)
{
    int64_t *load = calloc((size_t)world, sizeof *load);
    bool *done = calloc((size_t)p->n + 1, sizeof *done);
    PR_CHECK(load && done, "zero: out of host memory");
    for (int k = 0; k < p->n; k++) {
        int big = -1;   /* the largest parameter not yet placed; the lower index on ties */
        for (int i = 0; i < p->n; i++)
            if (!done[i] && (big < 0 || p->p[i].t->numel > p->p[big].t->numel)) big = i;
        int least = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[least]) least = r;
        owner[big] = least;
        load[least] += p->p[big].t->numel;
        done[big] = true;
    }
    free(load);
    free(done);
}

pr_zero *pr_zero_new(pr_comm *c, const pr_params *p)
{
    pr_zero *z = malloc(sizeof *z);
    int *owner = malloc(sizeof(int) * (size_t)(p->n + 1));
    PR_CHECK(z && owner, "zero: out of host memory");
    pr_zero_owners(p, c->world, owner);
    *z = (pr_zero){.comm = c, .params = p, .owner = owner};
    return z;
}

void pr_zero_free(pr_zero *z)
{
    if (!z) return;
    free(z->owner);
    free(z);
}

pr_optim *pr_zero_optim_new(const pr_zero *z, const pr_optim_opts *oo)
{
    const pr_params *p = z->params;
    bool *mine = malloc(sizeof(bool) * (size_t)(p->n + 1));
    PR_CHECK(mine, "zero: out of host memory");
    for (int i = 0; i < p->n; i++) mine[i] = z->owner[i] == z->comm->rank;
    pr_optim *o = pr_optim_new_owned(p, oo, mine);
    free(mine);
    return o;
}

int pr_zero_share_updates(pr_zero *z, pr_err *err)
{
    const pr_params *p = z->params;
    pr_tensor **ts = malloc(sizeof(pr_tensor *) * (size_t)(p->n + 1));
    PR_CHECK(ts, "zero: out of host memory");
    int rc = 0;
    for (int owner = 0; owner < z->comm->world && !rc; owner++) {
        int n = 0;
        for (int i = 0; i < p->n; i++)
            if (z->owner[i] == owner) ts[n++] = p->p[i].t;
        if (n) rc = z->comm->broadcast(z->comm, ts, n, owner, err);
    }
    free(ts);
    return rc ? -1 : z->comm->wait(z->comm, err);
}

int pr_zero_gather_optim(pr_zero *z, const pr_optim *mine, pr_optim **full, pr_err *err)
{
    const pr_params *p = z->params;
    *full = z->comm->rank == 0 ? pr_optim_new(p, &mine->opts) : NULL;
    pr_arena *scratch = pr_arena_new("zero-gather", 0);
    int rc = 0;
    for (int i = 0; i < p->n && !rc; i++)
        for (int s = 0; s < (mine->opts.kind == PR_OPTIM_ADAMW ? 2 : 1) && !rc; s++) {
            pr_tensor *own = s ? mine->v[i] : mine->m[i], *dst = NULL;
            if (*full) dst = s ? (*full)->v[i] : (*full)->m[i];
            if (z->owner[i] == 0) {   /* rank 0's own: no message */
                if (dst) pr_copy_(dst, own);
                continue;
            }
            pr_tensor *buf = own ? own : dst ? dst : pr_empty_like(scratch, p->p[i].t);
            rc = z->comm->broadcast(z->comm, &buf, 1, z->owner[i], err) || z->comm->wait(z->comm, err) ? -1 : 0;
            pr_arena_reset(scratch);
        }
    pr_arena_free(scratch);
    if (*full) (*full)->t = mine->t;
    return rc;
}
