/* tests/test_tasks.c: what the task generators put in their sequences.
 *
 * Every probe's samples, in both styles, are solved by an independent reader
 * of the sequence (find the items, compute the answer) and must agree with
 * the generator's label: paper-style samples as they are (their noise never
 * equals an operand), authors-style ones with the noise left out (no_noise:
 * their noise may repeat an operand); with noise, a sample holds the same
 * items and its other tokens come only from the task's noise range; a
 * sample is a pure function of (seed, split, index); the train and eval
 * splits differ; binary answers are balanced. The byte text task:
 * windows are the file's bytes with their next bytes, training windows stay
 * in the training part, validation windows tile the last tenth.
 */
#include <unistd.h>

#include "tests/pr_test.h"
#include "tasks/tasks.h"

enum { T = 40, V = 64, N_SAMPLES = 300 };

static bool is_noise(const pr_probe *p, int tok) { return tok >= pr_probe_first_noise(p) && tok < p->vocab; }
static bool is_data(const pr_probe *p, int tok) { return tok >= PR_PROBE_N_CONTROL && tok < pr_probe_first_noise(p); }

static int find(const int32_t *t, int from, int to, int tok)
{
    for (int i = from; i < to; i++)
        if (t[i] == tok) return i;
    return -1;
}

/* the answer as read from the sequence; *used = positions that are not noise */
static int solve(const pr_probe *p, const int32_t *t, int *used)
{
    int x = -1, n = 0;
    switch (p->kind) {
    case PR_PROBE_MQAR: {
        assert_int_equal(t[T - 2], PR_TOK_QUERY);
        for (int i = 0; i < T / 2; i += 2)
            if (t[i] == t[T - 1]) x = i, n++;
        assert_int_equal(n, 1);                        /* the queried key sits once, on an even slot */
        *used = 2 * p->n_pairs + 2;
        return t[x + 1];
    }
    case PR_PROBE_POLY_RECALL: {
        assert_int_equal(t[T - 3], PR_TOK_QUERY);
        int c = find(t, 0, T - 3, t[T - 2]), other = find(t, 0, T - 3, t[T - 2] == PR_TOK_CTX1 ? PR_TOK_CTX2
                                                                                              : PR_TOK_CTX1);
        assert_true(c >= 0 && other >= 0);
        for (int i = 0; i < p->n_pairs; i++)
            if (t[c + 1 + 2 * i] == t[T - 1]) {
                assert_int_equal(t[other + 1 + 2 * i], t[T - 1]);   /* same key, other context */
                assert_int_not_equal(t[other + 2 + 2 * i], t[c + 2 + 2 * i]);
                *used = 2 * (1 + 2 * p->n_pairs) + 3;
                return t[c + 2 + 2 * i];
            }
        fail_msg("poly_recall: key not in its context's block");
    }
    case PR_PROBE_VAR_TRACKING: {
        assert_int_equal(t[T - 2], PR_TOK_QUERY);
        int value[V] = {0};
        for (int i = 1; i < T - 2; i++)
            if (t[i] == PR_TOK_ASSIGN) {
                int src = t[i + 1];
                value[t[i - 1]] = value[src] ? value[src] : src;  /* a variable resolves through its chain */
                n++;
            }
        assert_int_equal(n, p->n_pairs);
        *used = 3 * p->n_pairs + 2;
        return value[t[T - 1]];
    }
    case PR_PROBE_LOCAL_XOR:
        x = find(t, 0, T - 1, PR_TOK_XOR);
        assert_true(x >= 2 && is_data(p, t[x - 2]) && is_data(p, t[x - 1]));
        *used = 4;
        return (t[x - 2] - PR_PROBE_N_CONTROL) % 2 != (t[x - 1] - PR_PROBE_N_CONTROL) % 2 ? PR_TOK_TRUE : PR_TOK_FALSE;
    case PR_PROBE_PARITY: {
        int first = -1, sum = 0;
        for (int i = 0; i < T - 1; i++)
            if (t[i] == pr_probe_data(0) || t[i] == pr_probe_data(1)) {
                if (first < 0) first = i;
                assert_int_equal(i, first + n);            /* one contiguous block */
                sum += t[i] == pr_probe_data(1);
                n++;
            }
        assert_int_equal(n, p->n_bits);
        *used = n + 1;
        return pr_probe_data(sum % 2);
    }
    case PR_PROBE_MOD_ADD:
        for (x = 0; x < T - 2 && !is_data(p, t[x]); x++) {}
        assert_true(is_data(p, t[x + 1]));
        *used = 3;
        return pr_probe_data((t[x] - PR_PROBE_N_CONTROL + t[x + 1] - PR_PROBE_N_CONTROL) % p->modulus);
    case PR_PROBE_PALINDROME:
        for (x = 0; x < T - 3 && !is_data(p, t[x]); x++) {}
        assert_true(is_data(p, t[x + 1]) && is_data(p, t[x + 2]));
        *used = 4;
        return t[x] == t[x + 2] ? PR_TOK_TRUE : PR_TOK_FALSE;
    case PR_PROBE_SILENCE_GATE:
        x = find(t, 0, T - 2, PR_TOK_ON);
        if (x < 0) x = find(t, 0, T - 2, PR_TOK_OFF);
        assert_true(x >= 0);
        assert_int_equal(t[T - 2], PR_TOK_QUERY);
        assert_int_equal(t[T - 1], t[x + 1]);
        *used = 5;
        return t[x] == PR_TOK_ON ? t[x + 2] : PR_TOK_NULL;
    case PR_PROBE_MUX:
        x = find(t, 0, T - 1, PR_TOK_SEL0);
        if (x < 0) x = find(t, 0, T - 1, PR_TOK_SEL1);
        assert_true(x >= 0);
        *used = 4;
        return t[x] == PR_TOK_SEL0 ? t[x + 1] : t[x + 2];
    default:
        fail_msg("no solver for task %d", p->kind);
    }
    return -1;
}

