/* tests/fuzz/fuzz_config.c: the config parsers. The input is a model config
 * JSON, a run config JSON ({"model": ..., "train": ...}) and, line by line,
 * `key=value` settings for both key tables; every config that parses is
 * checked across fields and written back out to JSON, which must parse again. */
#include "models/models.h"
#include "train/train.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_string(data, size);
    pr_err err;
    pr_config c = pr_config_default();
    if (pr_config_apply_json(&c, text, "fuzz", &err) == 0) {
        pr_config_check(&c, &err);
        char *json = pr_config_to_json(&c);
        pr_config back = pr_config_default();
        if (pr_config_apply_json(&back, json, "round trip", &err) != 0) abort();
        free(json);
    }
    pr_config rc = pr_config_default();
    pr_train_opts o = pr_train_defaults();
    if (pr_run_config_apply(&rc, &o, text, "fuzz", &err) == 0) {
        char *json = pr_run_config_json(&rc, &o);
        pr_config c2 = pr_config_default();
        pr_train_opts o2 = pr_train_defaults();
        if (pr_run_config_apply(&c2, &o2, json, "round trip", &err) != 0) abort();
        free(json);
    }
    for (char *line = text, *next; line; line = next) {   /* `key=value` lines, as --set takes them */
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (pr_config_set(&c, line, &err) != 0) pr_train_set(&o, line, &err);
    }
    free(text);
    return 0;
}
