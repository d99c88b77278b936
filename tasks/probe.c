/* tasks/probe.c: the nine probe generators in two styles (tasks/tasks.h
 * explains the vocabularies, the seeding and the authors' layouts). A
 * paper-style task writes noise everywhere, then its items at drawn
 * positions, then its query at the end (the draws in that order, as they
 * have always been); an authors-style task writes its items and query first,
 * then noise where nothing is, from its own noise range. The answer is the
 * label of the last position. */
#include <string.h>

#include "tasks/tasks.h"

const char *const pr_probe_names[] = {"mqar", "poly_recall", "var_tracking", "local_xor", "parity",
                                      "mod_add", "palindrome", "silence_gate", "mux", NULL};

const char *const pr_probe_style_names[] = {"paper", "authors", NULL};

static int index_of(const char *const *names, const char *name)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

int pr_probe_by_name(const char *name) { return index_of(pr_probe_names, name); }
int pr_probe_style_by_name(const char *name) { return index_of(pr_probe_style_names, name); }

/* each generator's version (tasks.h), by style and kind: bumped when the
 * samples of a seed change. Version 2 of authors-style palindrome and
 * silence_gate takes the script's own tokens (commit 3bf565a). lm's windows
 * and rec's data are at 1. */
static const int probe_data_version[2][PR_PROBE_COUNT] = {
    [PR_PROBE_PAPER] = {1, 1, 1, 1, 1, 1, 1, 1, 1},
    [PR_PROBE_AUTHORS] = {1, 1, 1, 1, 1, 1, [PR_PROBE_PALINDROME] = 2, [PR_PROBE_SILENCE_GATE] = 2, 1},
};

int pr_task_data_version(const char *task, const char *style)
{
    int kind = pr_probe_by_name(task), s = pr_probe_style_by_name(style);
    return kind >= 0 && s >= 0 ? probe_data_version[s][kind] : 1;
}

/* the random draws of one sample: Philox (seed, split) at counters index * 2^24 + k */
typedef struct {
    uint64_t seed, base, k;
    uint32_t stream;
} draws;

static int64_t draw_below(draws *d, int64_t n)
{
    int64_t v = (int64_t)(pr_philox_uniform(d->seed, d->stream, d->base + d->k++) * (double)n);
    return v < n ? v : n - 1;
}

/* a data value in [lo, hi) */
static int draw_data(draws *d, int lo, int hi) { return pr_probe_data(lo + (int)draw_below(d, hi - lo)); }

/* n distinct values of [lo, hi) into out (partial Fisher-Yates over a small pool) */
static void draw_distinct(draws *d, int lo, int hi, int n, int *out)
{
    int pool[4096];
    int m = hi - lo;
    for (int i = 0; i < m; i++) pool[i] = lo + i;
    for (int i = 0; i < n; i++) {
        int j = i + (int)draw_below(d, m - i), t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        out[i] = pool[i];
    }
}

/* n increasing, non-overlapping starts of items `width` long inside [0, span) */
static void draw_slots(draws *d, int span, int width, int n, int *starts)
{
    int slots = span / width;
    draw_distinct(d, 0, slots, n, starts);
    for (int i = 1; i < n; i++)  /* insertion sort: n is small */
        for (int j = i; j > 0 && starts[j - 1] > starts[j]; j--) {
            int t = starts[j];
            starts[j] = starts[j - 1];
            starts[j - 1] = t;
        }
    for (int i = 0; i < n; i++) starts[i] *= width;
}

/* the shortest sequence each task's items and query fit in */
static int min_seq_len(const pr_probe *p)
{
    if (p->style == PR_PROBE_AUTHORS)
        switch (p->kind) {
        case PR_PROBE_MQAR: return 4 * p->n_pairs + 2;
        case PR_PROBE_POLY_RECALL: return 1 + 2 * p->n_pairs + 2;
        case PR_PROBE_VAR_TRACKING: return 2 * p->n_updates + 2;
        default: return 8;
        }
    /* the longest paper layout: poly_recall's two blocks and its 3-token query */
    return p->kind == PR_PROBE_MQAR ? 4 * p->n_pairs + 2
         : p->kind == PR_PROBE_POLY_RECALL ? 2 * (1 + 2 * p->n_pairs) + 3
         : p->kind == PR_PROBE_VAR_TRACKING ? 3 * p->n_pairs + 2
         : 8;
}

