package main

import (
	"io"
	"log/slog"
)

type slogLogger = slog.Logger

// newSlog returns a text logger for warnings and errors.
func newSlog(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
