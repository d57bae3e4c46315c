// Package launch is what `braid run -n N -- PROG ARGS` does: it starts N
// ranks of a program on this host, hands them their places and the job's
// store through the environment (see bootstrap.FromEnv), relays their
// output, and stops them all as soon as one fails.
//
// Example:
//
//	err := launch.Run(ctx, launch.Config{
//		N:      4,
//		Prog:   "./train",
//		Args:   []string{"--epochs", "3"},
//		Prefix: true, // "[2] loss 0.31"
//	})
//	var exit *launch.ExitError
//	if errors.As(err, &exit) {
//		fmt.Fprintln(os.Stderr, "braid run:", err) // "rank 2 exited with status 1"
//		os.Exit(exit.ExitCode())
//	}
package launch
