package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// parseFlags parses args into fs. done says the command should return err
// at once: a usage error for a flag that does not parse, or nil after -h
// or --help, which print the usage (asking for help is not a mistake, so
// the exit status is 0).
func parseFlags(fs *flag.FlagSet, args []string) (done bool, err error) {
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return true, nil
	}
	if err != nil {
		return true, usageError{err.Error()}
	}
	return false, nil
}

// given returns the names of the flags set on the command line.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// splitArgs separates the words of args that are neither flags of fs nor
// their values (positional) from the flags (with their values), so that
// flags may come before or after a subcommand's operand. Everything after
// "--" is positional. A word after an unknown flag is taken for a flag's
// value; fs.Parse then reports the unknown flag.
func splitArgs(fs *flag.FlagSet, args []string) (positional, flags []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(positional, args[i+1:]...), flags
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") || i+1 >= len(args) {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		i++
		flags = append(flags, args[i])
	}
	return positional, flags
}

// checkWritable returns an error, naming the flag name, unless a file can be
// created in path's directory: output that is written after a long run
// is checked before it.
func checkWritable(name, path string) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".braid-check-*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return usageError{fmt.Sprintf("%s %s: cannot write in %s: %v", name, path, dir, err)}
	}
	f.Close()
	os.Remove(f.Name())
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usageError{fmt.Sprintf("%s %s: is a directory", name, path)}
	}
	return nil
}

// checkRanks checks -n N of cmd, when given (set): at least one rank, and
// not inside a job that a launcher already started (whose ranks would each
// start N more).
func checkRanks(cmd string, set bool, n int) error {
	if !set {
		return nil
	}
	if n < 1 {
		return usageError{fmt.Sprintf("%s: -n %d: want N ≥ 1 ranks to start", cmd, n)}
	}
	if os.Getenv("BRAID_RANK") != "" {
		return usageError{fmt.Sprintf("%s: -n %d inside a job (BRAID_RANK is set): the launcher has started the ranks; leave -n out", cmd, n)}
	}
	return nil
}
