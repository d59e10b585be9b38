// Command lmlite is the one binary of the project: the gateway server, the engine's
// tools (run, score, tokenize, gen-model, bench) and the load-test suite.
//
// Each subcommand lives in its own file and registers itself in init, so that adding
// one never touches another.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

// command is one subcommand: its one-line summary and its entry point. run gets the
// arguments after the subcommand's name and returns an error for the one line that
// main prints.
type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) error) {
	if _, dup := commands[name]; dup {
		panic("lmlite: command registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

// errUsage asks main to print the subcommand's usage (the flag package did already).
var errUsage = errors.New("usage")

func usage() {
	fmt.Fprintln(os.Stderr, "usage: lmlite COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "lmlite: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) { // --help: the help is printed
			return
		}
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, errorLine(os.Args[1], err))
		os.Exit(1)
	}
}

// newFlags makes a FlagSet for a subcommand that reports errors instead of exiting;
// its Usage prints the subcommand's help (help.go) and flags.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("lmlite "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printHelp(fs, name) }
	if onNewFlags != nil {
		onNewFlags(fs)
	}
	return fs
}

// parseFlags parses args, mapping the flag package's own message to errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return flag.ErrHelp
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	return nil
}
