/* tasks/tasks.h: data for training, generated from a seed or read from files.
 *
 * probe: the nine mechanistic probes of the PRISM paper (Table 4). Each
 * sample is a token sequence with ONE supervised position, the last; the
 * label there is the answer and every other label is the ignore index.
 * Sample j of split s (0 train, 1 eval) is a pure function of (seed, s, j):
 * its random draws are Philox stream `s` at counters j * 2^24 + k, so the
 * two splits are independent streams and any batch can be made again
 * without the ones before it (a fixed data order that resumes exactly).
 *
 * Two styles (train.probe.style; docs/TUTORIAL.md compares them):
 *
 * paper (the default): the paper's Algorithm 2. The vocabulary V is split
 * into control tokens [0, 12), data tokens [12, 12 + n_data) and noise
 * tokens [12 + n_data, V), n_noise = (V - 12) / 3; noise fills every
 * position a task does not use.
 *
 * authors: the semantics of the authors' released probe script, which
 * produced the paper's Table 4 (vocab 32 there). Control tokens are [0, 10),
 * data tokens [10, V), except where a task below names the script's own
 * tokens (parity, mod_add, palindrome, silence_gate); noise is drawn over the
 * data tokens, so it can equal an operand, and the logic blocks end with an
 * operator token. Binary
 * answers are the classes 0 and 1. Each task, in order of its items:
 *   mqar          2 pairs (k, v) at even positions of the first half, keys
 *                 distinct, k and v in [10, V); then [1, k]          -> v
 *                 (noise avoids the two keys)
 *   poly_recall   [2, k1, v1, k2, v2] anywhere (one context marker);
 *                 then [1, k]                                        -> v
 *   var_tracking  3 updates (k, v), each k one of 3 variables, in order
 *                 at random places; then [1, k], k the variable of a drawn
 *                 update                                    -> k's latest v
 *   local_xor     [a, b, 3]; 1 at the end       -> 1 if a%2 != b%2, else 0
 *   parity        [b1, b2, b3, 3], b in 4..7; 2 at the end -> sum of b % 2
 *                 (noise over [4, V): it can repeat a bit, never the operator)
 *   mod_add       [a, b, V-2], a, b in 0..15; V-1 at the end -> (a+b) % 16
 *                 (noise over [0, V-2))
 *   palindrome    [a, b, c, d, 3], every value in [5, V); 4 at the end
 *                 -> 1 if a == c or a == d (a positive has exactly one of
 *                 them equal to a, a negative neither; noise over [5, V))
 *   silence_gate  [1 (on) or 2 (off), k, v], k, v in [4, V-5); then [3, k]
 *                 -> v on, 0 off (noise over the whole vocabulary [0, V))
 *   mux           [4 or 5, c0, c1, 6], c0 in [10, V/2), c1 in [V/2, V);
 *                 1 at the end                        -> c0 after 4, c1 after 5
 * Binary answers come out half and half: palindrome and silence_gate by a
 * coin, local_xor and parity because their operands' parities are fair.
 *
 * lm: byte-level language modelling over a text file: the last tenth of the
 * bytes is the validation split; training windows start at Philox-drawn
 * offsets, validation windows tile the validation bytes in order.
 */
#ifndef PR_TASKS_H
#define PR_TASKS_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PR_PROBE_MQAR, PR_PROBE_POLY_RECALL, PR_PROBE_VAR_TRACKING, PR_PROBE_LOCAL_XOR, PR_PROBE_PARITY,
    PR_PROBE_MOD_ADD, PR_PROBE_PALINDROME, PR_PROBE_SILENCE_GATE, PR_PROBE_MUX, PR_PROBE_COUNT
} pr_probe_kind;
extern const char *const pr_probe_names[];   /* by kind, NULL-terminated */
int pr_probe_by_name(const char *name);       /* -1 if unknown */

/* control tokens */
enum {
    PR_TOK_QUERY, PR_TOK_TRUE, PR_TOK_FALSE, PR_TOK_ON, PR_TOK_OFF, PR_TOK_NULL, PR_TOK_CTX1, PR_TOK_CTX2,
    PR_TOK_SEL0, PR_TOK_SEL1, PR_TOK_XOR, PR_TOK_ASSIGN, PR_PROBE_N_CONTROL
};