int pr_probe_init(pr_probe *p, pr_probe_kind kind, pr_probe_style style, int vocab, int seq_len, uint64_t seed,
                  pr_err *err)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->style = style;
    p->vocab = vocab;
    p->seq_len = seq_len;
    p->seed = seed;
    p->n_bits = 3;
    p->modulus = 16;
    const char *name = pr_probe_names[kind];
    if (style == PR_PROBE_AUTHORS) {
        p->n_pairs = kind == PR_PROBE_VAR_TRACKING ? 3 : 2;
        p->n_updates = 3;
        p->n_data = vocab - PR_AU_N_CONTROL;
        /* mux's lower half [10, V/2) needs two values; 4096 bounds draw_distinct's pool */
        if (vocab < 24 || vocab > 4096)
            return pr_errf(err, "task %s: probe.style authors needs vocab 24 to 4096, not %d", name, vocab);
    } else {
        p->n_pairs = 4;
        p->n_noise = (vocab - PR_PROBE_N_CONTROL) / 3;
        p->n_data = vocab - PR_PROBE_N_CONTROL - p->n_noise;
        if (p->n_noise < 1 || p->n_data < 16 || p->n_data > 4096)
            return pr_errf(err, "task %s: vocab %d gives %d data tokens; it needs 16 to 4096 (vocab 36 to 6000)",
                           name, vocab, p->n_data);
    }
    if (seq_len > 8192) return pr_errf(err, "task %s: seq_len %d is over the probes' 8192", name, seq_len);
    if (seq_len < min_seq_len(p))
        return pr_errf(err, "task %s: seq_len %d is too short; it needs at least %d", name, seq_len, min_seq_len(p));
    return 0;
}

/* ---- paper style: each fills t[0..T) over noise, returns the answer ---------------- */
static int gen_mqar(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int K = p->n_pairs, half = p->n_data / 2, keys[64], starts[64];
    draw_distinct(d, 0, half, K, keys);
    draw_slots(d, T / 2, 2, K, starts);
    int vals[64];
    for (int i = 0; i < K; i++) {
        vals[i] = draw_data(d, half, p->n_data);
        t[starts[i]] = pr_probe_data(keys[i]);
        t[starts[i] + 1] = vals[i];
    }
    int q = (int)draw_below(d, K);
    t[T - 2] = PR_TOK_QUERY;
    t[T - 1] = pr_probe_data(keys[q]);
    return vals[q];
}

static void put_block(int32_t *t, int at, int ctx, int K, const int *keys, const int *vals)
{
    t[at] = ctx;
    for (int i = 0; i < K; i++) {
        t[at + 1 + 2 * i] = pr_probe_data(keys[i]);
        t[at + 2 + 2 * i] = vals[i];
    }
}

static int gen_poly_recall(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int K = p->n_pairs, half = p->n_data / 2, len = 1 + 2 * K, keys[64], v1[64], v2[64];
    draw_distinct(d, 0, half, K, keys);
    for (int i = 0; i < K; i++) {
        v1[i] = draw_data(d, half, p->n_data);
        do v2[i] = draw_data(d, half, p->n_data); while (v2[i] == v1[i]);  /* the context matters */
    }
    int mid = (T - 3) / 2;
    put_block(t, (int)draw_below(d, mid - len + 1), PR_TOK_CTX1, K, keys, v1);
    put_block(t, mid + (int)draw_below(d, T - 3 - mid - len + 1), PR_TOK_CTX2, K, keys, v2);
    int q = (int)draw_below(d, K), c = (int)draw_below(d, 2);
    t[T - 3] = PR_TOK_QUERY;
    t[T - 2] = c ? PR_TOK_CTX2 : PR_TOK_CTX1;
    t[T - 1] = pr_probe_data(keys[q]);
    return c ? v2[q] : v1[q];
}

/* variables are data values [0, half), values [half, n_data); a variable is
 * assigned a value or an earlier variable, so it resolves through a chain */
static int gen_var_tracking(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int K = p->n_pairs, half = p->n_data / 2, vars[64], starts[64], resolved[64];
    draw_distinct(d, 0, half, K, vars);
    draw_slots(d, T - 2, 3, K, starts);
    for (int i = 0; i < K; i++) {
        int src;
        if (i == 0 || draw_below(d, 2) == 0) {
            src = resolved[i] = draw_data(d, half, p->n_data);
        } else {
            int j = (int)draw_below(d, i);
            src = pr_probe_data(vars[j]);
            resolved[i] = resolved[j];
        }
        t[starts[i]] = pr_probe_data(vars[i]);
        t[starts[i] + 1] = PR_TOK_ASSIGN;
        t[starts[i] + 2] = src;
    }
    int q = (int)draw_below(d, K);
    t[T - 2] = PR_TOK_QUERY;
    t[T - 1] = pr_probe_data(vars[q]);
    return resolved[q];
}

