/* tools/golden_ops2.c: the table of ops2 checkers (tools/golden_ops2.h) and
 * the loop over it that `prism golden-check` runs after the recurrences. */
#include "tools/golden_ops2.h"

#include <stdio.h>

static const struct {
    const char *name;
    golden_ops2_fn fn;
} checkers[] = {
    {"ttt_mlp", golden_check_ttt_mlp},
    {"titans", golden_check_titans},
};

void golden_check_ops2(const pr_safetensors *st, const golden_ops2_opts *o, int *passed, int *failed)
{
    for (size_t i = 0; i < sizeof checkers / sizeof *checkers; i++) {
        char probe[64], why[512] = "";
        snprintf(probe, sizeof probe, "%s.o", checkers[i].name);
        if (!pr_safetensors_get(st, probe)) continue;
        double e = 0;
        const int ok = checkers[i].fn(st, o, &e, why, sizeof why);
        printf("%s %s max_rel_err=%.3g%s%s\n", checkers[i].name, ok ? "ok" : "FAIL", e, why[0] ? "  " : "", why);
        ok ? (*passed)++ : (*failed)++;
    }
}
