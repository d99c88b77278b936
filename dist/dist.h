/* dist/dist.h: data-parallel training: communicators, the process launcher,
 * gradient buckets and ZeRO-1.
 *
 * A communicator (pr_comm) joins `world` processes; every rank calls the same
 * collectives in the same order. Two backends:
 *   - nccl (dist/nccl.c): CUDA tensors, NCCL loaded with dlopen at run time,
 *     so building prism needs neither NCCL's headers nor its library;
 *   - shm (dist/shm.c): CPU tensors, one shared-memory file that every rank
 *     maps; sums run in rank order, so every rank gets the same bits.
 * Ranks come from the launcher (`prism train --gpus N` / `--procs N` fork
 * and exec themselves with PRISM_RANK, PRISM_WORLD_SIZE, PRISM_DIST_FILE) or
 * from mpirun / srun's environment; the NCCL id travels through a file
 * (MPI is not linked).
 */
#ifndef PR_DIST_H
#define PR_DIST_H

#include "autograd/autograd.h"
#include "models/models.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- where this process stands (dist/launch.c) -----------------------------------
 * The library reads no environment: the command (tools/dist_env.c) reads
 * the variables below and hands their values in. */

/* where to look for NCCL's library (pr_nccl_load): the values of
 * PRISM_NCCL_LIB, HOME, VIRTUAL_ENV and CONDA_PREFIX; NULL or "": unset */
typedef struct { const char *lib, *home, *venv, *conda; } pr_nccl_search;

/* the launchers whose variables say a rank: prism's own, Open MPI, PMI
 * (MPICH, Intel MPI) and Slurm, tried in this order; per launcher the names
 * of its rank, world size and local rank */
#define PR_DIST_LAUNCHERS 4
extern const char *const pr_dist_var_names[PR_DIST_LAUNCHERS][3];

typedef struct {
    const char *value[PR_DIST_LAUNCHERS][3];   /* pr_dist_var_names' values; NULL: unset */
    const char *dist_file;                     /* PRISM_DIST_FILE's */
    pr_nccl_search nccl;
} pr_dist_vars;

typedef struct {
    int rank, world;      /* 0 and 1 when not distributed */
    int local_rank;       /* the GPU this rank uses on its host */
    char file[1024];      /* the rendezvous file (shm segment or NCCL id) */
    pr_nccl_search nccl;  /* where the nccl backend looks for NCCL */
} pr_dist_env;
/* rank and world from the first launcher whose rank and world size are both
 * set, the file from `dist_file` (a command's --dist-file) or else
 * v->dist_file; -1 with err naming the variable whose value is bad */
int pr_dist_env_parse(pr_dist_env *e, const pr_dist_vars *v, const char *dist_file, pr_err *err);

/* Run argv as `world` child processes (this executable, the same arguments,
 * PRISM_RANK etc. in their environment) and wait. A child that dies by a
 * signal or exits non-zero makes the launcher kill the others and return
 * non-zero after printing "<cmd>: rank K exited with ..." (or "was killed by
 * signal ..."). Returns the exit status for the launcher itself. */
int pr_dist_launch(const char *cmd, int world, const char *dist_file, char **argv);
/* `prism [sub] argv...` (this command again) as `world` ranks through
 * pr_dist_launch. With gpus, NCCL must load (from where nccl says) and
 * `world` CUDA devices be visible first: -1 with err otherwise (*few_gpus
 * says it was the devices). dist_file NULL: pr_dist_default_file. */
int pr_dist_launch_self(const char *cmd, int world, bool gpus, const pr_nccl_search *nccl, const char *dist_file,
                        const char *sub, int argc, char **argv, bool *few_gpus, pr_err *err);
/* a rendezvous file name for one launch: under /dev/shm when the host has it, else /tmp */
void pr_dist_default_file(char *buf, size_t n);
/* CUDA devices this process sees (0 without CUDA) */
int pr_dist_visible_gpus(void);

