/* tests/test_ttt_mlp.c: TTT-MLP and Titans on the CPU.
 *
 * - golden vectors (tests/data/ops2.safetensors, T=48, mini-batch/chunk 16):
 *   every output and every input grad of sum over outputs of out * d<out>,
 *   f64 to 1e-10 and f32 to 1e-4, relative to the reference's max-abs;
 */
#include "tests/test_ttt_ops2_util.h"

static void test_golden_mlp_f64(void **s) { (void)s, golden_case(&ttt_mlp_desc, PR_F64, PR_CPU, 1e-10); }
static void test_golden_mlp_f32(void **s) { (void)s, golden_case(&ttt_mlp_desc, PR_F32, PR_CPU, 1e-4); }
static void test_golden_titans_f64(void **s) { (void)s, golden_case(&titans_desc, PR_F64, PR_CPU, 1e-10); }
static void test_golden_titans_f32(void **s) { (void)s, golden_case(&titans_desc, PR_F32, PR_CPU, 1e-4); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_mlp_f64),    cmocka_unit_test(test_golden_mlp_f32),
        cmocka_unit_test(test_golden_titans_f64), cmocka_unit_test(test_golden_titans_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
