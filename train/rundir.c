/* train/rundir.c: the run directory: who may write it (a lock), what starts
 * it (config.json, manifest.json) and the summary line of a finished run.
 *
 * A folder is locked by flock(2) on a file in it that holds the holder's
 * pid. The kernel drops the lock when the last process holding the file open
 * ends, however it ends, so a lock never outlives its holders; the pid in the
 * file only serves the messages (who holds it, or whose lock was left
 * behind). A holder that ends normally removes the file; one that was
 * killed leaves it, and the next one takes it over.
 *
 * A new run never replaces an old one unless asked to: the trainer refuses
 * a folder that holds a run, and the caller chooses between resuming it,
 * replacing it (pr_run_clear) or another folder (pr_run_free_name). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "pr_build_commit.h" /* PR_BUILD_COMMIT, written at build time by cmake/build_commit.cmake */

#include "tasks/tasks.h"
#include "train/train.h"

static bool exists_in(const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

bool pr_run_exists(const char *dir)
{
    return exists_in(dir, "config.json") || exists_in(dir, "latest") || exists_in(dir, "metrics.jsonl");
}

/* the pid a lock file names, 0 when none */
static long lock_holder(int fd)
{
    char who[32] = {0};
    ssize_t n = pread(fd, who, sizeof who - 1, 0);
    return n > 0 ? atol(who) : 0;
}

static bool pid_alive(long pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno != ESRCH);
}

/* whether fd is still the file at path (a holder that ended may have removed it since we opened it) */
static bool still_there(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

int pr_dir_lock(const char *dir, const char *name, const char *holder, int *fd_out, pr_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd;
    long pid;
    bool locked;
    for (int tries = 0;; tries++) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return pr_errf(err, "%s: cannot open: %s", path, strerror(errno));
        pid = lock_holder(fd);
        locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
        if (!locked || still_there(fd, path) || tries == 100) break;
        close(fd);   /* locked a file its holder had just removed: open the new one */
    }
    if (!locked) {
        close(fd);
        if (!pid)
            return pr_errf(err, "%s is in use by another %s; wait for it to end or give another --out", dir, holder);
        if (!pid_alive(pid))   /* the pid that wrote it is gone, but a child it started still holds the file */
            return pr_errf(err, "%s is in use by another %s (pid %ld, no longer running: processes it started "
                                "still hold the lock); wait for them to end or give another --out", dir, holder, pid);
        return pr_errf(err, "%s is in use by another %s (pid %ld); wait for it to end or give another --out", dir,
                       holder, pid);
    }
    if (pid && pid != (long)getpid() && !pid_alive(pid))
        fprintf(stderr, "prism: %s: taking over the lock of pid %ld, which is no longer running\n", dir, pid);
    char text[32];
    int len = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    bool noted = ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)len, 0) == len;
    (void)noted;   /* the pid only serves the messages */
    *fd_out = fd;
    return 0;
}

void pr_dir_unlock(int fd, const char *dir, const char *name)
{
    if (fd < 0) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);   /* removed while still held: a lock file with a pid in it was left by a holder that died */
    close(fd);      /* closing drops the flock */
}

static bool is_checkpoint_file(const char *name)
{
    size_t n = strlen(name);
    return strncmp(name, "ckpt-", 5) == 0 && n > 12 && strcmp(name + n - 12, ".safetensors") == 0;
}

int pr_run_clear(const char *dir, pr_err *err)
{
    /* `latest` first: a crash part way leaves nothing that --resume would take for this run */
    const char *files[] = {"latest", "metrics.jsonl", "result.json", "config.json", "manifest.json"};
    char path[4200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (unlink(path) != 0 && errno != ENOENT) return pr_errf(err, "%s: cannot remove: %s", path, strerror(errno));
    }
    DIR *d = opendir(dir);
    if (!d) return pr_errf(err, "%s: cannot list: %s", dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!is_checkpoint_file(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT) rc = pr_errf(err, "%s: cannot remove: %s", path, strerror(errno));
    }
    closedir(d);
    return rc;
}

int pr_run_free_name(char *out, size_t n, const char *base)
{
    snprintf(out, n, "%s", base);
    for (int k = 2; pr_run_exists(out) && k < 100000; k++) snprintf(out, n, "%s-%d", base, k);
    return pr_run_exists(out) ? -1 : 0;
}

int pr_make_dirs(const char *dir, pr_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return pr_errf(err, "%s: the folder's path is too long", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return pr_errf(err, "%s: cannot create its parent %s: %s", dir, path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0755) == 0 || errno == EEXIST) return 0;
    return pr_errf(err, "%s: cannot create the folder: %s", dir, strerror(errno));
}

