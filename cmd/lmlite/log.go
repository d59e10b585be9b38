package main

import (
	"io"
	"log/slog"
	"os"
)

// stdout and stderr are where serve and keys print (tests point them at a buffer
// before they start a server, and leave them until it stops).
var stdout, stderr io.Writer = os.Stdout, os.Stderr

// quietLogger logs warnings and errors only, to stderr: tools print their results on
// stdout.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
