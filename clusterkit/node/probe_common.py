"""What every fact of the probe shares: the tools' timeout, and the runner that gives
each collector its own thread and deadline (a wedged tool costs its timeout, never the probe).
"""

import threading
import time

from clusterkit.node.prelude import ToolError

TOOL_TIMEOUT = 10.0


def run_parallel(jobs, timeout):
    """Run callables in daemon threads; return {name: error} for those that failed or hung."""
    errors = {}
    threads = {}
    for name, job in jobs.items():

        def target(name=name, job=job):
            try:
                job()
            except ToolError as error:
                errors[name] = str(error)
            except Exception as error:
                errors[name] = "%s: %s" % (type(error).__name__, error)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        threads[name] = thread
    end = time.monotonic() + timeout
    for name, thread in threads.items():
        thread.join(max(0.0, end - time.monotonic()))
        if thread.is_alive():
            errors[name] = "timeout: did not finish within %.0f s" % timeout
    return errors