static void test_probes_hold_their_answers(void **state)
{
    (void)state;
    for (int k = 0; k < PR_PROBE_COUNT; k++) {
        pr_probe p;
        pr_err err;
        assert_int_equal(pr_probe_init(&p, (pr_probe_kind)k, PR_PROBE_PAPER, V, T, 7, &err), 0);
        int answers[V] = {0};
        for (int j = 0; j < N_SAMPLES; j++) {
            int32_t t[T], again[T], other[T];
            int label = pr_probe_sample(&p, 0, j, t);
            assert_int_equal(pr_probe_sample(&p, 0, j, again), label);    /* a pure function of (seed, split, j) */
            assert_memory_equal(t, again, sizeof t);
            pr_probe_sample(&p, 1, j, other);
            assert_true(memcmp(t, other, sizeof t) != 0);                  /* eval is another stream */
            int used = 0, solved = solve(&p, t, &used), noise = 0;
            if (solved != label) fail_msg("%s sample %d: generator says %d, the sequence says %d", pr_probe_names[k], j,
                                          label, solved);
            for (int i = 0; i < T; i++) noise += is_noise(&p, t[i]);
            if (noise != T - used) fail_msg("%s sample %d: %d noise tokens, want %d", pr_probe_names[k], j, noise, T - used);
            assert_true(label >= 0 && label < V && !is_noise(&p, label));
            answers[label]++;
        }
        if (k == PR_PROBE_PARITY || k == PR_PROBE_LOCAL_XOR || k == PR_PROBE_PALINDROME || k == PR_PROBE_SILENCE_GATE) {
            int a = k == PR_PROBE_PARITY ? pr_probe_data(1) : k == PR_PROBE_SILENCE_GATE ? PR_TOK_NULL : PR_TOK_TRUE;
            if (answers[a] < N_SAMPLES * 35 / 100 || answers[a] > N_SAMPLES * 65 / 100)
                fail_msg("%s: answer %d in %d of %d samples; want about half", pr_probe_names[k], a, answers[a], N_SAMPLES);
        }
    }
}

