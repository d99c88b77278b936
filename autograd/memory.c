/* autograd/memory.c: what a step's tensors hold, by kind and dtype.
 *
 * The step arena frees nothing until pr_step_reset, so a step's peak is
 * every byte it handed out. pr_step_memory walks the tape after a backward
 * and sorts the data of the step arena's tensors it can reach into kinds:
 * op outputs (activations), autocast's casts (of parameters and of
 * activations apart), tensors saved for the backward, bf16 staging's wide
 * copies, and gradients. Each buffer counts once (views and saved tensors
 * that are an input or output share their data), in the first kind it is
 * found under. What the tape cannot reach (kernel scratch, nodes, names) is
 * the arena's peak less the sum.
 *
 * The CPU stages bf16 through f64 for every op but a few (ops/ops.def),
 * where CUDA runs most ops natively or stages through f32; `cuda_staged`
 * counts the staging CUDA would do too (at f32's size), so the CPU can tell
 * what a CUDA step of the same model holds (tests/test_autocast.c holds
 * bf16 below f32 with it). Not modelled: an op CUDA runs natively only at
 * some shapes (attention's bf16 kernels take head dims 32, 64, 96 and 128;
 * others stage). On CUDA every staging copy counts, at its own size.
 */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"

typedef struct {
    const void *data;
    size_t bytes, f32_bytes;   /* f32_bytes: the size at f32 (staging on CUDA) */
    int kind, order;
    pr_dtype dtype;
    bool cuda_staged;          /* a staging copy CUDA would make as well */
} buffer;

typedef struct {
    buffer *b;
    int n, cap;
} buffers;

static void add(buffers *bs, const pr_ctx *ctx, const pr_tensor *t, int kind, bool cuda_staged)
{
    if (!t || !t->data || t->numel == 0 || t->arena != ctx->step) return;
    if (bs->n == bs->cap) {
        int cap = bs->cap ? 2 * bs->cap : 1024;
        buffer *b = realloc(bs->b, sizeof *b * (size_t)cap);
        PR_CHECK(b, "step memory: out of host memory");
        bs->b = b, bs->cap = cap;
    }
    size_t f32_bytes = t->device == PR_CUDA ? pr_nbytes(t) : 4 * (size_t)t->numel;   /* CUDA stages in f32 */
    bs->b[bs->n] = (buffer){t->data, pr_nbytes(t), f32_bytes, kind, bs->n, t->dtype, cuda_staged};
    bs->n++;
}

/* a tensor and its gradient (a view's gradient is its base's: counted there) */
static void add_with_grad(buffers *bs, const pr_ctx *ctx, const pr_tensor *t, int kind, bool cuda_staged)
{
    add(bs, ctx, t, kind, cuda_staged);
    if (t && t->grad) add(bs, ctx, t->grad, kind == PR_MEM_STAGED ? PR_MEM_STAGED : PR_MEM_GRAD, cuda_staged);
}

static bool is_cast(const pr_node *n) { return strcmp(n->op->name, "cast") == 0; }

static bool is_param_cast(const pr_ctx *ctx, const pr_node *n)
{
    return is_cast(n) && n->in[0] && n->in[0]->arena != ctx->step;
}

