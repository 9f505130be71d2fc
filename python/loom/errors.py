"""Loom's Python exceptions: LoomError and one subclass per gRPC status code a daemon answers,
each carrying the code and Loom's message; JobInvalid for a job refused locally (naming the op,
variable or input); JobFailed for a job that ended FAILED or CANCELLED.

    try:
        client.submit(job)
    except loom.InvalidArgument as error:   # the daemon's compiler refused it
        print(error.code, error.message)
"""

import grpc


class LoomError(Exception):
    """An error from Loom: `code` (a grpc.StatusCode) and `message` (Loom's words)."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code.name}: {self.message}"


class Cancelled(LoomError):
    code = grpc.StatusCode.CANCELLED


class InvalidArgument(LoomError, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(LoomError, TimeoutError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(LoomError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(LoomError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(LoomError, PermissionError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(LoomError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(LoomError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Unimplemented(LoomError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(LoomError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(LoomError, ConnectionError):
    code = grpc.StatusCode.UNAVAILABLE


class Unauthenticated(LoomError):
    code = grpc.StatusCode.UNAUTHENTICATED


class JobInvalid(InvalidArgument):
    """A job that local validation refuses; `culprit` names the op, variable, input or field."""

    def __init__(self, message, culprit=""):
        super().__init__(message)
        self.culprit = culprit


class JobFailed(LoomError):
    """A job that ended FAILED or CANCELLED: `code` and `message` are its JobError's, `job_id`
    and `state` ("FAILED" or "CANCELLED") say which job and how."""

    def __init__(self, job_id, state, message, code):
        super().__init__(f"job {job_id} {state}: {message}", code)
        self.job_id = job_id
        self.state = state


_BY_CODE = {cls.code: cls for cls in [
    Cancelled, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists, PermissionDenied,
    ResourceExhausted, FailedPrecondition, Unimplemented, Internal, Unavailable, Unauthenticated]}

_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


def status_code(number):
    """The grpc.StatusCode of a google.rpc.Code number (JobError.code); UNKNOWN for others."""
    return _BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


def error_for_code(code, message):
    """The LoomError subclass instance for a grpc.StatusCode."""
    cls = _BY_CODE.get(code, LoomError)
    return cls(message, code)


def from_rpc_error(error, call=""):
    """A LoomError from a grpc.RpcError (what every Client call raises instead of it)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    prefix = f"{call}: " if call else ""
    return error_for_code(code, f"{prefix}{details}")