/* ---- authors style ------------------------------------------------------------------ */
enum { AT = 64, AV = 32, A_SAMPLES = 2000 };

/* the positions of a noise-free sample that hold something */
static int count_items(const int32_t *t, int n)
{
    int used = 0;
    for (int i = 0; i < n; i++) used += t[i] >= 0;
    return used;
}

/* the one position in [0, n) that holds tok */
static int find_once(const int32_t *t, int n, int tok)
{
    int at = -1, hits = 0;
    for (int i = 0; i < n; i++)
        if (t[i] == tok) at = i, hits++;
    assert_int_equal(hits, 1);
    return at;
}

static bool is_au_data(int tok) { return tok >= PR_AU_N_CONTROL && tok < AV; }

/* the answer of a noise-free authors-style sample, read from its tokens; every
 * other position must be empty (-1) */
static int solve_authors(const pr_probe *p, const int32_t *t)
{
    const int T = AT, items = count_items(t, T);
    switch (p->kind) {
    case PR_PROBE_MQAR: {
        assert_int_equal(t[T - 2], PR_AU_QUERY);
        assert_int_equal(items, 2 * p->n_pairs + 2);   /* the pairs, then [1, k] */
        for (int i = 0; i < T / 2; i += 2)
            if (t[i] == t[T - 1]) return t[i + 1];
        fail_msg("mqar: the key is not at an even position of the first half");
    }
    case PR_PROBE_POLY_RECALL: {
        int c = find_once(t, T, PR_AU_CTX);
        assert_int_equal(items, 1 + 2 * p->n_pairs + 2);
        assert_int_equal(t[T - 2], PR_AU_QUERY);
        for (int i = 0; i < p->n_pairs; i++)
            if (t[c + 1 + 2 * i] == t[T - 1]) return t[c + 2 + 2 * i];
        fail_msg("poly_recall: the key is not in the block");
    }
    case PR_PROBE_VAR_TRACKING: {
        assert_int_equal(t[T - 2], PR_AU_QUERY);
        assert_int_equal(items, 2 * p->n_updates + 2);
        int latest = -1, updates = 0, vars[AV] = {0};
        for (int i = 0; i < T - 2; i++) {
            if (t[i] < 0) continue;
            assert_true(is_au_data(t[i]) && is_au_data(t[i + 1]));
            vars[t[i]] = 1;
            if (t[i] == t[T - 1]) latest = t[i + 1];
            updates++, i++;
        }
        int distinct = 0;
        for (int v = 0; v < AV; v++) distinct += vars[v];
        assert_int_equal(updates, p->n_updates);
        assert_true(distinct <= p->n_pairs);
        return latest;
    }
    case PR_PROBE_LOCAL_XOR: {
        int x = find_once(t, T, PR_AU_XOR);
        assert_int_equal(items, 4);
        assert_int_equal(t[T - 1], PR_AU_QUERY);
        assert_true(is_au_data(t[x - 2]) && is_au_data(t[x - 1]));
        return t[x - 2] % 2 != t[x - 1] % 2 ? 1 : 0;
    }
    case PR_PROBE_PARITY: {
        int x = find_once(t, T, PR_AU_NBIT), sum = 0;
        assert_int_equal(items, p->n_bits + 2);
        assert_int_equal(t[T - 1], PR_AU_NBIT_QUERY);
        for (int i = x - p->n_bits; i < x; i++) {
            assert_true(t[i] >= 4 && t[i] <= 7);
            sum += t[i];
        }
        return sum % 2;
    }
    case PR_PROBE_MOD_ADD: {
        int x = find_once(t, T - 1, AV - 2);
        assert_int_equal(items, 4);
        assert_int_equal(t[T - 1], AV - 1);
        assert_true(t[x - 2] < 16 && t[x - 1] < 16);
        return (t[x - 2] + t[x - 1]) % 16;
    }
    case PR_PROBE_PALINDROME: {
        int x = find_once(t, T, PR_AU_PAL);
        assert_int_equal(items, 6);
        assert_int_equal(t[T - 1], PR_AU_PAL_QUERY);
        const int32_t *b = t + x - 4;
        for (int i = 0; i < 4; i++) assert_true(b[i] >= PR_AU_PAL_FIRST && b[i] < AV);
        return b[0] == b[2] || b[0] == b[3] ? 1 : 0;
    }
    case PR_PROBE_SILENCE_GATE: {
        int x = -1;
        for (int i = 0; i < T - 2; i++)
            if (t[i] == PR_AU_ON || t[i] == PR_AU_OFF) x = i;
        assert_true(x >= 0);
        assert_int_equal(items, 5);
        assert_int_equal(t[T - 2], PR_AU_GATE_QUERY);
        assert_int_equal(t[T - 1], t[x + 1]);
        for (int i = 1; i < 3; i++) assert_true(t[x + i] >= PR_AU_GATE_FIRST && t[x + i] < AV - 5);
        return t[x] == PR_AU_ON ? t[x + 2] : 0;
    }
    case PR_PROBE_MUX: {
        int x = find_once(t, T, PR_AU_MUX);
        assert_int_equal(items, 5);
        assert_true(t[x - 3] == 4 || t[x - 3] == 5);
        assert_true(t[x - 2] >= PR_AU_N_CONTROL && t[x - 2] < AV / 2 && t[x - 1] >= AV / 2 && t[x - 1] < AV);
        return t[x - 3] == 4 ? t[x - 2] : t[x - 1];
    }
    default:
        fail_msg("no solver for task %d", p->kind);
    }
    return -1;
}

