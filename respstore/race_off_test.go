//go:build !race

package respstore

const raceEnabled = false