typedef enum { PR_PROBE_PAPER, PR_PROBE_AUTHORS } pr_probe_style;
extern const char *const pr_probe_style_names[];   /* "paper", "authors", NULL */
int pr_probe_style_by_name(const char *name);       /* -1 if unknown */

/* The version of the data task `task` (a probe's name, "lm" or "rec")
 * generates in probe style `style` (ignored but for probes): 1 where the
 * generator is as it was when versions began to be recorded, one more for
 * every change to the samples a seed gives. The trainer records it in a
 * run's manifest.json, so `prism ablate` can tell a run made from older data
 * (a generator can change while no config key does). Change a generator,
 * bump its number in tasks/probe.c. */
int pr_task_data_version(const char *task, const char *style);

/* the authors' style's control tokens (the table above) */
enum {
    PR_AU_FALSE = 0, PR_AU_TRUE = 1, PR_AU_QUERY = 1, PR_AU_CTX = 2, PR_AU_XOR = 3, PR_AU_BIT0 = 4,
    PR_AU_NBIT = 3, PR_AU_NBIT_QUERY = 2, PR_AU_PAL = 3, PR_AU_PAL_QUERY = 4, PR_AU_PAL_FIRST = 5,
    PR_AU_ON = 1, PR_AU_OFF = 2, PR_AU_GATE_QUERY = 3, PR_AU_GATE_FIRST = 4, PR_AU_NULL = 0,
    PR_AU_SEL0 = 4, PR_AU_SEL1 = 5, PR_AU_MUX = 6, PR_AU_N_CONTROL = 10
};

typedef struct {
    pr_probe_kind kind;
    pr_probe_style style;
    int vocab, seq_len;
    int n_data, n_noise;   /* from vocab */
    int n_pairs;           /* mqar, poly_recall: key/value pairs (paper 4, authors 2); var_tracking: variables */
    int n_updates;         /* var_tracking, authors: updates (3) */
    int n_bits;            /* parity: 3 */
    int modulus;           /* mod_add: 16 */
    uint64_t seed;
    /* tests: leave every position no item uses at -1 instead of noise (the
     * items are drawn exactly as with noise), so a reader of the sequence
     * alone can solve the tasks whose noise may repeat an operand */
    bool no_noise;
} pr_probe;

/* a probe of a style over vocab tokens and sequences of seq_len; -1 with err
 * naming the task and the size that does not fit */
int pr_probe_init(pr_probe *p, pr_probe_kind kind, pr_probe_style style, int vocab, int seq_len, uint64_t seed,
                  pr_err *err);
/* sample `index` of `split` into tokens[seq_len]; returns the label of the
 * last position (the only supervised one) */
int pr_probe_sample(const pr_probe *p, int split, int64_t index, int32_t *tokens);
/* paper style: token of data value i (0 <= i < n_data) */
static inline int pr_probe_data(int i) { return PR_PROBE_N_CONTROL + i; }
/* paper style: the noise tokens are [first, vocab) */
static inline int pr_probe_first_noise(const pr_probe *p) { return PR_PROBE_N_CONTROL + p->n_data; }

/* ---- lm ---------------------------------------------------------------------- */
typedef struct {
    uint8_t *bytes;
    int64_t n, n_train;     /* [0, n_train) trains, [n_train, n) validates */
    int seq_len;
    uint64_t seed;
} pr_text;

/* read a file (at least 2 * (seq_len + 1) bytes, at most max_bytes:
 * PR_TEXT_MAX_BYTES for pr_text_load, so a device such as /dev/zero stops);
 * -1 with err naming it */
#define PR_TEXT_MAX_BYTES ((int64_t)1 << 30)
int pr_text_load(pr_text *t, const char *path, int seq_len, uint64_t seed, pr_err *err);
int pr_text_load_max(pr_text *t, const char *path, int seq_len, uint64_t seed, int64_t max_bytes, pr_err *err);
void pr_text_free(pr_text *t);
/* window `index` of a split: ids[seq_len] and their next bytes targets[seq_len];
 * split 0 draws the start, split 1 takes window index mod the number of
 * validation windows */
void pr_text_window(const pr_text *t, int split, int64_t index, int32_t *ids, int32_t *targets);
int64_t pr_text_val_windows(const pr_text *t);

#ifdef __cplusplus
}
#endif
#endif
