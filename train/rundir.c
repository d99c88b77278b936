/* train/rundir.c: who may write a run directory.
 *
 * A folder is locked by flock(2) on a file in it that holds the holder's
 * pid. The kernel drops the lock when the last process holding the file open
 * ends, however it ends, so a lock never outlives its holders; the pid in the
 * file only serves the messages (who holds it, or whose lock was left
 * behind). A holder that ends normally removes the file; one that was
 * killed leaves it, and the next one takes it over. A new run never replaces an old one unless asked to: the trainer
 * refuses a folder that holds a run, and the caller chooses between resuming
 * it, replacing it (pr_run_clear) or another folder (pr_run_free_name). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

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