/* the tokens noise may take in a task (the authors' ranges) */
static bool authors_noise_ok(const pr_probe *p, const int32_t *clean, int tok)
{
    if (p->kind == PR_PROBE_SILENCE_GATE) return tok >= 0 && tok < AV;
    if (p->kind == PR_PROBE_MOD_ADD) return tok >= 0 && tok < AV - 2;
    if (p->kind == PR_PROBE_PARITY) return tok >= PR_AU_BIT0 && tok < AV;   /* bits too, never 2 or 3 */
    if (p->kind == PR_PROBE_PALINDROME) return tok >= PR_AU_PAL_FIRST && tok < AV;   /* the values, never 3 or 4 */
    if (p->kind == PR_PROBE_MQAR)   /* never a key */
        for (int i = 0; i < AT / 2; i += 2)
            if (clean[i] == tok) return false;
    return is_au_data(tok);
}

/* a sample with and without noise: the same label and items; noise where the clean one is empty */
static void check_noise(const pr_probe *clean_p, int64_t j, const int32_t *clean, int label)
{
    pr_probe noisy = *clean_p;
    noisy.no_noise = false;
    int32_t t[AT];
    assert_int_equal(pr_probe_sample(&noisy, 0, j, t), label);
    for (int i = 0; i < AT; i++) {
        if (clean[i] >= 0) assert_int_equal(t[i], clean[i]);
        else if (!authors_noise_ok(clean_p, clean, t[i]))
            fail_msg("%s sample %lld: noise token %d at %d", pr_probe_names[clean_p->kind], (long long)j, t[i], i);
    }
}

