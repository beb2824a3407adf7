"""How long a test waits for a subprocess before calling it hung.

A guard against a hang, never a performance bound: on a busy 2-core machine (CI, or two
`make test` at once) a CPU benchmark run that takes 20 s alone can take minutes, and a
limit near its usual time fails the suite for being loaded (issue 31). A hang takes
forever, so a generous bound loses nothing. Tests that measure time assert on what was
measured, never on how long the test took.
"""

HANG_SECONDS = 900
