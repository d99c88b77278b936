/* autograd/inspect.c: the tape as text and as Graphviz DOT. */
#include <stdlib.h>

#include "autograd/autograd.h"

static void tensor_label(const pr_tensor *t, char *buf, size_t n)
{
    char shape[96];
    snprintf(buf, n, "%s%s%s", t->name ? t->name : "", t->name ? ":" : "", pr_shape_str(t, shape, sizeof shape));
}

void pr_tape_dump(const pr_ctx *ctx, FILE *f)
{
    for (int p = 0; p < ctx->n_tape; p++) {
        const pr_node *n = &ctx->tape[p];
        char buf[160];
        fprintf(f, "%4d %-14s", p, n->op->name);
        for (int i = 0; i < n->n_in; i++) {
            if (!n->in[i]) continue;
            tensor_label(n->in[i], buf, sizeof buf);
            fprintf(f, " %s", buf);
        }
        fprintf(f, " ->");
        for (int i = 0; i < n->n_out; i++) {
            tensor_label(n->out[i], buf, sizeof buf);
            fprintf(f, " %s", buf);
            if (n->out[i]->grad) fprintf(f, " |grad|=%.4g", pr_norm2(n->out[i]->grad));
        }
        fprintf(f, "\n");
    }
}

/* a leaf's DOT id: its rank among the leaves in tape order, so two runs of the
 * same graph give the same file (an address would differ every run) */
typedef struct {
    const pr_tensor **t;
    int n, cap;
} leaf_ids;

static int leaf_id(leaf_ids *ids, const pr_tensor *t, bool *first)
{
    for (int i = 0; i < ids->n; i++)
        if (ids->t[i] == t) return *first = false, i;
    if (ids->n == ids->cap) {
        ids->cap = ids->cap ? 2 * ids->cap : 64;
        ids->t = realloc(ids->t, sizeof *ids->t * (size_t)ids->cap);
        PR_CHECK(ids->t, "tape dot: out of host memory");
    }
    ids->t[ids->n] = t;
    *first = true;
    return ids->n++;
}

void pr_tape_dot(const pr_ctx *ctx, FILE *f)
{
    leaf_ids ids = {0};
    fprintf(f, "digraph tape {\n  rankdir=LR;\n  node [fontname=\"monospace\"];\n");
    for (int p = 0; p < ctx->n_tape; p++) {
        const pr_node *n = &ctx->tape[p];
        fprintf(f, "  op%d [shape=box, label=\"%s\"];\n", p, n->op->name);
        for (int i = 0; i < n->n_in; i++) {
            const pr_tensor *t = n->in[i];
            if (!t) continue;
            char buf[160];
            tensor_label(t, buf, sizeof buf);
            if (t->tape_pos >= 0 && t->tape_pos < p) {
                fprintf(f, "  op%d -> op%d [label=\"%s\"];\n", t->tape_pos, p, buf);
                continue;
            }
            bool first;
            int id = leaf_id(&ids, t, &first);
            if (first) fprintf(f, "  leaf%d [shape=ellipse, label=\"%s\"];\n", id, buf);
            fprintf(f, "  leaf%d -> op%d;\n", id, p);
        }
    }
    fprintf(f, "}\n");
    free(ids.t);
}