static int gen_local_xor(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int a = (int)draw_below(d, p->n_data), b = (int)draw_below(d, p->n_data / 2) * 2;
    if (draw_below(d, 2)) b += 1;                        /* b's parity is a fair coin */
    if (b >= p->n_data) b -= 2;
    int at = (int)draw_below(d, T - 1 - 3 + 1);
    t[at] = pr_probe_data(a);
    t[at + 1] = pr_probe_data(b);
    t[at + 2] = PR_TOK_XOR;
    t[T - 1] = PR_TOK_QUERY;
    return (a % 2) != (b % 2) ? PR_TOK_TRUE : PR_TOK_FALSE;
}

static int gen_parity(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int n = p->n_bits, at = (int)draw_below(d, T - 1 - n + 1), sum = 0;
    for (int i = 0; i < n; i++) {
        int bit = (int)draw_below(d, 2);
        sum += bit;
        t[at + i] = pr_probe_data(bit);
    }
    t[T - 1] = PR_TOK_QUERY;
    return pr_probe_data(sum % 2);
}

static int gen_mod_add(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int M = p->modulus, a = (int)draw_below(d, M), b = (int)draw_below(d, M);
    int at = (int)draw_below(d, T - 1 - 2 + 1);
    t[at] = pr_probe_data(a);
    t[at + 1] = pr_probe_data(b);
    t[T - 1] = PR_TOK_QUERY;
    return pr_probe_data((a + b) % M);
}

static int gen_palindrome(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int a = (int)draw_below(d, p->n_data), b = (int)draw_below(d, p->n_data), c = a;
    bool yes = draw_below(d, 2) == 0;
    if (!yes) c = (a + 1 + (int)draw_below(d, p->n_data - 1)) % p->n_data;  /* any other value */
    int at = (int)draw_below(d, T - 1 - 3 + 1);
    t[at] = pr_probe_data(a);
    t[at + 1] = pr_probe_data(b);
    t[at + 2] = pr_probe_data(c);
    t[T - 1] = PR_TOK_QUERY;
    return yes ? PR_TOK_TRUE : PR_TOK_FALSE;
}

static int gen_silence_gate(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int half = p->n_data / 2, k = draw_data(d, 0, half), v = draw_data(d, half, p->n_data);
    bool on = draw_below(d, 2) == 0;
    int at = (int)draw_below(d, T - 2 - 3 + 1);
    t[at] = on ? PR_TOK_ON : PR_TOK_OFF;
    t[at + 1] = k;
    t[at + 2] = v;
    t[T - 2] = PR_TOK_QUERY;
    t[T - 1] = k;
    return on ? v : PR_TOK_NULL;
}

static int gen_mux(const pr_probe *p, draws *d, int32_t *t, int T)
{
    int ch0 = (int)draw_below(d, p->n_data), ch1 = (ch0 + 1 + (int)draw_below(d, p->n_data - 1)) % p->n_data;
    bool sel1 = draw_below(d, 2) == 1;
    int at = (int)draw_below(d, T - 1 - 3 + 1);
    t[at] = sel1 ? PR_TOK_SEL1 : PR_TOK_SEL0;
    t[at + 1] = pr_probe_data(ch0);
    t[at + 2] = pr_probe_data(ch1);
    t[T - 1] = PR_TOK_QUERY;
    return pr_probe_data(sel1 ? ch1 : ch0);
}

typedef int (*probe_gen)(const pr_probe *p, draws *d, int32_t *t, int T);
static const probe_gen generators[PR_PROBE_COUNT] = {
    gen_mqar, gen_poly_recall, gen_var_tracking, gen_local_xor, gen_parity,
    gen_mod_add, gen_palindrome, gen_silence_gate, gen_mux,
};

/* ---- authors style: each places its items and query in t (the rest -1), says
 * where its noise comes from, and returns the answer ------------------------------- */
typedef struct {
    int lo, hi;              /* noise tokens [lo, hi) ... */
    int n_skip, skip[4];     /* ... other than these */
} noise_range;