static void test_authors_probes_hold_their_answers(void **state)
{
    (void)state;
    for (int k = 0; k < PR_PROBE_COUNT; k++) {
        pr_probe p;
        pr_err err;
        assert_int_equal(pr_probe_init(&p, (pr_probe_kind)k, PR_PROBE_AUTHORS, AV, AT, 5, &err), 0);
        p.no_noise = true;
        int answers[AV] = {0}, first[AV] = {0};
        for (int j = 0; j < A_SAMPLES; j++) {
            int32_t t[AT], again[AT];
            int label = pr_probe_sample(&p, 0, j, t);
            assert_int_equal(pr_probe_sample(&p, 0, j, again), label);
            assert_memory_equal(t, again, sizeof t);
            int solved = solve_authors(&p, t);
            if (solved != label)
                fail_msg("authors %s sample %d: generator says %d, the sequence says %d", pr_probe_names[k], j, label,
                         solved);
            assert_true(label >= 0 && label < AV);
            answers[label]++;
            int x = 0;
            while (t[x] < 0) x++;
            first[t[x]]++;
            if (j < 200) check_noise(&p, j, t, label);
        }
        /* binary answers about half and half; mux's selectors too */
        int yes = k == PR_PROBE_SILENCE_GATE ? A_SAMPLES - answers[0] : k == PR_PROBE_MUX ? first[5] : answers[1];
        bool binary = k == PR_PROBE_LOCAL_XOR || k == PR_PROBE_PARITY || k == PR_PROBE_PALINDROME ||
                      k == PR_PROBE_SILENCE_GATE || k == PR_PROBE_MUX;
        if (binary && (yes < A_SAMPLES * 45 / 100 || yes > A_SAMPLES * 55 / 100))
            fail_msg("authors %s: %d of %d samples positive; want about half", pr_probe_names[k], yes, A_SAMPLES);
        if (k == PR_PROBE_LOCAL_XOR || k == PR_PROBE_PARITY || k == PR_PROBE_PALINDROME)
            assert_int_equal(answers[0] + answers[1], A_SAMPLES);
    }
}

/* the authors' parity: noise repeats the bit tokens (so only the operator
 * marks the block), and the operator and the query appear once each */
static void test_authors_parity_noise_repeats_bits(void **state)
{
    (void)state;
    pr_probe p;
    pr_err err;
    assert_int_equal(pr_probe_init(&p, PR_PROBE_PARITY, PR_PROBE_AUTHORS, AV, AT, 5, &err), 0);
    int bit_noise = 0;
    for (int j = 0; j < 50; j++) {
        int32_t t[AT];
        pr_probe_sample(&p, 0, j, t);
        int x = find_once(t, AT, PR_AU_NBIT);
        assert_int_equal(find_once(t, AT, PR_AU_NBIT_QUERY), AT - 1);
        for (int i = 0; i < AT - 1; i++)
            if (i < x - p.n_bits || i > x) bit_noise += t[i] >= PR_AU_BIT0 && t[i] < PR_AU_BIT0 + 4;
    }
    /* 4 of the 28 noise tokens are bits: about 1 in 7 of the ~3000 noise positions */
    assert_true(bit_noise > 300);
}

/* the authors' palindrome: operator 3 and query 4 once each, the values
 * (noise too) from 5 up, and a positive repeats a at exactly one of c and d */
static void test_authors_palindrome_repeats_a_once(void **state)
{
    (void)state;
    pr_probe p;
    pr_err err;
    assert_int_equal(pr_probe_init(&p, PR_PROBE_PALINDROME, PR_PROBE_AUTHORS, AV, AT, 5, &err), 0);
    int low_values = 0, positives = 0;
    for (int j = 0; j < A_SAMPLES; j++) {
        int32_t t[AT];
        int label = pr_probe_sample(&p, 0, j, t);
        int x = find_once(t, AT, PR_AU_PAL);
        assert_int_equal(find_once(t, AT, PR_AU_PAL_QUERY), AT - 1);
        const int32_t *b = t + x - 4;
        int matches = (b[2] == b[0]) + (b[3] == b[0]);
        assert_int_equal(matches, label);   /* 1 for a positive, 0 for a negative: never both */
        positives += label;
        for (int i = 0; i < AT - 1; i++) {
            if (i != x) assert_true(t[i] >= PR_AU_PAL_FIRST && t[i] < AV);
            low_values += t[i] >= PR_AU_PAL_FIRST && t[i] < PR_AU_N_CONTROL;
        }
    }
    assert_true(positives > A_SAMPLES * 45 / 100 && positives < A_SAMPLES * 55 / 100);
    /* 5 of the 27 values are below 10: about 1 in 5 of the ~126000 positions */
    assert_true(low_values > 20000);
}

