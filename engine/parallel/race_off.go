//go:build !race

package parallel

// spinIters is how many times an idle worker polls for new work before it parks.
const spinIters = 20000

// raceBuild is whether the race detector is on (race_on.go).
const raceBuild = false