/* a token of [lo, hi) */
static int draw_token(draws *d, int lo, int hi) { return lo + (int)draw_below(d, hi - lo); }
/* the data tokens [10, V) */
static int draw_au_data(const pr_probe *p, draws *d) { return draw_token(d, PR_AU_N_CONTROL, p->vocab); }
/* where a block of `len` tokens starts, ending before the last `tail` positions */
static int draw_block(draws *d, int T, int len, int tail) { return (int)draw_below(d, T - tail - len + 1); }

static int au_mqar(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    int K = p->n_pairs, keys[8], vals[8], starts[8];
    draw_distinct(d, PR_AU_N_CONTROL, p->vocab, K, keys);
    draw_slots(d, T / 2, 2, K, starts);
    for (int i = 0; i < K; i++) {
        vals[i] = draw_au_data(p, d);
        t[starts[i]] = keys[i];
        t[starts[i] + 1] = vals[i];
        nz->skip[nz->n_skip++] = keys[i];
    }
    int q = (int)draw_below(d, K);
    t[T - 2] = PR_AU_QUERY;
    t[T - 1] = keys[q];
    return vals[q];
}

static int au_poly_recall(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    (void)nz;
    int K = p->n_pairs, keys[8], vals[8], at = draw_block(d, T, 1 + 2 * K, 2);
    draw_distinct(d, PR_AU_N_CONTROL, p->vocab, K, keys);
    t[at] = PR_AU_CTX;
    for (int i = 0; i < K; i++) {
        vals[i] = draw_au_data(p, d);
        t[at + 1 + 2 * i] = keys[i];
        t[at + 2 + 2 * i] = vals[i];
    }
    int q = (int)draw_below(d, K);
    t[T - 2] = PR_AU_QUERY;
    t[T - 1] = keys[q];
    return vals[q];
}

static int au_var_tracking(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    (void)nz;
    int n = p->n_updates, vars[8], starts[8], var_of[8] = {0}, latest = -1;
    draw_distinct(d, PR_AU_N_CONTROL, p->vocab, p->n_pairs, vars);
    draw_slots(d, T - 2, 2, n, starts);
    for (int i = 0; i < n; i++) {
        var_of[i] = vars[draw_below(d, p->n_pairs)];
        t[starts[i]] = var_of[i];
        t[starts[i] + 1] = draw_au_data(p, d);
    }
    int k = var_of[draw_below(d, n)];
    for (int i = 0; i < n; i++)
        if (var_of[i] == k) latest = t[starts[i] + 1];   /* the slots are in order: the last one wins */
    t[T - 2] = PR_AU_QUERY;
    t[T - 1] = k;
    return latest;
}

static int au_local_xor(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    (void)nz;
    int a = draw_au_data(p, d), b = draw_au_data(p, d), at = draw_block(d, T, 3, 1);
    t[at] = a, t[at + 1] = b, t[at + 2] = PR_AU_XOR;
    t[T - 1] = PR_AU_QUERY;
    return a % 2 != b % 2 ? PR_AU_TRUE : PR_AU_FALSE;
}

/* the authors' parity has its own tokens: operator 3, query 2, and noise from
 * the bits up, so a bit token alone does not mark the block: the operator does */
static int au_parity(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    int n = p->n_bits, at = draw_block(d, T, n + 1, 1), sum = 0;
    for (int i = 0; i < n; i++) {
        t[at + i] = draw_token(d, PR_AU_BIT0, PR_AU_BIT0 + 4);
        sum += t[at + i];
    }
    t[at + n] = PR_AU_NBIT;
    t[T - 1] = PR_AU_NBIT_QUERY;
    nz->lo = PR_AU_BIT0;
    return sum % 2;
}

static int au_mod_add(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    int M = p->modulus, a = draw_token(d, 0, M), b = draw_token(d, 0, M), at = draw_block(d, T, 3, 1);
    t[at] = a, t[at + 1] = b, t[at + 2] = p->vocab - 2;   /* the VAL operator */
    t[T - 1] = p->vocab - 1;                              /* its query */
    nz->lo = 0, nz->hi = p->vocab - 2;
    return (a + b) % M;
}

/* the authors' palindrome has its own tokens: operator 3, query 4, and every
 * value (a to d, and the noise) from 5 up; a positive repeats a at exactly
 * one of c and d */
