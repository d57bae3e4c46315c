// Package plan chooses the algorithm for each collective call. The Planner
// interface has one method; Default is the built-in choice by collective,
// rank count and message size, and the fallback of any other planner.
//
// ExampleDefault_Plan shows a call: a Request (the call's sched.Params and
// element size) and the candidates, each with its cost under the model.
package plan
