// Package agg is in-network aggregation in software: a daemon (braid agg)
// that sums the vectors the members of a group send it and returns the sum
// to every member, and the client that Braid's "agg" allreduce uses.
//
// It takes the idea of reduction inside the network from "Designing
// In-network Computing Aware Reduction Collectives in MPI" (Ramesh et al.,
// HotI 2023), which offloads allreduce to SHARP switches — a low-latency
// mode for small messages and streaming aggregation for large ones — to
// aggregation nodes, as BytePS's summation servers do (Jiang et al., OSDI
// 2020): each member sends its vector once and receives the sum once (S
// bytes each way), where a ring allreduce sends and receives 2(n−1)/n·S.
//
// # Groups and calls
//
// A client connects to every daemon (Dial), proves that it holds the job's
// secret, and joins groups (Join): a group is a key, a member count n and
// this member's index, scoped by the job (its name and the secret it
// proved), so that jobs never meet. A call (Group.Allreduce) cuts the
// vector into one shard per daemon (none smaller than a part) and streams
// each shard in parts (ClientOptions.Part, 1 MiB by default) with at most
// ClientOptions.Window parts in flight: credit-based flow control, a
// credit coming back with each sum. A vector of one part or less is one
// round trip to one daemon (the low-latency mode). The daemon adds a
// part's operands in member order, whatever order they arrive in, so
// every member receives the same bits on every run; float16 and bfloat16
// are added in float32 and rounded once.
//
// # Limits and failures
//
// The daemon reserves a group's memory when it is made ((n+10) × window ×
// part bytes at most) and answers a join beyond its limits (Config:
// memory in all and per job, groups per job) with "no resources"
// (ErrNoResources), so that the client runs without it. A member whose
// connection ends, that breaks the protocol or that disagrees with the
// others about a call ends its group: the other members' calls fail at
// once with ErrLost and the group's memory is freed; other groups and jobs
// go on. A daemon that dies fails its members' calls with ErrLost. The
// daemon logs refused connections, lost members and ended groups, and
// reports Stats on request (FetchStats, braid agg --stats).
//
// # Wire format
//
// After the handshake (HMAC-SHA256 challenge and response in both
// directions, as Braid's TCP transport and store do) every frame is a
// 32-byte header and a payload: see wire.go. The frame decoders are
// fuzzed (FuzzFrame).
package agg