static int au_palindrome(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    int lo = PR_AU_PAL_FIRST, n = p->vocab - lo;
    int a = draw_token(d, lo, p->vocab), b = draw_token(d, lo, p->vocab), at = draw_block(d, T, 5, 1);
    int c = lo + (a - lo + 1 + (int)draw_below(d, n - 1)) % n;   /* two values other than a */
    int e = lo + (a - lo + 1 + (int)draw_below(d, n - 1)) % n;
    if (draw_below(d, 2) == 0) {          /* positive: a takes the place of c or of d */
        if (draw_below(d, 2) == 0) c = a;
        else e = a;
    }
    t[at] = a, t[at + 1] = b, t[at + 2] = c, t[at + 3] = e, t[at + 4] = PR_AU_PAL;
    t[T - 1] = PR_AU_PAL_QUERY;
    nz->lo = lo;
    return a == c || a == e ? PR_AU_TRUE : PR_AU_FALSE;
}

/* the authors' silence_gate has its own tokens: on 1, off 2, query 3, and
 * keys and values from [4, V-5); noise covers the whole vocabulary */
static int au_silence_gate(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    int hi = p->vocab - 5;
    int k = draw_token(d, PR_AU_GATE_FIRST, hi), v = draw_token(d, PR_AU_GATE_FIRST, hi), at = draw_block(d, T, 3, 2);
    bool on = draw_below(d, 2) == 0;
    t[at] = on ? PR_AU_ON : PR_AU_OFF, t[at + 1] = k, t[at + 2] = v;
    t[T - 2] = PR_AU_GATE_QUERY;
    t[T - 1] = k;
    nz->lo = 0;
    return on ? v : PR_AU_NULL;
}

static int au_mux(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz)
{
    (void)nz;
    int half = p->vocab / 2, c0 = draw_token(d, PR_AU_N_CONTROL, half), c1 = draw_token(d, half, p->vocab);
    bool sel1 = draw_below(d, 2) == 1;
    int at = draw_block(d, T, 4, 1);
    t[at] = sel1 ? PR_AU_SEL1 : PR_AU_SEL0, t[at + 1] = c0, t[at + 2] = c1, t[at + 3] = PR_AU_MUX;
    t[T - 1] = PR_AU_QUERY;
    return sel1 ? c1 : c0;
}

typedef int (*authors_gen)(const pr_probe *p, draws *d, int32_t *t, int T, noise_range *nz);
static const authors_gen authors_generators[PR_PROBE_COUNT] = {
    au_mqar, au_poly_recall, au_var_tracking, au_local_xor, au_parity,
    au_mod_add, au_palindrome, au_silence_gate, au_mux,
};

static bool skipped(const noise_range *nz, int tok)
{
    for (int i = 0; i < nz->n_skip; i++)
        if (nz->skip[i] == tok) return true;
    return false;
}

/* every -1 of t a noise token: a draw over the range's allowed tokens */
static void fill_noise(const pr_probe *p, draws *d, const noise_range *nz, int32_t *t)
{
    int allowed[4096], n = 0;
    for (int tok = nz->lo; tok < nz->hi; tok++)
        if (!skipped(nz, tok)) allowed[n++] = tok;
    for (int i = 0; i < p->seq_len; i++)
        if (t[i] < 0) t[i] = allowed[draw_below(d, n)];
}

static int sample_authors(const pr_probe *p, draws *d, int32_t *tokens)
{
    for (int i = 0; i < p->seq_len; i++) tokens[i] = -1;
    noise_range nz = {.lo = PR_AU_N_CONTROL, .hi = p->vocab};
    int answer = authors_generators[p->kind](p, d, tokens, p->seq_len, &nz);
    if (!p->no_noise) fill_noise(p, d, &nz, tokens);
    return answer;
}

int pr_probe_sample(const pr_probe *p, int split, int64_t index, int32_t *tokens)
{
    draws d = {.seed = p->seed, .stream = (uint32_t)split, .base = (uint64_t)index << 24};
    if (p->style == PR_PROBE_AUTHORS) return sample_authors(p, &d, tokens);
    int first_noise = pr_probe_first_noise(p);
    for (int i = 0; i < p->seq_len; i++) {
        int noise = first_noise + (int)draw_below(&d, p->n_noise);   /* drawn either way: the items draw the same */
        tokens[i] = p->no_noise ? -1 : noise;
    }
    return generators[p->kind](p, &d, tokens, p->seq_len);
}
