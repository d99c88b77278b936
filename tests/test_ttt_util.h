/* tests/test_ttt_util.h: what the CPU and CUDA TTT-Linear tests share on
 * top of tests/test_ops2_util.h (host copies of one run, their comparison):
 * the inputs' names. */
#ifndef PR_TEST_TTT_UTIL_H
#define PR_TEST_TTT_UTIL_H

#include "ops/ttt_linear.h"
#include "tests/test_ops2_util.h"

enum { NIN = 8 };
static const char *const in_names[NIN] = {"q", "k", "v", "w", "b", "eta", "h0", "hb0"};

#endif
