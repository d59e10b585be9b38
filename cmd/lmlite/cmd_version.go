package main

import (
	"fmt"
	"runtime/debug"
)

func init() {
	register("version", "print the build's version", func(args []string) error {
		if err := parseFlags(newFlags("version"), args); err != nil {
			return err
		}
		v := "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					v = s.Value
				}
			}
		}
		fmt.Println("lmlite", v)
		return nil
	})
}
