package main

import (
	"log/slog"
	"os"
)

// quietLogger logs warnings and errors only, to stderr: tools print their results on
// stdout.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
