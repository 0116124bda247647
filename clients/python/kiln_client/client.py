"""kiln_client.Client: submit, watch and read Kiln tuning jobs over gRPC (TuningService)."""

import time

import grpc
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from . import _pb

types_pb2 = _pb["types_pb2"]
service_pb2 = _pb["tuning_service_pb2"]
service_grpc = _pb["tuning_service_pb2_grpc"]

TERMINAL = frozenset({types_pb2.SUCCEEDED, types_pb2.FAILED, types_pb2.CANCELLED})
# Failures after which a watch is worth resuming: the coordinator went away or restarted (the same
# set as the C++ CLI's).
_TRANSIENT = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED,
    grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL
})


class KilnError(Exception):
    """A failed call: `code` is the grpc.StatusCode, the message says what went wrong."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def to_dict(message):
    """A message as a dict: json_format.MessageToDict with the .proto field names (median_us, not
    medianUs) and enums by name; fields at their default are left out. Unlike proto3's JSON
    mapping, 64-bit integers (knob values, dims, timestamps) are ints rather than strings, as the
    CLI's --json prints them; json_format.ParseDict takes either."""
    d = json_format.MessageToDict(message, preserving_proto_field_name=True)
    _ints_of_int64(message, d)
    return d


_INT64 = frozenset({
    FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64
})


def _ints_of_int64(message, d):
    for field, value in message.ListFields():
        if field.name not in d:
            continue
        mt = field.message_type
        if mt is not None and mt.GetOptions().map_entry:
            vf = mt.fields_by_name["value"]
            if vf.type in _INT64:
                d[field.name] = {k: int(v) for k, v in d[field.name].items()}
            elif vf.message_type is not None:
                for k, sub in d[field.name].items():
                    _ints_of_int64(value[_map_key(mt, k)], sub)
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            if field.type in _INT64:
                d[field.name] = [int(v) for v in d[field.name]]
            elif mt is not None:
                for sub_message, sub in zip(value, d[field.name]):
                    _ints_of_int64(sub_message, sub)
        elif mt is not None:
            _ints_of_int64(value, d[field.name])
        elif field.type in _INT64:
            d[field.name] = int(d[field.name])


def _map_key(entry_type, key):
    kf = entry_type.fields_by_name["key"]
    if kf.type == FieldDescriptor.TYPE_STRING:
        return key
    if kf.type == FieldDescriptor.TYPE_BOOL:
        return key == "true"
    return int(key)


def _describe(error, address):
    code, details = error.code(), error.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return (f"cannot reach the coordinator at {address} (is kiln-coordinator running?): "
                f"{details}")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return f"UNAUTHENTICATED: {details} (check the token)"
    return f"{code.name}: {details}"


def _read_pem(what, value):
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    try:
        with open(value, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"{what}: cannot read {value}: {e.strerror}") from e
    if not data:
        raise ValueError(f"{what}: {value} is empty")
    return data


