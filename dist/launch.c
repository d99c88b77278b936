/* dist/launch.c: where a process stands among the ranks (from the
 * launcher's variables, which the command reads from its environment),
 * the launcher that runs one process per rank on this host, the data shard
 * of a rank and ZeRO-1's ownership of parameters.
 *
 * The launcher forks and execs /proc/self/exe with the same arguments, so a
 * rank is an ordinary `prism` process that finds PRISM_RANK in its
 * environment. It then waits: the first child to die by a signal or with a
 * non-zero status is reported by rank, and the others are killed (SIGTERM,
 * then SIGKILL after a grace period), so a dead rank never leaves the rest
 * blocked in a collective.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist.h"

/* ---- where this process stands -------------------------------------------------------- */
const char *const pr_dist_var_names[PR_DIST_LAUNCHERS][3] = {
    {"PRISM_RANK", "PRISM_WORLD_SIZE", "PRISM_LOCAL_RANK"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

/* 1 with *out when variable `name` holds the number s >= lo, 0 when unset, -1 with err */
static int var_int(const char *name, const char *s, int lo, int *out, pr_err *err)
{
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > 1 << 20)
        return pr_errf(err, "environment: %s=%s is not a number >= %d", name, s, lo);
    *out = (int)v;
    return 1;
}

int pr_dist_env_parse(pr_dist_env *e, const pr_dist_vars *v, const char *dist_file, pr_err *err)
{
    *e = (pr_dist_env){.rank = 0, .world = 1, .local_rank = 0, .nccl = v->nccl};
    for (int i = 0; i < PR_DIST_LAUNCHERS; i++) {
        const char *const *name = pr_dist_var_names[i], *const *value = v->value[i];
        int rank = 0, world = 1, local = -1;
        int has_rank = var_int(name[0], value[0], 0, &rank, err), has_world = var_int(name[1], value[1], 1, &world, err);
        if (has_rank < 0 || has_world < 0 || var_int(name[2], value[2], 0, &local, err) < 0) return -1;
        if (!has_rank || !has_world) continue;
        if (rank >= world) return pr_errf(err, "environment: %s=%d is not below %s=%d", name[0], rank, name[1], world);
        e->rank = rank, e->world = world, e->local_rank = local >= 0 ? local : rank;
        break;
    }
    const char *file = dist_file && *dist_file ? dist_file : v->dist_file;
    if (file) snprintf(e->file, sizeof e->file, "%s", file);
    if (e->world > 1 && !e->file[0])
        return pr_errf(err, "rank %d of %d: no rendezvous file: give --dist-file PATH (on a filesystem every "
                            "rank sees)", e->rank, e->world);
    return 0;
}

/* ---- the launcher ------------------------------------------------------------------ */
static pid_t spawn_rank(int rank, int world, const char *dist_file, char **argv)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM);   /* a launcher killed outright takes its ranks along */
#endif
    char r[16], w[16];
    snprintf(r, sizeof r, "%d", rank);
    snprintf(w, sizeof w, "%d", world);
    setenv("PRISM_RANK", r, 1);
    setenv("PRISM_LOCAL_RANK", r, 1);
    setenv("PRISM_WORLD_SIZE", w, 1);
    setenv("PRISM_DIST_FILE", dist_file, 1);
    setenv("NCCL_NVLS_ENABLE", "0", 1);   /* NVLink multicast stays off on shared hosts */
    execv("/proc/self/exe", argv);
    fprintf(stderr, "rank %d: cannot exec /proc/self/exe: %s\n", rank, strerror(errno));
    _exit(127);
}

static void describe_exit(char *buf, size_t n, int status)
{
    if (WIFSIGNALED(status))
        snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
}

static int rank_of(const pid_t *pids, int world, pid_t pid)
{
    for (int r = 0; r < world; r++)
        if (pids[r] == pid) return r;
    return -1;
}

/* SIGTERM to every live child, SIGKILL to those still there after 5 s; reaps them all */
static void stop_all(pid_t *pids, int world)
{
    for (int r = 0; r < world; r++)
        if (pids[r] > 0) kill(pids[r], SIGTERM);
    for (int tick = 0; tick < 500; tick++) {
        int live = 0;
        for (int r = 0; r < world; r++) {
            if (pids[r] <= 0) continue;
            int st;
            if (waitpid(pids[r], &st, WNOHANG) == pids[r]) pids[r] = 0;
            else live++;
        }
        if (!live) return;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    for (int r = 0; r < world; r++)
        if (pids[r] > 0) kill(pids[r], SIGKILL), waitpid(pids[r], NULL, 0);
}

int pr_dist_launch(const char *cmd, int world, const char *dist_file, char **argv)
{
    pid_t pids[1024];
    if (world > 1024) return fprintf(stderr, "%s: at most 1024 ranks on one host\n", cmd), 2;
    unlink(dist_file);   /* a file left by an earlier run is never read as this run's */
    fflush(NULL);
    for (int r = 0; r < world; r++) pids[r] = spawn_rank(r, world, dist_file, argv);
    for (int left = world; left > 0; left--) {
        int status;
        pid_t pid = wait(&status);
        if (pid < 0) break;
        int r = rank_of(pids, world, pid);
        if (r < 0) continue;
        pids[r] = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        char how[96];
        describe_exit(how, sizeof how, status);
        fprintf(stderr, "%s: rank %d %s; stopping the other ranks\n", cmd, r, how);
        stop_all(pids, world);
        unlink(dist_file);
        return WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1;
    }
    unlink(dist_file);
    return 0;
}

int pr_dist_launch_self(const char *cmd, int world, bool gpus, const pr_nccl_search *nccl, const char *dist_file,
                        const char *sub, int argc, char **argv, bool *few_gpus, pr_err *err)
{
    *few_gpus = false;
    if (gpus) {
        void *lib;
        char found[1024];
        if (pr_nccl_load(nccl, &lib, found, sizeof found, err)) return -1;
        if (pr_dist_visible_gpus() < world) {
            *few_gpus = true;
            return pr_errf(err, "--gpus %d, but %d CUDA devices are visible", world, pr_dist_visible_gpus());
        }
    }
    char file[1024];
    if (dist_file) snprintf(file, sizeof file, "%s", dist_file);
    else pr_dist_default_file(file, sizeof file);
    char **args = calloc((size_t)argc + 3, sizeof *args);   /* prism, sub, the arguments, NULL */
    PR_CHECK(args, "%s: out of host memory", cmd);
    int n = 0;
    args[n++] = "prism";
    if (sub) args[n++] = (char *)sub;
    for (int i = 0; i < argc; i++) args[n++] = argv[i];
    int rc = pr_dist_launch(cmd, world, file, args);
    free(args);
    return rc;
}

void pr_dist_default_file(char *buf, size_t n)
{
    struct stat st;
    const char *dir = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(buf, n, "%s/prism-%ld.dist", dir, (long)getpid());
}

int pr_dist_visible_gpus(void)
{
#ifdef PRISM_HAVE_CUDA
    return pr_cuda_available() ? pr_cuda_device_count() : 0;
#else
    return 0;
#endif
}

/* ---- data and ownership ------------------------------------------------------------ */
int pr_dist_shard(int batch, int rank, int world, int *first, int *count, pr_err *err)
{
    if (world < 1 || rank < 0 || rank >= world) return pr_errf(err, "rank %d of %d: not a rank", rank, world);
    if (batch % world != 0)
        return pr_errf(err, "train.batch=%d does not split evenly over %d ranks (make it a multiple of %d)", batch,
                       world, world);
    *count = batch / world;
    *first = rank * *count;
    return 0;
}
