"""The one error type the command line turns into a single clear line."""


class R3Error(Exception):
    """A user-facing failure: bad input, missing tool, corrupt data.

    The CLI prints ``str(err)`` on one line and exits non-zero; no traceback.
    """

    exit_code = 2


class CaptureError(R3Error):
    """A capture is unknown, truncated or corrupt."""


class RewriteUncheckable(CaptureError):
    """A capture against which no source rewrite can be checked: its call changed nothing
    replay compares. The kernel's pipelines are still tuned on it."""


class PipelineError(R3Error):
    """A pipeline SPEC names something that does not exist."""


class ToolchainError(R3Error):
    """A required compiler or runtime is missing."""