static void add_node(buffers *bs, const pr_ctx *ctx, const pr_node *n)
{
    int out_kind = PR_MEM_OUTPUT;
    if (is_cast(n)) out_kind = is_param_cast(ctx, n) ? PR_MEM_PARAM_CAST : PR_MEM_CAST;
    for (int i = 0; i < n->n_out; i++) add_with_grad(bs, ctx, n->out[i], out_kind, false);
    for (int i = 0; i < n->n_in; i++) add_with_grad(bs, ctx, n->in[i], PR_MEM_OUTPUT, false);
    const pr_node *sh = n->staged;
    if (sh) {   /* the wide copies: those of ops CUDA stages too count toward a CUDA step */
        bool cuda = !n->op->bf16_native[PR_CUDA] || n->out[0]->device == PR_CUDA;
        for (int i = 0; i < sh->n_in; i++)
            if (sh->in[i] != n->in[i]) add_with_grad(bs, ctx, sh->in[i], PR_MEM_STAGED, cuda);
        for (int i = 0; i < sh->n_out; i++)
            if (sh->out[i] != n->out[i]) add_with_grad(bs, ctx, sh->out[i], PR_MEM_STAGED, cuda);
    }
    bool cuda_saved = sh && (!n->op->bf16_native[PR_CUDA] || n->out[0]->device == PR_CUDA);
    for (int i = 0; i < n->n_saved; i++)   /* a staged node's saved tensors are wide: staging's */
        add(bs, ctx, n->saved[i], sh ? PR_MEM_STAGED : PR_MEM_SAVED, cuda_saved);
}

static int by_data(const void *x, const void *y)
{
    const buffer *a = x, *b = y;
    if (a->data != b->data) return (const char *)a->data < (const char *)b->data ? -1 : 1;
    return a->order - b->order;
}

void pr_step_memory(const pr_ctx *ctx, pr_step_mem *m)
{
    *m = (pr_step_mem){0};
    buffers bs = {0};
    for (int p = 0; p < ctx->n_tape; p++) add_node(&bs, ctx, &ctx->tape[p]);
    qsort(bs.b, (size_t)bs.n, sizeof *bs.b, by_data);
    for (int i = 0; i < bs.n;) {   /* a run of one data pointer: a buffer, its views, its saved uses */
        buffer b = bs.b[i];          /* the kind it was first found under, the largest size */
        for (i++; i < bs.n && bs.b[i].data == b.data; i++)
            if (bs.b[i].bytes > b.bytes) b.bytes = bs.b[i].bytes, b.f32_bytes = bs.b[i].f32_bytes;
        m->bytes[b.kind][b.dtype] += b.bytes;
        m->total += b.bytes;
        if (b.kind == PR_MEM_STAGED && b.cuda_staged) m->cuda_staged += b.f32_bytes;
    }
    free(bs.b);
    m->arena_peak = pr_arena_peak(ctx->step);
    m->untracked = m->arena_peak > m->total ? m->arena_peak - m->total : 0;
}

static const char *const kind_names[PR_MEM_NKINDS] = {"outputs", "casts", "param casts", "saved",
                                                      "staged (wide copies)", "grads"};

size_t pr_step_mem_cuda_bytes(const pr_step_mem *m)
{
    size_t staged = 0;
    for (int d = 0; d < PR_NDTYPES; d++) staged += m->bytes[PR_MEM_STAGED][d];
    return m->total - staged + m->cuda_staged;
}

void pr_step_mem_print(const pr_step_mem *m, FILE *f)
{
    const double MiB = 1024.0 * 1024.0;
    fprintf(f, "| kind | f32 | bf16 | f64 | int | all |\n|---|---|---|---|---|---|\n");
    for (int k = 0; k < PR_MEM_NKINDS; k++) {
        const size_t *b = m->bytes[k], all = b[PR_F32] + b[PR_BF16] + b[PR_F64] + b[PR_I32] + b[PR_I64];
        fprintf(f, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", kind_names[k], b[PR_F32] / MiB, b[PR_BF16] / MiB,
                b[PR_F64] / MiB, (b[PR_I32] + b[PR_I64]) / MiB, all / MiB);
    }
    fprintf(f, "| untracked (kernel scratch, nodes) | | | | | %.2f |\n", m->untracked / MiB);
    fprintf(f, "| step arena peak | | | | | %.2f |\n", m->arena_peak / MiB);
    fprintf(f, "| tracked, as a CUDA step (its staging only, at f32) | | | | | %.2f |\n",
            pr_step_mem_cuda_bytes(m) / MiB);
}
