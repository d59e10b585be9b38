package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

func init() {
	register("version", "print the module version, the VCS commit and the Go version of the build", func(args []string) error {
		if err := parseFlags(newFlags("version"), args); err != nil {
			return err
		}
		bi, _ := debug.ReadBuildInfo()
		printVersion(os.Stdout, bi)
		return nil
	})
}

// printVersion prints the build's module version and commit, e.g.
// "lmlite (devel) commit 0123abcd… (modified) go1.26.8".
func printVersion(w io.Writer, bi *debug.BuildInfo) {
	if bi == nil {
		fmt.Fprintln(w, "lmlite (no build information)")
		return
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	commit := "commit unknown (built without VCS information: use make build, or go build -buildvcs=auto in a git checkout)"
	if rev != "" {
		commit = "commit " + rev + modified
		if at != "" {
			commit += " of " + at
		}
	}
	fmt.Fprintf(w, "lmlite %s %s %s\n", version, commit, bi.GoVersion)
}
