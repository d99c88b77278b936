"""tools/device/fla_guard.py: shared by time_fla.py and lm_baselines.py."""


def lift_triton_guard():
    """fla refuses its gated chunk backward on Hopper under Triton 3.4-3.7.0
    (a miscompile gives wrong values there). For timing only, tell its check
    the Triton is newer: the kernels run as they would, their values unused."""
    import fla.ops.common.chunk_o as chunk_o
    if not getattr(chunk_o, "TRITON_ABOVE_3_7_1", True):
        chunk_o.TRITON_ABOVE_3_7_1 = True
        print("# fla's Triton guard lifted for timing: the gated backward's values are not trusted here", flush=True)
