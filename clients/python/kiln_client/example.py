"""Submits a small GEMM job, watches it and prints its results as JSON.

    python3 -m kiln_client.example --coordinator 127.0.0.1:50051

Progress goes to stderr, one line per change; the results ({"job": ..., "trials": ...}, .proto
field names) go to stdout. Exit status 0 when the job SUCCEEDED, 1 when it did not or a call
failed, 2 for a bad command line.
"""

import argparse
import json
import os
import sys

import kiln_client


def _progress(job):
    line = (f"job {job.id}: {kiln_client.types_pb2.JobState.Name(job.state)}, "
            f"{job.trials_done}/{job.spec.budget_trials} trials")
    if job.trials_failed:
        line += f" ({job.trials_failed} failed)"
    bests = [t.best.median_us for t in job.tasks if t.best.median_us > 0]
    if bests:
        line += f", best {min(bests):.2f} us"
    if job.message:
        line += f": {job.message}"
    return line


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kiln_client.example", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coordinator", default=os.environ.get("KILN_COORDINATOR", "127.0.0.1:50051"),
                    help="HOST:PORT (default: $KILN_COORDINATOR or 127.0.0.1:50051)")
    ap.add_argument("--tls-ca", default=os.environ.get("KILN_TLS_CA"),
                    help="CA certificate (PEM) to verify the coordinator (default: $KILN_TLS_CA)")
    ap.add_argument("--token-file", default=os.environ.get("KILN_TOKEN_FILE"),
                    help="file whose first line is a submit token (default: $KILN_TOKEN_FILE)")
    ap.add_argument("--op", default="gemm")
    ap.add_argument("--shape", default="M=8,N=256,K=256")
    ap.add_argument("--chip", default="cpu", help="chip-type label prefix (default: cpu)")
    ap.add_argument("--budget", type=int, default=6, help="trials (default: 6)")
    args = ap.parse_args(argv)
    try:
        token = kiln_client.read_token_file(args.token_file) if args.token_file else None
        with kiln_client.Client(args.coordinator, tls_ca=args.tls_ca, token=token) as kiln:
            job_id = kiln.submit({"op": args.op, "shape": args.shape, "chip": args.chip,
                                  "budget": args.budget})
            print(f"submitted job {job_id}", file=sys.stderr)
            shown = None
            final = None
            for event in kiln.watch(job_id):
                line = _progress(event.job)
                if line != shown:
                    print(line, file=sys.stderr, flush=True)
                    shown = line
                final = event.job
            results = kiln.results(job_id)
    except (kiln_client.KilnError, ValueError) as e:
        print(f"kiln_client.example: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kiln_client.example: interrupted; the job keeps running on the coordinator",
              file=sys.stderr)
        return 130
    print(json.dumps(results, indent=2))
    return 0 if final.state == kiln_client.types_pb2.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
