// The sandboxed trial child: reads a SandboxRequest on stdin, verifies and times one kernel (or a
// baseline, or a composed step) and writes a Measurement on stdout. It runs in its own process
// so a crashing or hanging kernel never takes the worker down (workers/sandbox.h).
//
// Two kinds of binary host it: kiln-trial, which links the devices but not LibTorch or gRPC and
// so starts in a few milliseconds (tuning trials, the bulk of the work), and every binary that
// hosts a worker (kiln, kiln-worker, the benchmarks), which call MaybeTrialChild() first and run
// the LibTorch baselines and composed steps.
//
// Two modes: kTrialChildFlag serves one request and exits; kTrialServerFlag serves requests one
// after another, each framed as a 4-byte little-endian length and the serialized message, until
// stdin closes (the worker's long-lived trial process, workers/sandbox.h's TrialServer). The
// server keeps its operand memory between trials (hardware/buffers.h, KeepArenasForReuse).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/v1/types.pb.h"

namespace kiln::workers {

inline constexpr char kTrialChildFlag[] = "--kiln-trial-child";
inline constexpr char kTrialServerFlag[] = "--kiln-trial-server";
inline constexpr char kTrialExecutableName[] = "kiln-trial";

// Runs one request in this process: the kernel, baseline or step it names.
v1::Measurement RunTrialRequest(const v1::SandboxRequest& req);

int TrialChildMain();
int TrialServerMain();

// When argv[1] is kTrialChildFlag or kTrialServerFlag, runs that mode and returns its exit code;
// otherwise returns -1. Every hosting binary calls it first thing in main().
int MaybeTrialChild(int argc, char** argv);

// The framing of the server mode. ReadFrame returns false at a clean end of input (no bytes) and
// sets *error when the input ends inside a frame or a read fails.
bool ReadFrame(int fd, std::string* out, std::string* error);
// The payload length a frame's 4-byte header announces.
uint32_t FrameLength(const char* header);
bool WriteFrame(int fd, const std::string& data);

}  // namespace kiln::workers
