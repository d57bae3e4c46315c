package plan_test

import (
	"fmt"

	"github.com/braid-ccl/braid/plan"
	"github.com/braid-ccl/braid/sched"
)

// The built-in planner takes the cheapest candidate under the cost model
// and says why; a candidate without a cost (NaN) is left to the rules.
func ExampleDefault_Plan() {
	p := sched.Params{Coll: sched.Allreduce, NRanks: 4, Count: 1 << 18} // 1 MiB of float32
	req := plan.Request{Params: p, ElemSize: 4}
	d := plan.Default{}.Plan(req, []plan.Candidate{
		{Name: "ring", Params: p, Cost: 300e-6},
		{Name: "recdouble", Params: p, Cost: 900e-6},
		{Name: "rabenseifner", Params: p, Cost: 200e-6},
	})
	fmt.Println(d.Algo, d.Source == plan.FromModel)
	// Output: rabenseifner true
}
