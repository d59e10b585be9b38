//go:build race

package respstore

const raceEnabled = true // the race detector's instrumentation allocates where a build without it does not
