/* tests/fuzz/fuzz_safetensors.c: the safetensors reader on any bytes; every
 * tensor and metadata value read is looked up again by name. */
#include "tensor/tensor.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_write(fuzz_path("in.safetensors", path, sizeof path), data, size);
    static pr_arena *a;   /* one arena for every input, reset after each, as a long-lived reader's */
    if (!a) a = pr_arena_new("fuzz", 0);
    pr_safetensors st;
    pr_err err;
    if (pr_safetensors_read(path, a, &st, &err) == 0) {
        for (int i = 0; i < st.n; i++)
            if (pr_safetensors_get(&st, st.names[i]) != st.tensors[i]) abort();   /* names are unique */
        for (int i = 0; i < st.n_meta; i++)
            if (!pr_safetensors_meta(&st, st.meta_keys[i])) abort();
    }
    pr_arena_reset(a);
    return 0;
}
