"""Nuclio handler of the MXNet server role function.

The same file runs in Nuclio's python runtime and in Coach's embedded local backend; the
work is in coach.roles.function (the coach package is installed in the function image).
"""

from coach.roles.function import FunctionRuntime


def init_context(context):
    # Start the warm server process now, so the first event does not pay for `import mxnet`.
    setattr(context.user_data, "runtime", FunctionRuntime("server"))


def handler(context, event):
    return context.user_data.runtime.handle(context, event)