#define RUN_LOCK ".train.lock"

/* the folder, locked for this run; a fresh run refuses one that holds a run
 * unless told to replace it */
int pr_run_claim(const char *dir, bool resume, bool overwrite, int *lock, pr_err *err)
{
    if (pr_make_dirs(dir, err) || pr_dir_lock(dir, RUN_LOCK, "prism train", lock, err)) return -1;
    int rc = 0;
    if (!resume && pr_run_exists(dir)) {
        rc = overwrite ? pr_run_clear(dir, err)
                       : pr_errf(err, "%s holds a run: give --resume to continue it, --overwrite to replace it, or "
                                      "another --out", dir);
    }
    if (rc) pr_dir_unlock(*lock, dir, RUN_LOCK), *lock = -1;
    return rc;
}

void pr_run_unlock(int lock, const char *dir)
{
    pr_dir_unlock(lock, dir, RUN_LOCK);
}

/* DIR/name = text and a newline, atomically; frees text (a cJSON print) */
static int write_json_text(const char *dir, const char *name, char *text, pr_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    PR_CHECK(withnl, "%s: out of host memory", name);
    memcpy(withnl + n, "\n", 2);
    int rc = pr_write_file_atomic(path, withnl, err);
    free(withnl);
    return rc;
}

static int write_manifest(const char *dir, const pr_config *c, const pr_train_opts *o, pr_device dev, pr_err *err)
{
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "git_commit", PR_BUILD_COMMIT); /* the binary's sources, not the cwd's checkout */
    cJSON_AddStringToObject(j, "device", pr_device_name(dev));
    cJSON_AddStringToObject(j, "precision", o->precision);
    cJSON *flags = cJSON_AddArrayToObject(j, "build_flags");
#ifdef PRISM_HAVE_CUDA
    cJSON_AddItemToArray(flags, cJSON_CreateString("PRISM_HAVE_CUDA"));
#endif
#ifdef PRISM_HAVE_BLAS
    cJSON_AddItemToArray(flags, cJSON_CreateString("PRISM_HAVE_BLAS"));
#endif
#ifdef PRISM_HAVE_OPENMP
    cJSON_AddItemToArray(flags, cJSON_CreateString("PRISM_HAVE_OPENMP"));
#endif
#ifdef __OPTIMIZE__
    cJSON_AddItemToArray(flags, cJSON_CreateString("optimized"));
#endif
    cJSON_AddStringToObject(j, "compiler", __VERSION__);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddNumberToObject(j, "model_seed", c->seed);
    /* the generator's version at the start: a resume keeps this file, so a
     * run continued on newer data still names the data it began on */
    cJSON_AddNumberToObject(j, "data_version", pr_task_data_version(o->task, o->probe_style));
    if (o->comm) {   /* data parallel: how many ranks, over what */
        cJSON_AddNumberToObject(j, "ranks", o->comm->world);
        cJSON_AddStringToObject(j, "comm", o->comm->backend);
        cJSON_AddNumberToObject(j, "zero", (double)o->zero);
    }
    cJSON_AddStringToObject(j, "start_time", when);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    return write_json_text(dir, "manifest.json", text, err);
}

int pr_run_write_start(const char *dir, const pr_config *c, const pr_train_opts *o, pr_device dev, bool fresh,
                       pr_err *err)
{
    if (write_json_text(dir, "config.json", pr_run_config_json(c, o), err)) return -1;
    return fresh ? write_manifest(dir, c, o, dev, err) : 0;
}

void pr_print_summary(FILE *f, const pr_config *c, const pr_train_opts *o, const pr_train_result *r,
                      const char *run_dir)
{
    cJSON *j = cJSON_CreateObject();
    /* SASRec is attention mixers in SASRec's blocks: the model is named by its blocks */
    cJSON_AddStringToObject(j, "model", pr_config_model_name(c));
    cJSON_AddStringToObject(j, "task", o->task);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddNumberToObject(j, "steps", (double)r->steps);
    cJSON *m = cJSON_AddObjectToObject(j, "metrics");
    for (int i = 0; i < r->metrics.n; i++) cJSON_AddNumberToObject(m, r->metrics.name[i], r->metrics.value[i]);
    cJSON_AddNumberToObject(j, "tokens_per_s", round(r->tokens_per_s));
    cJSON_AddNumberToObject(j, "params", (double)r->params);
    cJSON_AddStringToObject(j, "run_dir", run_dir);
    if (r->nonfinite[0]) cJSON_AddStringToObject(j, "nonfinite", r->nonfinite);
    char *s = cJSON_PrintUnformatted(j);
    fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(j);
}