/* ---- communicators --------------------------------------------------------------- */
typedef struct pr_comm pr_comm;
struct pr_comm {
    int rank, world;
    const char *backend;          /* "shm" or "nccl" */
    double timeout_s;             /* a wait longer than this fails, naming rank and operation */
    /* in place: each tensor becomes the mean over ranks of itself (f32, on the
     * backend's device). May return before the work is done (nccl): pr_comm_wait. */
    int (*allreduce_avg)(pr_comm *c, pr_tensor *const *ts, int n, pr_err *err);
    /* each tensor from rank `root` to every rank */
    int (*broadcast)(pr_comm *c, pr_tensor *const *ts, int n, int root, pr_err *err);
    /* host doubles, in place, the mean over ranks (metrics, losses); blocking */
    int (*avg_host)(pr_comm *c, double *v, int n, pr_err *err);
    /* everything issued so far is complete and visible to the caller's stream */
    int (*wait)(pr_comm *c, pr_err *err);
    int (*barrier)(pr_comm *c, pr_err *err);
    void (*abort)(pr_comm *c);    /* this rank gives up: the others' waits fail */
    void (*free)(pr_comm *c);     /* after a barrier; rank 0 removes the rendezvous file */
    void *impl;
};
/* the shm backend over `path` (rank 0 creates it; the others wait for it) */
int pr_comm_shm_open(pr_comm **out, const pr_dist_env *e, double timeout_s, pr_err *err);
/* the NCCL backend: rank 0 writes the id to e->file atomically, the others poll it */
int pr_comm_nccl_open(pr_comm **out, const pr_dist_env *e, double timeout_s, pr_err *err);
void pr_comm_free(pr_comm *c);

/* ---- NCCL's library (dist/nccl.c) ---------------------------------------------------
 * Looked for in order: where->lib ($PRISM_NCCL_LIB, the only place tried
 * when set), libnccl.so.2 on the library path, then
 * nvidia/nccl/lib/libnccl.so.2 under each Python site/dist-packages
 * directory that exists (/usr/local/lib/python3*, /usr/lib/python3*,
 * ~/.local/lib/python3* under where->home, where->venv, where->conda). On
 * failure err lists every place tried and why. NCCL_NVLS_ENABLE is forced
 * to 0 first. */
int pr_nccl_load(const pr_nccl_search *where, void **handle, char *found, size_t n, pr_err *err);
/* a rank's GPU: cudaSetDevice(local_rank), before anything else touches CUDA */
int pr_dist_set_device(int local_rank, pr_err *err);

/* ---- the data a rank takes ---------------------------------------------------------
 * rows [first, first + count) of every global batch of `batch` rows; -1 with
 * err when batch does not split evenly over world */
int pr_dist_shard(int batch, int rank, int world, int *first, int *count, pr_err *err);

/* ---- gradient buckets (dist/ddp.c) ----------------------------------------------------
 * During backward a parameter's gradient is complete once the earliest tape
 * node that reads it has run its backward (the tape runs in reverse). Ready
 * gradients fill a bucket; a full bucket is all-reduced at once (on the GPU
 * on NCCL's stream, overlapping the rest of the backward). Parameters the
 * pass did not reach get zero gradients at the end, so every rank issues the
 * same collectives in the same order. */
typedef struct pr_ddp pr_ddp;
pr_ddp *pr_ddp_new(pr_comm *c, const pr_params *p, size_t bucket_bytes);
void pr_ddp_free(pr_ddp *d);
/* after the forward, before pr_backward: finds each parameter's last node
 * and installs the hook on ctx */
void pr_ddp_begin(pr_ddp *d, pr_ctx *ctx);
/* after pr_backward: the rest of the grads, then waits for every bucket;
 * uninstalls the hook. -1 with err (a timeout, a dead rank) */
int pr_ddp_end(pr_ddp *d, pr_ctx *ctx, pr_err *err);
/* the buckets of the last step, for tests: bucket of each parameter, count */
int pr_ddp_buckets(const pr_ddp *d, const int **bucket_of_param);

/* ---- ZeRO stage 1 (dist/zero.c) ------------------------------------------------------
 * owner[i] for each parameter: greedy by size, largest first, to the rank
 * with the fewest elements so far (ties: the lower rank), so ranks hold
 * nearly equal shares of the optimizer state. */
void pr_zero_owners(const pr_params *p, int world, int *owner);
/* The trainer's side: each rank keeps optimizer state only for the
 * parameters it owns, updates them, then every owner broadcasts them. */
typedef struct pr_zero pr_zero;
/* ownership of p's parameters over c's ranks (p and c outlive it) */
pr_zero *pr_zero_new(pr_comm *c, const pr_params *p);
void pr_zero_free(pr_zero *z);
/* this rank's optimizer: state for its own parameters only */
pr_optim *pr_zero_optim_new(const pr_zero *z, const pr_optim_opts *oo);
/* after the optimizer step: every parameter from its owner to all ranks */
int pr_zero_share_updates(pr_zero *z, pr_err *err);
/* the whole optimizer state on rank 0 in *full (NULL on the others), each
 * parameter's moments sent by its owner; every rank takes part */
int pr_zero_gather_optim(pr_zero *z, const pr_optim *mine, pr_optim **full, pr_err *err);

#ifdef __cplusplus
}
#endif
#endif
