//go:build race

package gateway

const raceEnabled = true // the race detector drops sync.Pool items at random
