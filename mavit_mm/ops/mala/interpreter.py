"""Whether Triton runs the kernels in its CPU interpreter: a leaf, read by the
dispatch and by the kernels at import."""

import os


def triton_interpreter_enabled() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (TRITON_INTERPRET)."""
    # The values Triton itself reads as true (its knobs' env_bool), so this and
    # Triton never disagree; the one place the package decides it.
    return os.environ.get('TRITON_INTERPRET', '0').strip().lower() in (
        '1',
        'true',
        'yes',
        'on',
        'y',
    )
