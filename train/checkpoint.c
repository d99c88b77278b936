/* train/checkpoint.c: checkpoints that survive a crash at any instant.
 *
 * Order of a save: the weights file, then the state file (each one written to
 * a temporary name, fsynced and renamed by pr_safetensors_write), then
 * `latest` (the same dance for a text file), then the previous checkpoint's
 * files are removed. Until `latest` moves, it names the previous pair, which
 * nothing touched. A test's hooks->mid_checkpoint runs between the weights
 * and the state file: test_train ends the process there, leaving half a
 * state file, as a power cut would. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"

static void ckpt_path(char *buf, size_t n, const char *dir, int64_t step, const char *what)
{
    snprintf(buf, n, "%s/ckpt-%08lld.%s.safetensors", dir, (long long)step, what);
}

int pr_write_file_atomic(const char *path, const char *text, pr_err *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return pr_errf(err, "%s: cannot create %s: %s", path, tmp, strerror(errno));
    size_t n = strlen(text);
    bool ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        e = ok ? errno : e;
        unlink(tmp);
        return pr_errf(err, "%s: cannot write it: %s", path, strerror(e));
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {  /* the rename itself reaches the disk */
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

int pr_checkpoint_save(const char *dir, const pr_params *p, const pr_optim *o, const pr_train_state *s,
                       const pr_train_hooks *hooks, pr_err *err)
{
    int64_t prev = -1;
    pr_err ignore;
    if (pr_checkpoint_latest(dir, &prev, &ignore)) prev = -1;
    char weights[4200], state[4200], latest[4200], text[64];
    ckpt_path(weights, sizeof weights, dir, s->step, "weights");
    ckpt_path(state, sizeof state, dir, s->step, "state");
    if (pr_params_save(p, weights, err)) return -1;
    if (hooks && hooks->mid_checkpoint) hooks->mid_checkpoint(hooks->user, state, s->step);
    char v[5][40];
    snprintf(v[0], sizeof v[0], "%lld", (long long)s->step);
    snprintf(v[1], sizeof v[1], "%lld", (long long)s->data_pos);
    snprintf(v[2], sizeof v[2], "%lld", (long long)s->metrics_bytes);
    snprintf(v[3], sizeof v[3], "%llu %u", (unsigned long long)s->rng.seed, (unsigned)s->rng.stream);
    snprintf(v[4], sizeof v[4], "%llu", (unsigned long long)s->rng.offset);
    const char *keys[] = {"train.step", "train.data_pos", "train.metrics_bytes", "train.rng", "train.rng_offset"};
    const char *vals[] = {v[0], v[1], v[2], v[3], v[4]};
    if (pr_optim_save(o, state, 5, keys, vals, err)) return -1;
    snprintf(latest, sizeof latest, "%s/latest", dir);
    snprintf(text, sizeof text, "%lld\n", (long long)s->step);
    if (pr_write_file_atomic(latest, text, err)) return -1;
    if (prev >= 0 && prev != s->step) {  /* the old pair is no longer named: drop it */
        ckpt_path(weights, sizeof weights, dir, prev, "weights");
        ckpt_path(state, sizeof state, dir, prev, "state");
        unlink(weights);
        unlink(state);
    }
    return 0;
}

int pr_checkpoint_latest(const char *dir, int64_t *step, pr_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f) return pr_errf(err, "%s: no checkpoint (%s)", dir, strerror(errno));
    long long s = -1;
    int got = fscanf(f, "%lld", &s);
    fclose(f);
    if (got != 1 || s < 0) return pr_errf(err, "%s: not a step number", path);
    *step = s;
    return 0;
}

/* a count in the state's metadata: a whole decimal number >= 0 */
static int meta_i64(const pr_safetensors *st, const char *file, const char *key, int64_t *out, pr_err *err)
{
    const char *v = pr_safetensors_meta(st, key);
    if (!v) return pr_errf(err, "%s: metadata %s missing", file, key);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno || x < 0)
        return pr_errf(err, "%s: metadata %s: '%.40s' is not a count (the file is damaged)", file, key, v);
    *out = x;
    return 0;
}

int pr_checkpoint_load(const char *dir, int64_t step, pr_params *p, pr_optim *o, pr_train_state *s, pr_err *err)
{
    char weights[4200], state[4200];
    ckpt_path(weights, sizeof weights, dir, step, "weights");
    ckpt_path(state, sizeof state, dir, step, "state");
    if (pr_params_load(p, weights, err)) return -1;
    if (!o) return 0;
    pr_arena *a = pr_arena_new("checkpoint", 0);
    pr_safetensors st;
    int rc = pr_safetensors_read(state, a, &st, err);
    if (!rc) rc = pr_optim_restore(o, &st, state, err);
    int64_t offset = 0;
    if (!rc) rc = meta_i64(&st, state, "train.step", &s->step, err) ||
                  meta_i64(&st, state, "train.data_pos", &s->data_pos, err) ||
                  meta_i64(&st, state, "train.metrics_bytes", &s->metrics_bytes, err) ||
                  meta_i64(&st, state, "train.rng_offset", &offset, err);
    const char *rng = rc ? NULL : pr_safetensors_meta(&st, "train.rng");
    unsigned long long sd = 0;
    unsigned sm = 0;
    if (!rc && (!rng || sscanf(rng, "%llu %u", &sd, &sm) != 2))
        rc = pr_errf(err, "%s: metadata train.rng missing or malformed", state);
    if (!rc) s->rng = (pr_rng){.seed = sd, .stream = sm, .offset = (uint64_t)offset};
    if (!rc && (s->step != step || s->data_pos != step))   /* the trainer's data position is its step */
        rc = pr_errf(err, "%s: metadata train.step %lld and train.data_pos %lld, but `latest` names step %lld (the "
                          "file is damaged)", state, (long long)s->step, (long long)s->data_pos, (long long)step);
    pr_arena_free(a);
    return rc ? -1 : 0;
}
