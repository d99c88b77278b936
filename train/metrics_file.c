/* train/metrics_file.c: metrics.jsonl, one JSON object a line: a logged
 * step, an evaluation, or the step the NaN trap stopped at.
 *
 * Every line is flushed as it is written and every write checked: a full
 * disk or an I/O error stops the run with the reason, keeping the last
 * checkpoint. Non-finite numbers are written as null, so every line stays
 * valid JSON. A resumed run first cuts the file back to what its checkpoint
 * had written, so the steps it runs again are not logged twice. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/train.h"

/* the file cut to the bytes the checkpoint of `step` had written and back to
 * the end of its last whole line. A file shorter than that lost lines (a
 * crash before they reached the disk): said, and never padded. */
static int trim(const char *path, int64_t want, int64_t step, pr_err *err)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return pr_errf(err, "%s: cannot open: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) return close(fd), pr_errf(err, "%s: not a regular file", path);
    off_t end = (off_t)want;
    if (st.st_size < end) {
        fprintf(stderr, "prism train: %s has %lld bytes, but the checkpoint of step %lld had written %lld: the "
                        "lines after byte %lld are lost; resuming after its last whole line\n",
                path, (long long)st.st_size, (long long)step, (long long)want, (long long)st.st_size);
        end = st.st_size;
    }
    off_t cut = end;
    char buf[4096];
    while (cut > 0) {   /* back to just after the last newline before `end` */
        size_t n = cut < (off_t)sizeof buf ? (size_t)cut : sizeof buf;
        if (pread(fd, buf, n, cut - (off_t)n) != (ssize_t)n) {
            int e = errno;
            close(fd);
            return pr_errf(err, "%s: cannot read: %s", path, strerror(e));
        }
        size_t i = n;
        while (i > 0 && buf[i - 1] != '\n') i--;
        cut -= (off_t)(n - i);
        if (i > 0) break;
    }
    if (cut < end)
        fprintf(stderr, "prism train: %s: dropped a partial line (bytes %lld to %lld)\n", path, (long long)cut,
                (long long)end);
    int rc = ftruncate(fd, cut) == 0 ? 0 : pr_errf(err, "%s: cannot truncate: %s", path, strerror(errno));
    close(fd);
    return rc;
}

int pr_metrics_open(FILE **f, const char *dir, bool writer, const pr_train_state *resumed,
                    const pr_train_hooks *hooks, pr_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (!writer) snprintf(path, sizeof path, "/dev/null");   /* rank 0 alone writes the run directory */
    /* a test's file in its place: /dev/full shows what a full disk does */
    if (writer && !resumed && hooks && hooks->metrics_path) snprintf(path, sizeof path, "%s", hooks->metrics_path);
    if (!resumed) {
        *f = fopen(path, "w");
        if (!*f) return pr_errf(err, "%s: cannot create: %s", path, strerror(errno));
        return 0;
    }
    if (writer && trim(path, resumed->metrics_bytes, resumed->step, err)) return -1;
    *f = fopen(path, "a");
    if (!*f) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
    return 0;
}

static int write_failed(const char *dir, int64_t step, int64_t last_ckpt, int e, pr_err *err)
{
    char kept[1200];
    if (last_ckpt >= 0) snprintf(kept, sizeof kept, "the last checkpoint, step %lld, is kept", (long long)last_ckpt);
    else snprintf(kept, sizeof kept, "no checkpoint was written before it");
    return pr_errf(err, "%s/metrics.jsonl: cannot write: %s; the run stops at step %lld (%s)", dir,
                   e ? strerror(e) : "write error", (long long)step, kept);
}

int pr_metrics_flush(FILE *f, const char *dir, int64_t step, int64_t last_ckpt, bool sync, pr_err *err)
{
    bool bad = ferror(f);
    errno = 0;
    if (fflush(f) != 0 || bad) return write_failed(dir, step, last_ckpt, errno, err);
    if (!sync || fsync(fileno(f)) == 0 || errno == EINVAL || errno == EROFS) return 0;  /* a device: nothing to sync */
    return write_failed(dir, step, last_ckpt, errno, err);
}

static const char *json_num(char buf[40], double v)
{
    if (!isfinite(v)) return "null";
    snprintf(buf, 40, "%.9g", v);
    return buf;
}

void pr_metrics_write_step(FILE *f, const pr_step_log *s)
{
    char n1[40], n2[40], n3[40];
    fprintf(f, "{\"step\":%lld,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,\"tokens\":%lld,\"tokens_per_s\":%.1f,"
               "\"time_s\":%.3f}\n",
            (long long)s->step, json_num(n1, s->loss), json_num(n2, s->lr), json_num(n3, s->grad_norm),
            (long long)s->tokens, s->tokens_per_s, s->time_s);
}

void pr_metrics_write_eval(FILE *f, int64_t step, const pr_metrics *m, double seconds)
{
    char num[40];
    fprintf(f, "{\"step\":%lld,\"eval\":{", (long long)step);
    for (int i = 0; i < m->n; i++) fprintf(f, "%s\"%s\":%s", i ? "," : "", m->name[i], json_num(num, m->value[i]));
    fprintf(f, "},\"eval_s\":%.3f}\n", seconds);
}
