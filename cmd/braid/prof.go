package main

import (
	"errors"
	"flag"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/braid-ccl/braid/internal/profplot"
	"github.com/braid-ccl/braid/profile"
)

const profUsage = `usage: braid prof [flags] FILE...

Merges the profiles that BRAID_PROFILE=FILE (or Options.Profile) made: each
rank writes FILE.RANK and FILE.RANK.trace.json when its communicator closes.
FILE stands for every FILE.RANK beside it; FILE.RANK names one rank.

It prints, over the ranks given: per call (iallreduce for the non-blocking
one) the calls, bytes, share of each rank's wall time from Init to Close
(mean, min and max over ranks) and time per call; the overlap of
non-blocking calls (1 − time blocked in Wait / time from issue to
completion); the message sizes in bins (2^(n−1), 2^n] bytes; the algorithms
the planner chose per size; the point-to-point partners; each rank's totals.
The figures follow the profiler of Temuçin's thesis ("High-Performance
Interconnect-Aware MPI Communication for Deep Learning Workloads", MASc
thesis, Queen's University 2021, chapter 3).

Each FILE.RANK.trace.json loads in chrome://tracing or ui.perfetto.dev;
--trace merges them into one file, a process per rank.

examples:
  BRAID_PROFILE=/tmp/prof braid bench -n 4 allreduce --max-size 16M
  braid prof /tmp/prof
  braid prof /tmp/prof --hist sizes.png --share share.png --trace all.json

flags:
`

func profCmd(args []string) error {
	fs := flag.NewFlagSet("braid prof", flag.ContinueOnError)
	hist := fs.String("hist", "", "draw the message-size histograms, one panel per call, into FILE.png or FILE.svg")
	shareF := fs.String("share", "", "draw each rank's share of wall time per call into FILE.png or FILE.svg")
	traceF := fs.String("trace", "", "merge the ranks' Chrome traces into FILE.json")
	fs.Usage = func() { fmt.Fprint(os.Stderr, profUsage); fs.PrintDefaults() }
	files, flags := splitArgs(fs, args)
	if done, err := parseFlags(fs, flags); done {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return usageError{"prof: which profile? (the FILE that BRAID_PROFILE named, or FILE.RANK files)"}
	}
	for _, f := range []struct{ name, path string }{{"--hist", *hist}, {"--share", *shareF}} {
		if f.path == "" {
			continue
		}
		if ext := strings.ToLower(filepath.Ext(f.path)); ext != ".png" && ext != ".svg" {
			return usageError{fmt.Sprintf("prof: %s %s: want a .png or .svg file", f.name, f.path)}
		}
	}
	for _, f := range []struct{ name, path string }{{"--hist", *hist}, {"--share", *shareF}, {"--trace", *traceF}} {
		if f.path != "" {
			if err := checkWritable("prof: "+f.name, f.path); err != nil {
				return err
			}
		}
	}
	rep, err := profile.Load(files)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return usageError{"prof: " + err.Error()}
		}
		return fmt.Errorf("prof: %w", err)
	}
	if err := rep.WriteText(os.Stdout); err != nil {
		return err
	}
	if *hist != "" {
		if err := profplot.Histograms(rep, *hist); err != nil {
			return fmt.Errorf("prof: --hist: %w", err)
		}
		fmt.Fprintf(os.Stderr, "braid prof: wrote %s\n", *hist)
	}
	if *shareF != "" {
		if err := profplot.Shares(rep, *shareF); err != nil {
			return fmt.Errorf("prof: --share: %w", err)
		}
		fmt.Fprintf(os.Stderr, "braid prof: wrote %s\n", *shareF)
	}
	if *traceF != "" {
		if err := rep.WriteMergedTrace(*traceF); err != nil {
			return fmt.Errorf("prof: --trace: %w", err)
		}
		fmt.Fprintf(os.Stderr, "braid prof: wrote %s\n", *traceF)
	}
	return nil
}
