// Package plan chooses the algorithm for each collective call. The Planner
// interface has one method; Default is the built-in choice by collective,
// rank count and message size, and the fallback of any other planner.
//
// Example:
//
//	d := plan.Default{}.Plan(plan.Request{Coll: sched.Allreduce, NRanks: 4, Bytes: 1 << 20},
//		[]string{"ring", "recdouble", "rabenseifner"})
//	fmt.Println(d.Algo, d.Reason)
package plan
