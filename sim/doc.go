// Package sim is a flow-level simulator: it runs every rank's program of a
// schedule (package sched) at once on a model of a network and predicts how
// long the collective takes, how busy each link is, and when each message
// moved.
//
// # Network
//
// A Network is a directed graph: one node per rank plus any switches,
// bridges or NICs, and links with a bandwidth (bytes/s) and a latency (s).
// Every message from rank a to rank b follows a route, a path of links:
// the one set with SetChannelRoute or SetRoute, or else the shortest path
// (fewest links, then least latency, then widest bottleneck) through
// transit nodes. FromModel builds the network a cost.Model describes: a
// full mesh of direct links of the right class between ranks, optionally
// with one shared port per host for the traffic between hosts (SharedNIC)
// and one send and one receive port per rank (RankPorts).
// Other packages fill a Network with NewNetwork, AddNode and AddLink.
//
// # Execution
//
// Each rank issues its steps in program order, as the executor (package
// exec) does: a step is issued once the steps it depends on (Deps) have
// completed, and sends and receives complete out of order. Copy and Reduce
// run on the issuing rank's processor and hold its issue until they end
// (Copy: bytes / Config.CopyBandwidth, free when the in-place aliasing makes
// source and destination the same memory; Reduce: bytes × Config.Gamma;
// both plus Config.StepOverhead). A RecvReduce, once its data is in,
// reduces it on the same processor (bytes × Gamma), after any computation
// already running there, and completes when that ends.
//
// # Messages
//
// A message is ready when both its Send and its receive have been issued
// (rendezvous) or, for messages of at most Config.Eager bytes, when its
// Send has (eager; the data waits at the receiver until the receive is
// posted). The messages of one connection, a (source, destination,
// channel) triple, go one at a time in the order they became ready, like a
// TCP stream or a CUDA stream: the message at the head first pays its
// latency (the sum of its route's link latencies plus
// Config.StepOverhead), during which it occupies the connection but no
// bandwidth; then its data moves as a flow over every link of the route.
// Its Send and receive complete when the last byte arrives. So one message
// alone of m bytes over a route of bandwidth β and latency α takes
// α + m/β, and a pipeline of messages on one connection pays α for each,
// as the α-β model of package cost assumes. Messages of different
// connections travel at once, also between the same two ranks on different
// channels.
//
// # Sharing
//
// Concurrent flows share links max-min fairly: progressive filling raises
// every flow's rate together until a link is full, freezes the flows on
// that link, and goes on with the rest. Rates are recomputed whenever a
// flow starts or ends, for the flows connected to it through shared links;
// a link of infinite bandwidth never limits a flow.
//
// # Arrival
//
// By default every rank starts its program at time 0. Config.Start gives
// each rank its own start, a process arrival pattern: a rank issues
// nothing before its start, so its peers' messages to it wait for it and
// so does whatever depends on them. Result.AvgLatency then measures the
// collective as the PAP-aware collectives paper (Alizadeh et al.,
// EuroMPI/USA 2022, §6.1) does, each rank from its own arrival to its
// exit, averaged over the ranks; Result.AfterLast is the time after the
// last arrival. MessageTime gives the paper's α (§2.2), by which it scales
// the patterns: one message's simulated one-way time between two ranks.
//
// # Output
//
// Run returns a Result: the collective's time (when the last rank
// finished), each rank's finish time, each link's bytes, busy time and
// utilisation and, with Config.Timeline, every message (Flow) and
// computation (Compute) with its times. WriteSVG draws those as a timeline,
// one row per link or per rank.
//
// Example:
//
//	net, _ := sim.FromModel(cost.Default(), p.Layout, p.NRanks)
//	res, err := sim.Run(ctx, p, progs, net, sim.Config{Gamma: cost.Default().Gamma, Timeline: true})
//	fmt.Printf("%.1f µs\n", res.Time*1e6)
//	sim.WriteSVG(f, net, res, sim.SVGOptions{})
//
// sim imports sched, cost and topo, never algo.
package sim
