"""Python client for Kiln's TuningService (kiln.v1), built on Debian's python3-grpcio.

    import kiln_client
    with kiln_client.Client("127.0.0.1:50051") as kiln:
        job = kiln.submit({"op": "gemm", "shape": "M=8,N=256,K=256", "chip": "cpu", "budget": 6})
        for event in kiln.watch(job):
            print(event.job.state, event.job.trials_done)
        print(kiln.results(job)["job"]["tasks"][0]["best"]["median_us"])

The protobuf/gRPC modules are generated from proto/ on first import (see _protos.py) and exposed
here as types_pb2, tuning_service_pb2 and tuning_service_pb2_grpc.
"""

from . import _protos

_pb = _protos.load()
types_pb2 = _pb["types_pb2"]
tuning_service_pb2 = _pb["tuning_service_pb2"]
tuning_service_pb2_grpc = _pb["tuning_service_pb2_grpc"]
JobSpec = types_pb2.JobSpec

from .client import TERMINAL, Client, KilnError, job_spec, read_token_file, to_dict  # noqa: E402

__all__ = ["Client", "KilnError", "JobSpec", "TERMINAL", "job_spec", "read_token_file", "to_dict",
           "types_pb2", "tuning_service_pb2", "tuning_service_pb2_grpc"]
