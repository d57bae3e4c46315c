package braid_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportRules keeps the layers apart (DESIGN.md): sched imports nothing
// of Braid; algo only sched and cost; exec and sim never algo; transports
// nothing above them; only the root package and cmd/ join the layers (gpu
// is a backend of the executor: exec.Drive runs its programs).
func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}:{{join .Imports \" \"}}", "./...").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/braid-ccl/braid"
	allowed := map[string][]string{
		"sched":     {},
		"algo":      {"sched", "cost"},
		"plan":      {"sched", "cost", "internal/size", "internal/textfile"},
		"cost":      {"sched"},
		"topo":      {"sched", "cost"},
		"pack":      {"topo", "sched", "cost"},
		"cuda":      {"internal/dtype", "internal/wait"},
		"gpu":       {"sched", "cuda", "gpu/fused", "exec", "transport", "internal/dtype", "internal/wait", "internal/shmring", "internal/shmfile"},
		"exec":      {"sched", "transport", "internal/dtype", "internal/reduce", "internal/par"},
		"transport": {"internal/wait"},
		// The fused kernels' layout, argument lists and choice sit above
		// the binding and below the executor: cuda knows no collective,
		// and gpu runs the kernels gpu/fused shapes.
		"gpu/fused": {"cuda", "sched", "internal/dtype"},
		// The two-path copy between GPUs and its table, over the binding.
		"gpu/multipath": {"cuda", "internal/size", "internal/textfile"},
		// The profiler records what the root package tells it.
		"profile": {"internal/size", "internal/arrival"},
		// Leaf helpers that any layer may use import nothing of Braid.
		"internal/size":     {},
		"internal/textfile": {},
		"internal/arrival":  {},
		// Go's monotonic time on the host's CLOCK_MONOTONIC: the
		// arrival clock and braid bench's.
		"internal/monoclock": {},
		// The shared-memory ring of frames: the shm transport's and the
		// GPU executors' notices.
		"internal/shmring": {},
		// The one wait policy: the executor (through transport), the
		// transports, the GPU loops and the CUDA worker.
		"internal/wait": {},
		// Splitting a rank's large copies and reductions across its
		// threads: shmcoll, exec and the shm transport. It parses its
		// size knob (BRAID_COPY_MIN) with the leaf size parser.
		"internal/par": {"internal/size"},
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imps, _ := strings.Cut(line, ":")
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/")
		top := strings.Split(rel, "/")[0]
		for _, imp := range strings.Fields(imps) {
			if !strings.HasPrefix(imp, mod+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, mod+"/")
			if strings.HasPrefix(rel, "transport/") && !strings.HasPrefix(dep, "transport") && !strings.HasPrefix(dep, "internal/") && dep != "cuda" {
				t.Errorf("%s imports %s: transports may import only transport packages, internal packages and cuda", rel, dep)
			}
			ok, rule := allowed[rel]
			if !rule {
				if top == "sim" && strings.HasPrefix(dep, "algo") {
					t.Errorf("%s imports %s: the simulator never imports algo", rel, dep)
				}
				continue
			}
			good := false
			for _, a := range ok {
				if dep == a || strings.HasPrefix(dep, a+"/") {
					good = true
				}
			}
			if !good {
				t.Errorf("%s imports %s: allowed %v", rel, dep, ok)
			}
		}
	}
}
