/* tools/dist_env.c: where this process stands among the ranks, read from
 * the environment the launcher (prism's own, mpirun, srun) gave it. The
 * command reads the environment; dist/ parses the values it is handed. */
#include <stdlib.h>

#include "dist/dist.h"
#include "tools/tools.h"

int pr_dist_env_read(pr_dist_env *e, const char *dist_file, pr_err *err)
{
    pr_dist_vars v = {.dist_file = getenv("PRISM_DIST_FILE"),
                      .nccl = {.lib = getenv("PRISM_NCCL_LIB"), .home = getenv("HOME"),
                               .venv = getenv("VIRTUAL_ENV"), .conda = getenv("CONDA_PREFIX")}};
    for (int i = 0; i < PR_DIST_LAUNCHERS; i++)
        for (int k = 0; k < 3; k++) v.value[i][k] = getenv(pr_dist_var_names[i][k]);
    return pr_dist_env_parse(e, &v, dist_file, err);
}