/* the authors' silence_gate: on 1, off 2, query 3; keys and values from [4, V-5) */
static void test_authors_silence_gate_tokens(void **state)
{
    (void)state;
    pr_probe p;
    pr_err err;
    assert_int_equal(pr_probe_init(&p, PR_PROBE_SILENCE_GATE, PR_PROBE_AUTHORS, AV, AT, 5, &err), 0);
    p.no_noise = true;
    int seen[AV] = {0};
    for (int j = 0; j < A_SAMPLES; j++) {
        int32_t t[AT];
        pr_probe_sample(&p, 0, j, t);
        int x = 0;
        while (t[x] < 0) x++;
        assert_true(t[x] == PR_AU_ON || t[x] == PR_AU_OFF);
        seen[t[x + 1]]++, seen[t[x + 2]]++;
    }
    for (int tok = 0; tok < AV; tok++)
        if ((tok >= PR_AU_GATE_FIRST && tok < AV - 5) != (seen[tok] > 0))
            fail_msg("silence_gate: key/value token %d drawn %d times", tok, seen[tok]);
}

/* paper style: the same sample without noise keeps its items and label */
static void test_paper_noise_is_only_noise(void **state)
{
    (void)state;
    for (int k = 0; k < PR_PROBE_COUNT; k++) {
        pr_probe p;
        pr_err err;
        assert_int_equal(pr_probe_init(&p, (pr_probe_kind)k, PR_PROBE_PAPER, V, T, 7, &err), 0);
        p.no_noise = true;
        for (int j = 0; j < 100; j++) {
            int32_t t[T];
            int label = pr_probe_sample(&p, 1, j, t);
            pr_probe noisy = p;
            noisy.no_noise = false;
            int32_t n[T];
            assert_int_equal(pr_probe_sample(&noisy, 1, j, n), label);
            for (int i = 0; i < T; i++) {
                if (t[i] >= 0) assert_int_equal(n[i], t[i]);
                else assert_true(is_noise(&p, n[i]));
            }
        }
    }
}

static void test_probe_errors(void **state)
{
    (void)state;
    pr_probe p;
    pr_err err;
    assert_int_equal(pr_probe_init(&p, PR_PROBE_PARITY, PR_PROBE_PAPER, 20, 64, 1, &err), -1);
    assert_non_null(strstr(err.msg, "task parity: vocab 20"));
    assert_int_equal(pr_probe_init(&p, PR_PROBE_POLY_RECALL, PR_PROBE_PAPER, 64, 12, 1, &err), -1);
    assert_non_null(strstr(err.msg, "task poly_recall: seq_len 12 is too short"));
    assert_int_equal(pr_probe_init(&p, PR_PROBE_MUX, PR_PROBE_AUTHORS, 20, 64, 1, &err), -1);
    assert_non_null(strstr(err.msg, "task mux: probe.style authors needs vocab 24 to 4096, not 20"));
    assert_int_equal(pr_probe_init(&p, PR_PROBE_MQAR, PR_PROBE_AUTHORS, 32, 9, 1, &err), -1);
    assert_non_null(strstr(err.msg, "task mqar: seq_len 9 is too short; it needs at least 10"));
    assert_int_equal(pr_probe_by_name("mux"), PR_PROBE_MUX);
    assert_int_equal(pr_probe_by_name("nope"), -1);
    assert_int_equal(pr_probe_style_by_name("authors"), PR_PROBE_AUTHORS);
    assert_int_equal(pr_probe_style_by_name("paper"), PR_PROBE_PAPER);
    assert_int_equal(pr_probe_style_by_name("author"), -1);
}

