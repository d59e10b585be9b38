package main

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// TestEveryCommandHasHelp runs `lmlite CMD --help` for every subcommand (and the
// actions of keys, loadtest and ledger) as a real process: it exits 0 and prints a
// Usage line, an example and every flag the command defines. The flags are those the
// command's FlagSets hold when it runs with --help in this process.
func TestEveryCommandHasHelp(t *testing.T) {
	var cases [][]string
	for name := range commands {
		if name == "worker" { // serve's child (engine/worker), not typed by hand
			continue
		}
		cases = append(cases, []string{name})
	}
	cases = append(cases, []string{"keys", "create"}, []string{"keys", "revoke"}, []string{"keys", "list"},
		[]string{"loadtest", "compare"}, []string{"loadtest", "ab"}, []string{"ledger", "verify"})
	// The processes (each starts this race-built test binary) run two at a time before
	// the subtests, which check what each printed: the in-process half below sets
	// package state (onNewFlags, the captured output) and stays sequential.
	type helpRun struct {
		out []byte
		err error
	}
	runs := make([]helpRun, len(cases))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, c := range cases {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := exec.Command(os.Args[0], append(append([]string{}, c...), "--help")...)
			cmd.Env = append(os.Environ(), "LMLITE_TEST_AS_LMLITE=1")
			runs[i].out, runs[i].err = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for i, c := range cases {
		t.Run(strings.Join(c, "_"), func(t *testing.T) {
			args := append(append([]string{}, c[1:]...), "--help")
			var sets []*flag.FlagSet
			onNewFlags = func(fs *flag.FlagSet) { sets = append(sets, fs) }
			defer func() { onNewFlags = nil }()
			captureOutput(t)
			if err := commands[c[0]].run(args); !errors.Is(err, flag.ErrHelp) {
				t.Errorf("run(%q) = %v, want flag.ErrHelp (main exits 0)", args, err)
			}

			out, err := runs[i].out, runs[i].err
			if err != nil {
				t.Fatalf("lmlite %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			help := string(out)
			if !strings.HasPrefix(help, "Usage: lmlite "+c[0]) || !strings.Contains(help, "\nExamples:\n  lmlite "+c[0]) {
				t.Errorf("lmlite %s %s: no Usage line or example:\n%s", c[0], strings.Join(args, " "), help)
			}
			if strings.Count(help, "Usage:") != 1 {
				t.Errorf("the usage is printed %d times:\n%s", strings.Count(help, "Usage:"), help)
			}
			n := 0
			for _, fs := range sets {
				fs.VisitAll(func(f *flag.Flag) {
					n++
					if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(f.Name) + `(\s|$)`).MatchString(help) {
						t.Errorf("flag -%s is not in the help:\n%s", f.Name, help)
					}
					if f.Name == "q" && !strings.Contains(f.Usage, "quiet") {
						t.Errorf("-q is %q, not quiet", f.Usage)
					}
				})
			}
			if len(sets) == 0 {
				t.Errorf("no FlagSet was made")
			}
		})
	}
}

// An error that names its command is not prefixed with the name twice.
func TestErrorLineHasNoDoubledPrefix(t *testing.T) {
	for _, c := range []struct{ name, err, want string }{
		{"pull", "pull: not in the cache", "lmlite pull: not in the cache"},
		{"pull", "bad model reference", "lmlite pull: bad model reference"},
		{"keys", "lmlite keys: x", "lmlite keys: x"},
		{"serve", "listen: in use", "lmlite serve: listen: in use"},
	} {
		if got := errorLine(c.name, errors.New(c.err)); got != c.want {
			t.Errorf("errorLine(%q, %q) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
}
