"""Imported by the collectors' forkserver only (``set_forkserver_preload``): its exit skips the final
garbage collection, as the main process's does (``rlrun.cli.main.skip_the_final_garbage_collection``).

The forkserver imports torch once for every worker it forks; when the main process ends, it
exits through the interpreter's shutdown, whose last collection over torch's objects took 1.5-2 s
on a loaded 2-core machine, while the run's stderr stayed open. Forked workers leave through
``os._exit`` and never run this.
"""

import atexit
import gc

atexit.register(gc.freeze)