/* the generators' versions: authors-style palindrome and silence_gate changed
 * once (they take the script's own tokens), every other generator never */
static void test_data_versions(void **state)
{
    (void)state;
    assert_int_equal(pr_task_data_version("palindrome", "authors"), 2);
    assert_int_equal(pr_task_data_version("silence_gate", "authors"), 2);
    assert_int_equal(pr_task_data_version("palindrome", "paper"), 1);
    assert_int_equal(pr_task_data_version("silence_gate", "paper"), 1);
    for (int k = 0; k < PR_PROBE_COUNT; k++)
        if (k != PR_PROBE_PALINDROME && k != PR_PROBE_SILENCE_GATE)
            assert_int_equal(pr_task_data_version(pr_probe_names[k], "authors"), 1);
    assert_int_equal(pr_task_data_version("lm", "paper"), 1);
    assert_int_equal(pr_task_data_version("rec", "paper"), 1);
}

static void test_text_windows(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/prism_text_%d.txt", (int)getpid());
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 1000; i++) fputc('a' + i % 26, f);
    fclose(f);
    pr_text t;
    pr_err err;
    assert_int_equal(pr_text_load(&t, path, 16, 3, &err), 0);
    assert_int_equal(t.n, 1000);
    assert_int_equal(t.n_train, 900);
    assert_int_equal(pr_text_val_windows(&t), (100 - 1) / 16);
    for (int split = 0; split < 2; split++)
        for (int j = 0; j < 50; j++) {
            int32_t ids[16], next[16];
            pr_text_window(&t, split, j, ids, next);
            int64_t start = -1;   /* the alphabet repeats: find the window's place from its first byte */
            for (int i = 0; i < 16; i++) {
                assert_int_equal(next[i], 'a' + (ids[i] - 'a' + 1) % 26);
                if (i) assert_int_equal(ids[i], next[i - 1]);
            }
            if (split == 1) {
                start = 900 + (j % pr_text_val_windows(&t)) * 16;
                assert_int_equal(ids[0], 'a' + start % 26);
            }
        }
    pr_text_free(&t);
    assert_int_equal(pr_text_load(&t, path, 200, 3, &err), -1);
    assert_non_null(strstr(err.msg, "too short for seq_len 200"));
    /* Issue 45: --data /dev/zero read forever; files and devices stop at the limit */
    assert_int_equal(pr_text_load_max(&t, path, 16, 3, 999, &err), -1);
    assert_non_null(strstr(err.msg, "1000 bytes, over the limit of 999 for lm data"));
    assert_int_equal(pr_text_load_max(&t, path, 16, 3, 1000, &err), 0);
    pr_text_free(&t);
    assert_int_equal(pr_text_load_max(&t, "/dev/zero", 16, 3, 1 << 20, &err), -1);
    assert_non_null(strstr(err.msg, "/dev/zero: more than 1048576 bytes, the limit for lm data"));
    unlink(path);
    assert_int_equal(pr_text_load(&t, path, 16, 3, &err), -1);
    assert_non_null(strstr(err.msg, "cannot open"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probes_hold_their_answers),
        cmocka_unit_test(test_authors_probes_hold_their_answers),
        cmocka_unit_test(test_authors_parity_noise_repeats_bits),
        cmocka_unit_test(test_authors_palindrome_repeats_a_once),
        cmocka_unit_test(test_authors_silence_gate_tokens),
        cmocka_unit_test(test_paper_noise_is_only_noise),
        cmocka_unit_test(test_probe_errors),
        cmocka_unit_test(test_data_versions),
        cmocka_unit_test(test_text_windows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