def read_token_file(path):
    """The token on the first line of a token file (what `kiln --token-file` reads)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            token = f.readline().strip()
    except OSError as e:
        raise ValueError(f"token file: cannot read {path}: {e.strerror}") from e
    if not token:
        raise ValueError(f"token file: {path} has no token on its first line")
    return token


def _shape_dims(shape):
    if isinstance(shape, dict):
        return {str(k).upper(): int(v) for k, v in shape.items()}
    dims = {}
    for part in str(shape).split(","):
        name, sep, value = part.partition("=")
        name = name.strip().upper()
        try:
            if not sep or not name:
                raise ValueError
            dims[name] = int(value.strip())
        except ValueError:
            raise ValueError("shape: expected NAME=INTEGER pairs separated by commas "
                             f"(e.g. M=8,N=4096,K=4096), got '{part[:40]}'") from None
    return dims


def _enum_name(value):
    return str(value).upper().replace("-", "_")


def job_spec(spec):
    """A JobSpec from a JobSpec or a dict. The dict takes JobSpec's fields (proto names or their
    JSON names) and, as shorthands for `kiln submit`'s flags: op, shape ("M=8,N=256,K=256" or
    {"M": 8, ...}), dtype and epilogue of an operator job, and budget (budget_trials)."""
    if isinstance(spec, types_pb2.JobSpec):
        return spec
    if not isinstance(spec, dict):
        raise TypeError(f"spec: expected a dict or a kiln.v1.JobSpec, got {type(spec).__name__}")
    d = dict(spec)
    if "op" in d or "shape" in d:
        if "workload" in d:
            raise ValueError("spec: give op/shape or workload, not both")
        if "op" not in d or "shape" not in d:
            raise ValueError("spec: op and shape go together (e.g. op='gemm', "
                             "shape='M=8,N=4096,K=4096')")
        d["workload"] = {
            "op": _enum_name(d.pop("op")),
            "dims": _shape_dims(d.pop("shape")),
            "dtype": _enum_name(d.pop("dtype", "fp32")),
            "epilogue": d.pop("epilogue", ""),
        }
    elif isinstance(d.get("dtype"), str):
        d["dtype"] = _enum_name(d["dtype"])
    if "budget" in d:
        d["budget_trials"] = d.pop("budget")
    try:
        return json_format.ParseDict(d, types_pb2.JobSpec())
    except json_format.ParseError as e:
        raise ValueError(f"spec: {e}") from e


class Client:
    """A connection to a Kiln coordinator's TuningService.

    coordinator: HOST:PORT, or a comma-separated list of a coordinator leading a PostgreSQL
    database and its standbys: calls follow the leader (one answered UNAVAILABLE moves on to the
    next address, for up to failover_wait seconds when every address fails). tls_ca: the CA certificate (a PEM file's path, or its bytes) to verify
    the coordinator with; without it the channel is plaintext (a coordinator without TLS serves
    loopback only). tls_cert/tls_key: an optional client key pair (PEM paths or bytes). token: a
    role token, sent as `authorization: Bearer TOKEN` on every call as the C++ CLI does.
    timeout: seconds each unary call may take (a watch has no deadline).
    """

    def __init__(self, coordinator, tls_ca=None, token=None, tls_cert=None, tls_key=None,
                 timeout=60.0, failover_wait=30.0):
        addresses = [a.strip() for a in (coordinator or "").split(",") if a.strip()]
        if not addresses:
            raise ValueError("coordinator: expected HOST:PORT (or HOST:PORT,HOST:PORT,...)")
        self.address = coordinator
        self.timeout = timeout
        self.failover_wait = failover_wait
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together; give both")
        if tls_cert is not None and tls_ca is None:
            raise ValueError("tls_cert and tls_key need tls_ca")
        self._metadata = ()
        if token is not None:
            token = token.strip()
            if not token or any(c < "!" or c > "~" for c in token):
                raise ValueError("token: empty or holds characters a token cannot have")
            # Per-call metadata, as the C++ client's ClientAuth::Apply, rather than gRPC call
            # credentials: those are refused on a plaintext channel, which a loopback
            # coordinator with --tokens accepts.
            self._metadata = (("authorization", "Bearer " + token),)
        options = [
            ("grpc.max_receive_message_length", 512 << 20),  # results carry every sample
            # Reconnect quickly after a coordinator restart instead of backing off for minutes.
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
        creds = None
        if tls_ca is not None:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read_pem("tls_ca", tls_ca),
                private_key=_read_pem("tls_key", tls_key),
                certificate_chain=_read_pem("tls_cert", tls_cert))
        self._channels = [grpc.secure_channel(a, creds, options=options) if creds is not None
                          else grpc.insecure_channel(a, options=options) for a in addresses]
        self._stubs = [service_grpc.TuningServiceStub(c) for c in self._channels]
        self._at = 0  # the address in use

    @property
    def _stub(self):
        return self._stubs[self._at]

    def _failover(self):
        self._at = (self._at + 1) % len(self._stubs)

    def close(self):
        for channel in self._channels:
            channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request):
        give_up = time.monotonic() + (self.failover_wait if len(self._stubs) > 1 else 0)
        pause = 0.1
        while True:
            try:
                return getattr(self._stub, method)(request, timeout=self.timeout,
                                                   metadata=self._metadata)
            except grpc.RpcError as e:
                # Down, or a standby: the next address may lead (or will, once it took over).
                if (e.code() != grpc.StatusCode.UNAVAILABLE or len(self._stubs) == 1
                        or time.monotonic() > give_up):
                    raise KilnError(e.code(), _describe(e, self.address)) from None
                self._failover()
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def submit(self, spec):
        """Submits a job (a JobSpec or a dict, see job_spec) and returns its id."""
        request = service_pb2.SubmitJobRequest(spec=job_spec(spec))
        return self._call("SubmitJob", request).job_id

    def get_job(self, job_id):
        """The job as a kiln.v1.Job message."""
        return self._call("GetJob", service_pb2.GetJobRequest(job_id=job_id))

    def job(self, job_id):
        """The job as a dict."""
        return to_dict(self.get_job(job_id))

    def jobs(self, limit=0):
        """Jobs as dicts, newest first."""
        return [to_dict(j) for j in self._call("ListJobs", service_pb2.ListJobsRequest(
            limit=limit)).jobs]

    def cancel(self, job_id):
        """Cancels a job; returns its state's name afterwards."""
        state = self._call("CancelJob", service_pb2.CancelJobRequest(job_id=job_id)).state
        return types_pb2.JobState.Name(state)

    def results(self, job_id):
        """The job and its trials, {"job": {...}, "trials": [...]}, with .proto field names."""
        return to_dict(self._call("GetResults", service_pb2.GetResultsRequest(job_id=job_id)))

    def watch(self, job_id, give_up_after=120.0):
        """Yields kiln.v1.JobEvent messages until the job ends (the last one's job is in a
        terminal state). The first event is a snapshot from GetJob; a lost stream is resumed,
        stale replayed events are skipped, and after give_up_after seconds without reaching the
        coordinator a KilnError(UNAVAILABLE) is raised."""
        job = self.get_job(job_id)
        kind = service_pb2.JobEvent.PROGRESS
        if job.state in TERMINAL:
            kind = service_pb2.JobEvent.STATE
        yield service_pb2.JobEvent(kind=kind, job=job)
        if job.state in TERMINAL:
            return
        shown = job
        failing_since = None
        backoff = 0.2
        request = service_pb2.WatchJobRequest(job_id=job_id)
        while True:
            stream = self._stub.WatchJob(request, metadata=self._metadata)
            got_event, error = False, None
            try:
                for event in stream:
                    got_event, failing_since, backoff = True, None, 0.2
                    if _progress_key(event.job) < _progress_key(shown):
                        continue  # replayed history, behind what was already shown
                    shown = event.job
                    yield event
                    if event.job.state in TERMINAL:
                        return
            except grpc.RpcError as e:
                if e.code() not in _TRANSIENT:
                    raise KilnError(e.code(), _describe(e, self.address)) from None
                if e.code() == grpc.StatusCode.UNAVAILABLE:
                    self._failover()
                error = e
            finally:
                stream.cancel()
            if error is None or got_event:
                # The stream ended without a terminal event: the job may have ended meanwhile.
                try:
                    job = self.get_job(job_id)
                    if job.state in TERMINAL:
                        yield service_pb2.JobEvent(kind=service_pb2.JobEvent.STATE, job=job)
                        return
                except KilnError as e:
                    if e.code not in _TRANSIENT:
                        raise
            now = time.monotonic()
            if failing_since is None:
                failing_since = now
            elif now - failing_since > give_up_after:
                raise KilnError(grpc.StatusCode.UNAVAILABLE,
                                f"lost the coordinator at {self.address}; gave up reconnecting "
                                f"after {give_up_after:.0f} s")
            time.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    def wait(self, job_id, give_up_after=120.0):
        """Watches the job until it ends and returns the final job as a dict."""
        last = None
        for event in self.watch(job_id, give_up_after=give_up_after):
            last = event.job
        return to_dict(last)


def _progress_key(job):
    # Progress only moves forward: state rank, then trials answered.
    rank = 3 if job.state in TERMINAL else 2 if job.state == types_pb2.RUNNING else 1
    return (rank, job.trials_done, job.trials_failed)
